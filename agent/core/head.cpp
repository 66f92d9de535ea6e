#include "agent/core/head.hpp"

#include <google/protobuf/io/coded_stream.h>
#include <algorithm>
#include <filesystem>

#include "shared/common/duration_text.hpp"
#include "shared/common/limits.hpp"
#include "shared/common/log.hpp"
#include "shared/common/unix_time.hpp"
#include "shared/proto/frame.hpp"

namespace herd::agent {

namespace fs = std::filesystem;
using namespace herd::v1;

namespace {

// At most max bytes of text, cut at a character boundary (a proto3 string must stay UTF-8), with
// a note of the size it had.
void CutText(std::string& text, std::size_t max) {
  if (text.size() <= max) return;
  const std::string note = " [cut from " + std::to_string(text.size()) + " bytes]";
  std::size_t keep = max > note.size() ? max - note.size() : 0;
  while (keep > 0 && (static_cast<unsigned char>(text[keep]) & 0xC0) == 0x80) --keep;
  text.resize(keep);
  text += note;
}

// A job's record as the head sends it to a client: within limits::kMaxJobRecordBytes, whatever
// the store holds (a record of an older herd may have a name of megabytes). Its strings are cut
// first; a record still over (a gang of thousands of nodes) goes without its per-rank lists.
void FitRecord(JobInfo& info) {
  if (info.ByteSizeLong() <= limits::kMaxJobRecordBytes) return;
  for (std::string* text : {info.mutable_name(), info.mutable_user(), info.mutable_resources(),
                            info.mutable_first_failed_node(), info.mutable_log_path(),
                            info.mutable_message(), info.mutable_task_id()}) {
    CutText(*text, limits::kMaxJobRecordTextBytes);
  }
  if (info.ByteSizeLong() <= limits::kMaxJobRecordBytes) return;
  info.clear_exits();
  info.clear_node_ids();
  info.clear_rank_gpus();
}

// A JobStatus reply of the job's record (FitRecord).
HeadToClient JobStatusReply(const JobInfo& info, bool end_of_stream) {
  HeadToClient msg;
  JobInfo* job = msg.mutable_job_status()->mutable_job();
  *job = info;
  FitRecord(*job);
  msg.mutable_job_status()->set_end_of_stream(end_of_stream);
  return msg;
}

}  // namespace

Head::Head(boost::asio::io_context& io, Options options, HeadParts parts)
    : io_(io),
      options_(std::move(options)),
      own_clock_(parts.clock ? nullptr : std::make_unique<SystemClock>()),
      clock_(parts.clock ? *parts.clock : *own_clock_),
      own_spawner_(parts.spawner ? nullptr : std::make_unique<ShellSpawner>()),
      store_(std::move(parts.store)),
      check_timer_(io),
      nodes_(clock_),
      fanout_(io, options_.subscriber_lag_bytes,
              ClientSink{
                  [this](const ConnPtr& c, uint64_t id, HeadToClient m) {
                    SendToClient(c, id, std::move(m));
                  },
                  [this](const ConnPtr& c, uint64_t id, const Status& s) { ReplyError(c, id, s); },
                  JobStatusReply,
              }),
      autostop_(clock_, parts.spawner ? *parts.spawner : *own_spawner_, options_.state_dir) {}

Head::~Head() {
  *alive_ = false;
  Stop();
}

uint16_t Head::port() const { return server_ ? server_->port() : 0; }

Status Head::Start() {
  std::error_code ec;
  fs::create_directories(options_.state_dir + "/logs", ec);
  if (ec) return IoError("cannot create " + options_.state_dir + "/logs: " + ec.message());
  if (!store_) {
    HERD_ASSIGN_OR_RETURN(store_, JobStore::Open(options_.state_dir + "/jobs.db"));
  }
  JobRunner::Options ro;
  ro.cluster = options_.cluster;
  ro.cloud = options_.cloud;
  ro.state_dir = options_.state_dir;
  ro.expected_nodes = options_.expected_nodes;
  runner_ = std::make_unique<JobRunner>(
      io_, std::move(ro), clock_, *store_, nodes_, fanout_,
      JobRunner::Host{
          [this](const std::string& node_id, const HeadToAgent& m) { SendToAgent(node_id, m); },
          [this](const ConnPtr& c, uint64_t id, HeadToClient m) {
            SendToClient(c, id, std::move(m));
          }});
  nodes_.Started();
  std::map<std::string, uint64_t> incarnations;
  auto known = store_->ListNodes(&incarnations);
  for (auto& node : known.ok() ? *known : std::vector<NodeInfo>{}) {
    // Known, not alive until it registers again. Fencing survives the restart: an older agent is
    // still refused, a newer one is a restart.
    nodes_.Known(node, incarnations[node.node_id()]);
  }
  runner_->Recover();
  autostop_.Load();

  transport::ServerOptions so;
  so.host = options_.listen_host;
  so.port = options_.listen_port;
  so.tls = options_.tls;
  so.max_queued_bytes = options_.max_queued_bytes_per_peer;
  auto alive = alive_;
  so.handlers.on_message = [this, alive](const ConnPtr& c, std::string m) {
    if (*alive) OnMessage(c, std::move(m));
  };
  so.handlers.on_close = [this, alive](const ConnPtr& c, const Status& why) {
    if (*alive) OnClose(c, why);
  };
  HERD_ASSIGN_OR_RETURN(server_, transport::Listen(io_, std::move(so)));
  HERD_LOG(kInfo) << "head of cluster " << options_.cluster << " listening on "
                  << options_.listen_host << ":" << server_->port();
  CheckNodes();
  return Status::Ok();
}

void Head::Stop() {
  check_timer_.cancel();
  fanout_.Stop();
  if (server_) server_->Stop();
}

// ---------------------------------------------------------------------------------------------
// Connections

void Head::OnMessage(const ConnPtr& conn, std::string message) {
  if (conn->peer().role == transport::Role::kAgent) {
    auto msg = proto::Decode<AgentToHead>(message);
    if (!msg.ok()) {
      HERD_LOG(kError) << "dropping agent " << conn->peer().common_name << " ("
                       << conn->peer().remote_address << "): " << msg.status().message();
      conn->Close();
      return;
    }
    if (msg->msg_case() == AgentToHead::kLeaving) return HandleLeaving(conn, msg->leaving());
    HandleAgent(conn, *msg);
  } else if (conn->peer().role == transport::Role::kClient) {
    auto msg = proto::Decode<ClientToHead>(message);
    if (!msg.ok()) {
      HERD_LOG(kError) << "dropping client " << conn->peer().common_name << " ("
                       << conn->peer().remote_address << "): " << msg.status().message();
      conn->Close();
      return;
    }
    HandleClient(conn, *msg);
  } else {
    conn->Close();
  }
}

void Head::OnClose(const ConnPtr& conn, const Status& why) {
  std::string node_id;
  // An error ends an agent's connection that its kernel closed (the agent died): the node is
  // lost unless an agent registers within kNodeClosedGrace. A clean close keeps kNodeLostAfter.
  if (nodes_.Closed(conn.get(), &node_id, /*abrupt=*/!why.ok())) {
    if (!node_id.empty()) {
      HERD_LOG(kWarn) << "agent " << node_id << " disconnected: " << why.message();
    }
    return;
  }
  fanout_.Dropped(conn);
}

void Head::SendToAgent(const std::string& node_id, const HeadToAgent& msg) {
  NodeEntry* node = nodes_.Find(node_id);
  if (!node || !node->conn) {
    HERD_LOG(kWarn) << "node " << node_id << " is not connected; message kept for re-registration";
    return;
  }
  node->conn->Send(proto::Encode(msg));
}

void Head::SendToClient(const ConnPtr& conn, uint64_t request_id, HeadToClient msg) {
  msg.set_request_id(request_id);
  std::string frame = proto::Encode(std::move(msg));
  if (frame.size() > limits::kMaxFrameBytes) {
    // The client would drop the connection at a frame this large: it hears why instead. Every
    // reply is built to fit (the queue cut, FitRecord, the error cut); this is the last guard.
    HERD_LOG(kError) << "a reply of " << frame.size() << " bytes to " << conn->peer().common_name
                     << " is over the frame limit; sending an error instead";
    return ReplyError(
        conn, request_id,
        Internal("the head's reply (" + std::to_string(frame.size()) + " bytes) is over the " +
                 std::to_string(limits::kMaxFrameBytes) + "-byte frame limit"));
  }
  conn->Send(std::move(frame));
}

void Head::ReplyError(const ConnPtr& conn, uint64_t request_id, const Status& status) {
  HeadToClient msg;
  msg.mutable_error()->set_code(static_cast<int>(status.code()));
  std::string message = status.message();
  CutText(message, limits::kMaxErrorMessageBytes);
  msg.mutable_error()->set_message(std::move(message));
  SendToClient(conn, request_id, std::move(msg));
}

// ---------------------------------------------------------------------------------------------
// Agents

void Head::HandleAgent(const ConnPtr& conn, const AgentToHead& msg) {
  if (msg.msg_case() == AgentToHead::kRegister) {
    HandleRegister(conn, msg.register_());
    return;
  }
  NodeEntry* node = RegisteredNode(conn);
  if (!node) return;
  nodes_.Heard(*node);
  const std::string& node_id = node->info.node_id();
  switch (msg.msg_case()) {
    case AgentToHead::kHeartbeat:
      break;
    case AgentToHead::kStarted:
      if (runner_->RunsOn(node_id, msg.started().key())) runner_->HandleStarted(msg.started());
      break;
    case AgentToHead::kOutput:
      if (runner_->RunsOn(node_id, msg.output().key())) runner_->HandleOutput(msg.output());
      break;
    case AgentToHead::kExited:
      if (runner_->RunsOn(node_id, msg.exited().key())) runner_->HandleExited(msg.exited());
      break;
    case AgentToHead::kHealth:
      if (!msg.health().healthy() && !NodeRegistry::Drained(*node)) {
        Drain(node_id, "unhealthy: " + msg.health().reason(), /*end_jobs=*/true);
      } else if (msg.health().healthy() && NodeRegistry::Drained(*node)) {
        HERD_LOG(kInfo) << "node " << node_id << " reports healthy; it stays drained ("
                        << node->info.drain_reason() << ") until `herd nodes --undrain`";
      }
      break;
    case AgentToHead::kSpotNotice: {
      // Its cloud takes the node back at that time: no new jobs on it, and its jobs stop now with
      // their grace, so that a job that checkpoints on SIGTERM saves before the node goes.
      const std::string when = msg.spot_notice().time() + " (" + msg.spot_notice().action() + ")";
      if (!NodeRegistry::Drained(*node)) {
        Drain(node_id, "spot interruption notice for " + when, /*end_jobs=*/false);
      }
      runner_->StopJobsOnSpotNotice(node_id, when);
      runner_->Schedule();
      break;
    }
    case AgentToHead::kHung:
      if (runner_->RunsOn(node_id, msg.hung().key())) runner_->HandleHung(msg.hung());
      break;
    case AgentToHead::kStacks:
      runner_->HandleStackReport(node_id, msg.stacks());
      break;
    default:
      HERD_LOG(kWarn) << "ignoring unknown agent message";
  }
}

NodeEntry* Head::RegisteredNode(const ConnPtr& conn) {
  bool registered = false;
  NodeEntry* node = nodes_.RegisteredOn(conn.get(), &registered);
  if (!registered) {
    HERD_LOG(kError) << "dropping agent " << conn->peer().common_name
                     << ": message before registration";
    conn->Close();
  }
  return node;  // null for a fenced-out (stale) connection too
}

Status Head::ProvesNode(const transport::PeerIdentity& peer, const std::string& node_id) const {
  if (peer.node_name.empty()) {
    return PermissionDenied("its certificate (" + peer.common_name +
                            ") proves no node: issued by an older herd; `herd launch -c " +
                            options_.cluster + "` issues the node a new one");
  }
  if (peer.node_cluster != options_.cluster || peer.node_name != node_id) {
    return PermissionDenied("its certificate proves node " + peer.node_name + " of cluster " +
                            peer.node_cluster + ", not node " + node_id + " of cluster " +
                            options_.cluster);
  }
  return Status::Ok();
}

void Head::HandleRegister(const ConnPtr& conn, const Register& reg) {
  const std::string& id = reg.node().node_id();
  auto reject = [&](const std::string& reason) {
    HERD_LOG(kWarn) << "refusing registration of " << id << ": " << reason;
    HeadToAgent ack;
    ack.mutable_register_ack()->set_accepted(false);
    ack.mutable_register_ack()->set_reason(reason);
    conn->Send(proto::Encode(ack));
    conn->Close();
  };
  if (id.empty() || reg.node().addresses_size() == 0) return reject("node_id and address required");
  // Only the holder of node id's certificate may register as id: nothing of a refused registration
  // (no node entry, no incarnation, no dropped connection of the real agent) is kept.
  if (Status proven = ProvesNode(conn->peer(), id); !proven.ok()) {
    HERD_LOG(kError) << "refusing registration as node " << id << " from "
                     << conn->peer().remote_address << ": " << proven.message();
    return reject(proven.message());
  }
  if (auto stale = nodes_.WhyStale(id, reg.incarnation())) return reject(*stale);
  // A higher incarnation is a new agent process. It adopts what the old one supervised (its
  // persisted process table) and reports it in running[]; a process it does not report was lost.
  const NodeRegistry::Registered registered = nodes_.Register(conn, reg.node(), reg.incarnation());
  const NodeEntry& node = *registered.node;
  const bool was_alive = registered.was_alive;
  const bool agent_restarted = registered.agent_restarted;
  if (auto s = store_->UpsertNode(node.info, node.incarnation); !s.ok()) {
    HERD_LOG(kError) << s.message();
  }
  HERD_LOG(kInfo) << "node " << id << " registered from " << conn->peer().remote_address
                  << (was_alive ? " (reconnect)" : "");

  HeadToAgent ack;
  ack.mutable_register_ack()->set_accepted(true);
  ack.mutable_register_ack()->set_cluster_name(options_.cluster);
  conn->Send(proto::Encode(ack));

  runner_->CatchUp(conn, id, reg, agent_restarted);
  runner_->Schedule();
}

void Head::CheckNodes() {
  const std::vector<std::string> lost = nodes_.CheckLiveness();
  for (const auto& id : lost) NodeLost(id);
  autostop_.Check(!runner_->empty());
  runner_->CheckRunLimits();
  check_timer_.expires_after(limits::kNodeCheckInterval);
  auto alive = alive_;
  check_timer_.async_wait([this, alive](boost::system::error_code ec) {
    if (!ec && *alive) CheckNodes();
  });
}

void Head::NodeLost(const std::string& node_id) {
  const NodeEntry* node = nodes_.Find(node_id);
  const std::string why =
      node && node->lost_on_close
          ? "its agent's connection was closed and it did not come back within " +
                DurationText(limits::kNodeClosedGrace)
          : "no message from it for " + std::to_string(limits::kNodeLostAfter.count() / 1000) +
                " s";
  HERD_LOG(kError) << "node " << node_id << " lost: " << why;
  nodes_.MarkLost(node_id);
  runner_->NodeLost(node_id, why);
  runner_->Schedule();
}

void Head::Drain(const std::string& node_id, const std::string& reason, bool end_jobs) {
  NodeEntry* node = nodes_.SetDrain(node_id, reason, NowUnixMs());
  if (!node) return;
  if (reason.empty()) {
    HERD_LOG(kInfo) << "node " << node_id << " undrained";
  } else {
    HERD_LOG(kWarn) << "node " << node_id << " drained: " << node->info.drain_reason();
  }
  if (auto s = store_->UpsertNode(node->info, node->incarnation); !s.ok()) {
    HERD_LOG(kError) << s.message();
  }
  if (end_jobs && !reason.empty()) runner_->EndJobsOnDrained(node_id, node->info.drain_reason());
  runner_->Schedule();
}

void Head::HandleLeaving(const ConnPtr& conn, const Leaving& leaving) {
  NodeEntry* node = RegisteredNode(conn);
  if (!node) return;
  nodes_.Leaving(*node, leaving.reason());
  // Its connection closes next (OnClose); its processes fail only if it is not back in time
  // (CheckNodes), as for any silent node: a restart is a stop and a start.
  HERD_LOG(kWarn) << "node " << node->info.node_id() << " is stopping: " << node->left_reason
                  << "; nothing restarts its agent but " << runner_->RestartCommand();
}

// ---------------------------------------------------------------------------------------------
// Clients

void Head::HandleClient(const ConnPtr& conn, const ClientToHead& msg) {
  switch (msg.msg_case()) {
    case ClientToHead::kSubmit:
      Submit(conn, msg.request_id(), msg.submit());
      break;
    case ClientToHead::kSubscribe:
      Subscribe(conn, msg.request_id(), msg.subscribe());
      break;
    case ClientToHead::kQueue:
      Queue(conn, msg.request_id(), msg.queue());
      break;
    case ClientToHead::kCancel:
      Cancel(conn, msg.request_id(), msg.cancel());
      break;
    case ClientToHead::kNodes:
      Nodes(conn, msg.request_id());
      break;
    case ClientToHead::kSetAutostop:
      SetAutostop(conn, msg.request_id(), msg.set_autostop());
      break;
    case ClientToHead::kDrain: {
      const DrainRequest& req = msg.drain();
      if (!nodes_.Find(req.node_id())) {
        return ReplyError(conn, msg.request_id(),
                          NotFound("no node " + req.node_id() + " in cluster " + options_.cluster));
      }
      if (req.drain() && req.reason().empty()) {
        return ReplyError(conn, msg.request_id(), InvalidArgument("--drain needs a --reason"));
      }
      // A user's drain lets the node's running jobs finish (Slurm's DRAINING); an unhealthy
      // node's jobs end at once (HandleAgent).
      Drain(req.node_id(), req.drain() ? req.reason() : "", /*end_jobs=*/false);
      Nodes(conn, msg.request_id());
      break;
    }
    case ClientToHead::kStack:
      if (Status s = runner_->RequestStacks(conn, msg.request_id(), msg.stack()); !s.ok()) {
        ReplyError(conn, msg.request_id(), s);
      }
      break;
    default:
      ReplyError(conn, msg.request_id(), InvalidArgument("unknown request"));
  }
}

void Head::Submit(const ConnPtr& conn, uint64_t request_id, const SubmitJob& submit) {
  auto reply = runner_->Submit(submit);
  if (!reply.ok()) return ReplyError(conn, request_id, reply.status());
  SendToClient(conn, request_id, std::move(*reply));
  runner_->Schedule();
}

void Head::Subscribe(const ConnPtr& conn, uint64_t request_id, const herd::v1::Subscribe& sub) {
  if (Status s = runner_->Subscribe(conn, request_id, sub); !s.ok()) {
    ReplyError(conn, request_id, s);
  }
}

void Head::Queue(const ConnPtr& conn, uint64_t request_id, const QueueRequest& req) {
  auto total = store_->CountJobs(req.skip_finished());
  if (!total.ok()) return ReplyError(conn, request_id, total.status());
  HeadToClient reply;
  QueueReply* queue = reply.mutable_queue_reply();  // set even when empty: a message is required
  // Newest first, each record as a client gets it (FitRecord), while the next still fits the
  // frame (kMaxQueueReplyBytes: what the jobs field may take); the others are counted.
  std::size_t bytes = 0;
  Status listed =
      store_->ForEachJobInfo(req.skip_finished(), limits::kMaxJobsListed, [&](JobInfo info) {
        FitRecord(info);
        const std::size_t size = info.ByteSizeLong();
        const std::size_t field =
            1 + google::protobuf::io::CodedOutputStream::VarintSize64(size) + size;
        if (bytes + field > limits::kMaxQueueReplyBytes) return false;
        bytes += field;
        *queue->add_jobs() = std::move(info);
        return true;
      });
  if (!listed.ok()) return ReplyError(conn, request_id, listed);
  queue->set_older_left_out(std::max<int64_t>(0, *total - queue->jobs_size()));
  SendToClient(conn, request_id, std::move(reply));
}

void Head::Cancel(const ConnPtr& conn, uint64_t request_id, const CancelRequest& req) {
  auto cancelled = runner_->Cancel(req);
  if (!cancelled.ok()) return ReplyError(conn, request_id, cancelled.status());
  HeadToClient reply;
  reply.mutable_cancel_reply();  // set even when nothing was cancelled
  for (int64_t id : *cancelled) reply.mutable_cancel_reply()->add_cancelled(id);
  SendToClient(conn, request_id, std::move(reply));
  runner_->Schedule();
}

void Head::Nodes(const ConnPtr& conn, uint64_t request_id) {
  HeadToClient reply;
  reply.mutable_nodes_reply();  // set even before any node registered
  for (const auto& n : nodes_.OrderedInfos(false)) {
    *reply.mutable_nodes_reply()->add_nodes() = n;
    const NodeEntry& e = *nodes_.Find(n.node_id());
    reply.mutable_nodes_reply()->add_alive(NodeRegistry::Up(e));
    *reply.mutable_nodes_reply()->add_health() = nodes_.HealthOf(e);
  }
  reply.mutable_nodes_reply()->set_autostop_due(autostop_.due());
  SendToClient(conn, request_id, std::move(reply));
}

void Head::SetAutostop(const ConnPtr& conn, uint64_t request_id, const herd::v1::SetAutostop& req) {
  if (Status s = autostop_.Set(req); !s.ok()) return ReplyError(conn, request_id, s);
  HeadToClient reply;
  reply.mutable_autostop_reply()->set_idle_minutes(req.idle_minutes());
  SendToClient(conn, request_id, std::move(reply));
}

}  // namespace herd::agent
