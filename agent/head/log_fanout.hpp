// run.log fan-out: each job's merged log (RunLog) and the clients that follow or replay it
// (LogFanout). Bytes are written to run.log, then sent to each following client from its offset.
// A client that falls behind (more than lag_bytes queued) gets no live data; it is served from
// run.log, where every byte already is, once its queue has drained (CatchUp, every
// limits::kSubscriberCatchUpInterval while any is behind): the head's memory per client stays
// bounded and a slow terminal is not dropped. A replay (`herd logs` of a finished job, a
// subscription that does not follow, a lagging follower whose job ended) is paced the same way,
// then ends with JobStatus{end_of_stream}: a log of any size reaches the client without ever
// being queued whole.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <cstdint>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "herd/v1/client.pb.h"
#include "shared/common/status.hpp"
#include "shared/transport/transport.hpp"

namespace herd::agent {

// How the fan-out reaches a client: through the head, which keeps every reply under the frame
// limit.
struct ClientSink {
  using ConnPtr = std::shared_ptr<transport::Connection>;
  std::function<void(const ConnPtr&, uint64_t request_id, herd::v1::HeadToClient)> send;
  std::function<void(const ConnPtr&, uint64_t request_id, const Status&)> error;
  // The JobStatus reply of a job's record.
  std::function<herd::v1::HeadToClient(const herd::v1::JobInfo&, bool end_of_stream)> status;
};

class LogFanout;

// One job's run.log (opened for appending) and the clients following it. Registered with its
// LogFanout from Open until it is destroyed.
// The byte offset in `path` at which its last `lines` lines start, looking at its first `end`
// bytes (the newline that ends the last line does not start another); 0 when it has fewer lines,
// `end` for lines <= 0 or a file that cannot be read.
uint64_t OffsetOfLastLines(const std::string& path, uint64_t end, int lines);

class RunLog {
 public:
  RunLog() = default;
  ~RunLog();
  RunLog(const RunLog&) = delete;
  RunLog& operator=(const RunLog&) = delete;

  // Opens (creates) path for appending, from size 0 or, resume (a restarted head's job), from
  // what it already holds. The log is registered with fanout even when it cannot be opened (its
  // followers then get every byte live).
  Status Open(LogFanout& fanout, int64_t job_id, std::string path, bool resume = false);
  // Appends bytes; 0, or the errno of a failed write, after which run.log is closed and not
  // written again (writable() is false). Followers get them from Publish.
  int Write(std::string_view bytes);
  // Cuts run.log back to size (a restarted head drops what it had not journaled); false when
  // it cannot.
  bool Truncate(uint64_t size);
  void Close();

  const std::string& path() const { return path_; }
  // Bytes of the job's output so far: run.log's size while it is writable.
  uint64_t size() const { return size_; }
  bool writable() const { return fd_ >= 0; }

 private:
  friend class LogFanout;
  struct Subscriber {
    std::weak_ptr<transport::Connection> conn;
    uint64_t request_id = 0;
    uint64_t sent = 0;  // bytes queued for it so far
    bool lagging = false;
  };

  LogFanout* fanout_ = nullptr;
  int64_t job_id_ = 0;
  std::string path_;
  int fd_ = -1;
  uint64_t size_ = 0;
  std::vector<Subscriber> subs_;
};

class LogFanout {
 public:
  using ConnPtr = std::shared_ptr<transport::Connection>;

  // lag_bytes: a follower with more than this queued is served from run.log once it has drained.
  LogFanout(boost::asio::io_context& io, std::size_t lag_bytes, ClientSink sink);
  ~LogFanout();
  LogFanout(const LogFanout&) = delete;
  LogFanout& operator=(const LogFanout&) = delete;
  void Stop();

  // A client asks for an active job's log from offset: its state first (the client prints its
  // banner from it), then the log; follow: and every byte after, until the job ends.
  void Subscribe(RunLog& log, const herd::v1::JobInfo& info, const ConnPtr& conn,
                 uint64_t request_id, uint64_t offset, bool follow);
  // The same for a job that is over: its state, run.log from offset, then end_of_stream.
  void SubscribeEnded(const herd::v1::JobInfo& info, const ConnPtr& conn, uint64_t request_id,
                      uint64_t offset);
  // bytes were appended to the job's output (after RunLog::Write): each follower gets them, or
  // falls behind and is served from run.log.
  void Publish(RunLog& log, std::string_view bytes);
  // The job's state changed: each follower hears it. At end_of_stream, a follower that is behind
  // gets the rest of run.log first (as a replay); then the job has no followers.
  void Notify(RunLog& log, const herd::v1::JobInfo& info, bool end_of_stream);
  // conn closed: it follows nothing any more.
  void Dropped(const ConnPtr& conn);

 private:
  friend class RunLog;
  struct Replay {
    std::weak_ptr<transport::Connection> conn;
    uint64_t request_id = 0;
    std::string path;
    uint64_t next = 0;
    uint64_t end = 0;
    herd::v1::JobInfo final_info;
  };

  // Sends run.log's bytes [from, to) as LogData frames of at most kLogReplayChunkBytes.
  Status ReplayLog(const ConnPtr& conn, uint64_t request_id, int64_t job_id,
                   const std::string& path, uint64_t from, uint64_t to);
  void StartReplay(Replay replay);
  // Sends the next part of a replay; true when it is done (or its client gone) and can go.
  bool PumpReplay(Replay& replay);
  // Serves lagging followers of every job and every replay from run.log as far as their queues
  // allow; rearms the timer while any is left.
  void CatchUp();
  void CatchUp(RunLog& log);

  boost::asio::io_context& io_;
  std::size_t lag_bytes_;
  ClientSink sink_;
  boost::asio::steady_timer timer_;  // armed while a follower lags or a replay is left
  std::map<int64_t, RunLog*> logs_;  // open jobs' logs, by job id
  std::list<Replay> replays_;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace herd::agent
