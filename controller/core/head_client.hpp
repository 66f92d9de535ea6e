// A client of one cluster's head: submit, follow logs, list and cancel jobs, list nodes. Calls are
// synchronous; each runs the connection's own io_context on the calling thread.
#pragma once

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <chrono>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "herd/v1/client.pb.h"
#include "shared/common/status.hpp"
#include "shared/transport/transport.hpp"

namespace herd::controller {

// Where a head is and the client certificate to reach it with.
struct HeadEndpoint {
  std::string host;
  uint16_t port = 0;
  std::string certs_dir;  // ca.crt, client.crt, client.key
  // The cluster's mux socket (controller/core/mux.hpp), tried before dialling; "" for none.
  std::string mux_socket = "";
};

// What the cluster operations (controller/ops) and the CLI ask of a head: the seam that unit tests
// fake (tests/fakes/fake_head.hpp). HeadClient is the real one.
class HeadApi {
 public:
  virtual ~HeadApi() = default;

  struct StreamCallbacks {
    std::function<void(std::string_view bytes)> on_data;      // run.log bytes, in order
    std::function<void(const herd::v1::JobInfo&)> on_status;  // every state change
    std::function<bool()> interrupted;                        // polled; true stops streaming
    // Asked while redialing a dropped head, once it has been gone for limits::kNodeLostAfter:
    // true (the head's machine is gone too) ends the wait at once, as if the reconnect window
    // had run out. Unset: the whole window is waited.
    std::function<bool()> head_node_lost;
  };

  // task_id/attempt: a managed job's SKYPILOT_TASK_ID and attempt number (SubmitJob in
  // client.proto); empty/0 for an ordinary job.
  virtual Result<int64_t> Submit(const herd::v1::TaskSpec& task, const std::string& user,
                                 const std::string& task_id = "", int attempt = 0) = 0;
  // A submit with all that SubmitJob carries (job arrays, dependencies). This default sends what
  // Submit takes and refuses a request with more.
  virtual Result<herd::v1::SubmitReply> SubmitRequest(const herd::v1::SubmitJob& request);
  // Newest first; older_left_out (optional) gets how many older jobs the reply left out.
  virtual Result<std::vector<herd::v1::JobInfo>> Queue(bool skip_finished,
                                                       int64_t* older_left_out = nullptr) = 0;
  // grace: SIGTERM, then SIGKILL after it; unset: the job's own grace (TaskSpec.grace_ms), else
  // limits::kDefaultStopGrace.
  virtual Result<std::vector<int64_t>> Cancel(
      const std::vector<int64_t>& job_ids, bool all,
      std::optional<std::chrono::milliseconds> grace = std::nullopt) = 0;
  // Every rank's stacks of a running job (0: the latest), captured without stopping it.
  virtual Result<herd::v1::StackReply> Stacks(int64_t job_id) = 0;
  virtual Result<herd::v1::NodesReply> Nodes() = 0;
  // Drains node_id for `reason` (drain) or undrains it; the nodes after. This default refuses (a
  // connection that cannot send the request).
  virtual Result<herd::v1::NodesReply> Drain(const std::string& node_id, bool drain,
                                             const std::string& reason);
  virtual Status SetAutostop(const herd::v1::SetAutostop& setting) = 0;
  // Streams the merged log of job_id (0: the latest job) from offset. With follow, returns when the
  // job ended (after its last byte) or interrupted() turned true. Returns the last JobInfo seen.
  // tail_lines > 0: start at the log's last tail_lines lines (or at offset, if later).
  virtual Result<herd::v1::JobInfo> Stream(int64_t job_id, uint64_t offset, bool follow,
                                           const StreamCallbacks& callbacks,
                                           int tail_lines = 0) = 0;
  // Whether the connection is still open (what arrived meanwhile is taken in first): one that is
  // may be used again for another command (ops::KeepHeadConnections). This default says no.
  virtual bool StillOpen() { return false; }
};

class HeadClient final : public HeadApi {
 public:
  static Result<std::unique_ptr<HeadClient>> Connect(const HeadEndpoint& endpoint);
  ~HeadClient() override;

  Result<int64_t> Submit(const herd::v1::TaskSpec& task, const std::string& user,
                         const std::string& task_id = "", int attempt = 0) override;
  Result<herd::v1::SubmitReply> SubmitRequest(const herd::v1::SubmitJob& request) override;
  Result<std::vector<herd::v1::JobInfo>> Queue(bool skip_finished,
                                               int64_t* older_left_out = nullptr) override;
  Result<std::vector<int64_t>> Cancel(
      const std::vector<int64_t>& job_ids, bool all,
      std::optional<std::chrono::milliseconds> grace = std::nullopt) override;
  Result<herd::v1::StackReply> Stacks(int64_t job_id) override;
  Result<herd::v1::NodesReply> Nodes() override;
  Result<herd::v1::NodesReply> Drain(const std::string& node_id, bool drain,
                                     const std::string& reason) override;
  Status SetAutostop(const herd::v1::SetAutostop& setting) override;
  // Runs when the client is destroyed (e.g. to cancel the SSH port-forward it came through).
  void SetCleanup(std::function<void()> cleanup) { cleanup_ = std::move(cleanup); }
  // Where to redial after a dropped connection (Stream's reconnect); by default the endpoint it
  // connected to. A cluster's client renews its SSH port-forward here when the master died.
  void SetRedial(std::function<Result<HeadEndpoint>()> redial) { redial_ = std::move(redial); }
  // Asked by a followed Stream that lost its connection, before each redial: a non-ok answer
  // (the cluster is being taken down or is gone: redialing cannot bring the job back) ends the
  // Stream at once with that status instead of retrying for limits::kClientReconnectWindow. An
  // ok answer (a head restarting, a forward to renew) lets it redial as before.
  void SetGoneCheck(std::function<Status()> gone) { gone_ = std::move(gone); }
  // The last (re)connection went through the cluster's mux.
  bool via_mux() const { return via_mux_; }
  bool StillOpen() override;

  // Streams the merged log of job_id (0: the latest job) from offset. With follow, returns when the
  // job ended (after its last byte) or interrupted() turned true; a dropped connection is redialed
  // and the stream resumed from the last byte received, for up to limits::kClientReconnectWindow
  // (less when head_node_lost says so), unless the gone check (SetGoneCheck) says the cluster is
  // being taken down: then Cancelled("cluster ... was taken down ... while job N was running").
  // Returns the last JobInfo seen.
  Result<herd::v1::JobInfo> Stream(int64_t job_id, uint64_t offset, bool follow,
                                   const StreamCallbacks& callbacks, int tail_lines = 0) override;

 private:
  explicit HeadClient(HeadEndpoint endpoint);
  Status Dial();
  Result<herd::v1::HeadToClient> RoundTrip(herd::v1::ClientToHead request);
  // Runs the io_context until a message for request_id arrives, the connection drops, or timeout.
  Result<herd::v1::HeadToClient> Next(uint64_t request_id, std::chrono::milliseconds timeout,
                                      const std::function<bool()>& interrupted);

  HeadEndpoint endpoint_;
  boost::asio::io_context io_;
  std::shared_ptr<transport::Connection> conn_;
  std::deque<std::string> inbox_;
  bool closed_ = false;
  Status close_reason_;
  uint64_t next_request_id_ = 1;
  bool via_mux_ = false;
  std::function<void()> cleanup_;
  std::function<Result<HeadEndpoint>()> redial_;
  std::function<Status()> gone_;
};

// Exit codes of a followed job (REFERENCE.md): 0 succeeded, 100 failed, 101 not finished,
// 102 not found, 103 cancelled.
int ExitCodeForJob(const herd::v1::JobInfo& job);
inline constexpr int kExitFailed = 100;
inline constexpr int kExitNotFinished = 101;
inline constexpr int kExitNotFound = 102;
inline constexpr int kExitCancelled = 103;

}  // namespace herd::controller
