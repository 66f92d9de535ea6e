#include "controller/core/head_client.hpp"

#include <optional>
#include <thread>

#include "controller/core/mux.hpp"
#include "controller/core/trace.hpp"
#include "shared/common/limits.hpp"
#include "shared/common/log.hpp"
#include "shared/proto/frame.hpp"
#include "shared/transport/framed_socket.hpp"

namespace herd::controller {

using namespace herd::v1;

int ExitCodeForJob(const JobInfo& job) {
  switch (job.state()) {
    case JOB_STATE_SUCCEEDED:
      return 0;
    case JOB_STATE_FAILED:
    case JOB_STATE_FAILED_SETUP:
    case JOB_STATE_FAILED_DRIVER:
      return kExitFailed;
    case JOB_STATE_CANCELLED:
      return kExitCancelled;
    default:
      return kExitNotFinished;
  }
}

HeadClient::HeadClient(HeadEndpoint endpoint) : endpoint_(std::move(endpoint)) {}

HeadClient::~HeadClient() {
  if (conn_) conn_->Close();
  io_.restart();
  io_.run_for(std::chrono::milliseconds(200));
  if (cleanup_) cleanup_();
  TraceMark("connection closed");
}

Result<std::unique_ptr<HeadClient>> HeadClient::Connect(const HeadEndpoint& endpoint) {
  std::unique_ptr<HeadClient> c(new HeadClient(endpoint));
  HERD_RETURN_IF_ERROR(c->Dial());
  return c;
}

Status HeadClient::Dial() {
  via_mux_ = false;
  closed_ = false;
  inbox_.clear();
  transport::Handlers handlers;
  handlers.on_message = [this](const auto& conn, std::string m) {
    if (conn == conn_) inbox_.push_back(std::move(m));
  };
  handlers.on_close = [this](const auto& conn, const Status& why) {
    if (conn != conn_) return;
    closed_ = true;
    close_reason_ = why;
  };
  if (!endpoint_.mux_socket.empty()) {
    auto socket =
        ConnectMux(io_, endpoint_.mux_socket, endpoint_.host + ":" + std::to_string(endpoint_.port),
                   endpoint_.certs_dir);
    if (socket.ok()) {
      io_.restart();
      conn_ = transport::StartFramed(std::move(socket).value(), handlers, endpoint_.mux_socket);
      via_mux_ = true;
      TraceMark("head connected (through the mux)");
      return Status::Ok();
    }
    // No mux, a dead one's socket, a stale one: dial the head as without a mux.
    HERD_LOG(kDebug) << socket.status().message() << "; dialling the head";
  }
  transport::DialOptions o;
  o.host = endpoint_.host;
  o.port = endpoint_.port;
  o.tls = {endpoint_.certs_dir + "/ca.crt", endpoint_.certs_dir + "/client.crt",
           endpoint_.certs_dir + "/client.key"};
  o.role = transport::Role::kClient;
  o.handlers = handlers;
  std::optional<Result<std::shared_ptr<transport::Connection>>> result;
  io_.restart();
  transport::Dial(io_, std::move(o), [&](Result<std::shared_ptr<transport::Connection>> r) {
    result.emplace(std::move(r));
  });
  while (!result) {
    if (io_.run_one() == 0) break;
  }
  if (!result) return Internal("dial finished without an answer");
  if (!result->ok()) {
    return Unavailable("cannot reach the head at " + endpoint_.host + ":" +
                       std::to_string(endpoint_.port) + ": " + result->status().message());
  }
  conn_ = std::move(*result).value();
  TraceMark("head connected (TCP, TLS, websocket)");
  return Status::Ok();
}

bool HeadClient::StillOpen() {
  if (!conn_ || closed_) return false;
  io_.restart();
  io_.poll();  // a close (or stray frames, dropped by Next) that came in while it was unused
  return !closed_;
}

Result<HeadToClient> HeadClient::Next(uint64_t request_id, std::chrono::milliseconds timeout,
                                      const std::function<bool()>& interrupted) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  io_.restart();
  while (true) {
    while (!inbox_.empty()) {
      std::string frame = std::move(inbox_.front());
      inbox_.pop_front();
      auto msg = proto::Decode<HeadToClient>(frame);
      if (!msg.ok()) return Internal("bad message from the head: " + msg.status().message());
      if (msg->request_id() == request_id) return std::move(msg).value();
    }
    if (closed_) {
      return Unavailable("connection to the head closed: " + close_reason_.message());
    }
    if (interrupted && interrupted()) return Cancelled("interrupted");
    if (std::chrono::steady_clock::now() > deadline) {
      return DeadlineExceeded("no answer from the head within " +
                              std::to_string(timeout.count() / 1000) + " s");
    }
    io_.run_one_for(std::chrono::milliseconds(100));
  }
}

Result<HeadToClient> HeadClient::RoundTrip(ClientToHead request) {
  uint64_t id = next_request_id_++;
  request.set_request_id(id);
  conn_->Send(proto::Encode(std::move(request)));
  HERD_ASSIGN_OR_RETURN(HeadToClient reply, Next(id, limits::kClientRequestTimeout, nullptr));
  if (reply.has_error()) {
    return Status(static_cast<Code>(reply.error().code()), reply.error().message());
  }
  return reply;
}

Result<int64_t> HeadClient::Submit(const TaskSpec& task, const std::string& user,
                                   const std::string& task_id, int attempt) {
  ClientToHead req;
  *req.mutable_submit()->mutable_task() = task;
  req.mutable_submit()->set_user(user);
  req.mutable_submit()->set_task_id(task_id);
  req.mutable_submit()->set_attempt(attempt);
  HERD_ASSIGN_OR_RETURN(HeadToClient reply, RoundTrip(std::move(req)));
  TraceMark("submit reply");
  return reply.submit_reply().job_id();
}

Result<herd::v1::SubmitReply> HeadApi::SubmitRequest(const herd::v1::SubmitJob& request) {
  if (request.has_array() || request.after_any_size() > 0 || request.after_ok_size() > 0) {
    return FailedPrecondition("this head connection cannot submit job arrays or dependencies");
  }
  HERD_ASSIGN_OR_RETURN(
      int64_t id, Submit(request.task(), request.user(), request.task_id(), request.attempt()));
  herd::v1::SubmitReply reply;
  reply.set_job_id(id);
  return reply;
}

Result<herd::v1::NodesReply> HeadApi::Drain(const std::string&, bool, const std::string&) {
  return FailedPrecondition("this head connection cannot drain nodes");
}

Result<herd::v1::NodesReply> HeadClient::Drain(const std::string& node_id, bool drain,
                                               const std::string& reason) {
  ClientToHead req;
  req.mutable_drain()->set_node_id(node_id);
  req.mutable_drain()->set_drain(drain);
  req.mutable_drain()->set_reason(reason);
  HERD_ASSIGN_OR_RETURN(HeadToClient reply, RoundTrip(std::move(req)));
  return reply.nodes_reply();
}

Result<herd::v1::SubmitReply> HeadClient::SubmitRequest(const herd::v1::SubmitJob& request) {
  ClientToHead req;
  *req.mutable_submit() = request;
  HERD_ASSIGN_OR_RETURN(HeadToClient reply, RoundTrip(std::move(req)));
  TraceMark("submit reply");
  return reply.submit_reply();
}

Result<std::vector<JobInfo>> HeadClient::Queue(bool skip_finished, int64_t* older_left_out) {
  ClientToHead req;
  req.mutable_queue()->set_skip_finished(skip_finished);
  HERD_ASSIGN_OR_RETURN(HeadToClient reply, RoundTrip(std::move(req)));
  if (older_left_out) *older_left_out = reply.queue_reply().older_left_out();
  return std::vector<JobInfo>(reply.queue_reply().jobs().begin(), reply.queue_reply().jobs().end());
}

Result<std::vector<int64_t>> HeadClient::Cancel(const std::vector<int64_t>& job_ids, bool all,
                                                std::optional<std::chrono::milliseconds> grace) {
  ClientToHead req;
  for (auto id : job_ids) req.mutable_cancel()->add_job_ids(id);
  req.mutable_cancel()->set_all(all);
  if (grace) req.mutable_cancel()->set_grace_ms(grace->count());
  HERD_ASSIGN_OR_RETURN(HeadToClient reply, RoundTrip(std::move(req)));
  return std::vector<int64_t>(reply.cancel_reply().cancelled().begin(),
                              reply.cancel_reply().cancelled().end());
}

Result<herd::v1::StackReply> HeadClient::Stacks(int64_t job_id) {
  ClientToHead req;
  req.mutable_stack()->set_job_id(job_id);
  HERD_ASSIGN_OR_RETURN(HeadToClient reply, RoundTrip(std::move(req)));
  return reply.stack_reply();
}

Result<NodesReply> HeadClient::Nodes() {
  ClientToHead req;
  req.mutable_nodes();
  HERD_ASSIGN_OR_RETURN(HeadToClient reply, RoundTrip(std::move(req)));
  TraceMark("nodes reply");
  return reply.nodes_reply();
}

Status HeadClient::SetAutostop(const herd::v1::SetAutostop& setting) {
  ClientToHead req;
  *req.mutable_set_autostop() = setting;
  HERD_ASSIGN_OR_RETURN(HeadToClient reply, RoundTrip(std::move(req)));
  (void)reply;
  return Status::Ok();
}

Result<JobInfo> HeadClient::Stream(int64_t job_id, uint64_t offset, bool follow,
                                   const StreamCallbacks& cb, int tail_lines) {
  JobInfo last;
  auto reconnect_deadline = std::chrono::steady_clock::time_point::max();
  while (true) {
    uint64_t id = next_request_id_++;
    ClientToHead req;
    req.set_request_id(id);
    req.mutable_subscribe()->set_job_id(job_id);
    req.mutable_subscribe()->set_offset(offset);
    req.mutable_subscribe()->set_follow(follow);
    // Only the first subscription: after a reconnect the log goes on from what was printed.
    req.mutable_subscribe()->set_tail_lines(tail_lines);
    tail_lines = 0;
    conn_->Send(proto::Encode(std::move(req)));
    Status lost;
    while (true) {
      // While following, a quiet job is normal: wait as long as it runs.
      auto msg = Next(id, follow ? std::chrono::hours(24 * 365) : limits::kClientRequestTimeout,
                      cb.interrupted);
      if (!msg.ok()) {
        if (msg.status().code() == Code::kUnavailable && follow) {
          lost = msg.status();
          break;
        }
        if (msg.status().code() == Code::kCancelled) return last;
        return msg.status();
      }
      reconnect_deadline = std::chrono::steady_clock::time_point::max();
      if (msg->has_error()) {
        return Status(static_cast<Code>(msg->error().code()), msg->error().message());
      }
      if (msg->has_log_data()) {
        const auto& d = msg->log_data();
        job_id = d.job_id();
        uint64_t end = d.offset() + d.data().size();
        if (end <= offset) continue;  // already printed
        std::string_view fresh(d.data());
        if (d.offset() < offset) fresh.remove_prefix(offset - d.offset());
        if (offset == 0) TraceMark("first output");
        if (cb.on_data) cb.on_data(fresh);
        offset = end;
      } else if (msg->has_job_status()) {
        last = msg->job_status().job();
        job_id = last.job_id();
        if (cb.on_status) cb.on_status(last);
        TraceMark(msg->job_status().end_of_stream() ? "end of stream" : "job status");
        if (msg->job_status().end_of_stream()) return last;
      }
    }
    // The connection dropped while following: resubscribe from the last byte printed.
    if (reconnect_deadline == std::chrono::steady_clock::time_point::max()) {
      reconnect_deadline = std::chrono::steady_clock::now() + limits::kClientReconnectWindow;
    }
    const auto node_lost_at =
        reconnect_deadline - limits::kClientReconnectWindow + limits::kNodeLostAfter;
    auto backoff = limits::kReconnectBackoffInitial;
    while (true) {
      if (cb.interrupted && cb.interrupted()) return last;
      auto now = std::chrono::steady_clock::now();
      if (now > reconnect_deadline) return lost.WithContext("gave up reconnecting");
      if (now >= node_lost_at && cb.head_node_lost && cb.head_node_lost()) {
        return lost.WithContext("the head node does not answer over ssh either");
      }
      std::this_thread::sleep_for(backoff);
      backoff = std::min(backoff * 2, limits::kReconnectBackoffMax);
      // Asked right before redialing: a redial renews the cluster's port-forward, which must not
      // make files again for a cluster that `herd down` is removing.
      if (gone_) {
        if (Status gone = gone_(); !gone.ok()) {
          const int64_t job = last.job_id() != 0 ? last.job_id() : job_id;
          return Status(gone.code(),
                        gone.message() + " while job " + std::to_string(job) + " was running");
        }
      }
      if (redial_) {
        auto where = redial_();
        if (!where.ok()) continue;
        endpoint_ = *where;
      }
      if (Dial().ok()) break;
    }
  }
}

}  // namespace herd::controller
