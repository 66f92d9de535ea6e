#include "agent/head/log_fanout.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <filesystem>

#include "shared/common/file_util.hpp"
#include "shared/common/limits.hpp"
#include "shared/common/log.hpp"

namespace herd::agent {

using namespace herd::v1;

// ---------------------------------------------------------------------------------------------
// RunLog

RunLog::~RunLog() {
  Close();
  if (fanout_) fanout_->logs_.erase(job_id_);
}

uint64_t OffsetOfLastLines(const std::string& path, uint64_t end, int lines) {
  if (lines <= 0 || end == 0) return end;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return end;
  char buf[64 * 1024];
  uint64_t pos = end;
  int newlines = 0;
  while (pos > 0) {
    const uint64_t n = std::min<uint64_t>(pos, sizeof buf);
    const ssize_t got = ::pread(fd, buf, n, static_cast<off_t>(pos - n));
    if (got != static_cast<ssize_t>(n)) break;
    for (uint64_t i = n; i-- > 0;) {
      const uint64_t at = pos - n + i;
      if (buf[i] != '\n' || at + 1 == end) continue;
      if (++newlines == lines) {
        ::close(fd);
        return at + 1;
      }
    }
    pos -= n;
  }
  ::close(fd);
  return pos == 0 ? 0 : end;
}

Status RunLog::Open(LogFanout& fanout, int64_t job_id, std::string path, bool resume) {
  fanout_ = &fanout;
  job_id_ = job_id;
  path_ = std::move(path);
  fanout.logs_[job_id] = this;
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd_ < 0) return ErrnoError("cannot create " + path_, errno);
  struct stat st {};
  if (resume && ::fstat(fd_, &st) == 0) size_ = static_cast<uint64_t>(st.st_size);
  return Status::Ok();
}

int RunLog::Write(std::string_view bytes) {
  if (fd_ < 0) return 0;  // not written again once a write failed
  const int err = WriteAll(fd_, bytes);
  if (err != 0) Close();
  return err;
}

bool RunLog::Truncate(uint64_t size) {
  if (fd_ < 0 || ::ftruncate(fd_, static_cast<off_t>(size)) != 0) return false;
  size_ = size;
  return true;
}

void RunLog::Close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

// ---------------------------------------------------------------------------------------------
// LogFanout

LogFanout::LogFanout(boost::asio::io_context& io, std::size_t lag_bytes, ClientSink sink)
    : io_(io), lag_bytes_(lag_bytes), sink_(std::move(sink)), timer_(io) {}

LogFanout::~LogFanout() {
  *alive_ = false;
  for (auto& [id, log] : logs_) log->fanout_ = nullptr;
}

void LogFanout::Stop() { timer_.cancel(); }

Status LogFanout::ReplayLog(const ConnPtr& conn, uint64_t request_id, int64_t job_id,
                            const std::string& path, uint64_t from, uint64_t to) {
  if (from >= to) return Status::Ok();
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoError("cannot read " + path, errno);
  std::string buf(limits::kLogReplayChunkBytes, '\0');
  uint64_t off = from;
  while (off < to) {
    std::size_t want = std::min<uint64_t>(buf.size(), to - off);
    ssize_t n = ::pread(fd, buf.data(), want, static_cast<off_t>(off));
    if (n <= 0) break;
    HeadToClient msg;
    msg.mutable_log_data()->set_job_id(job_id);
    msg.mutable_log_data()->set_offset(off);
    msg.mutable_log_data()->set_data(buf.data(), static_cast<std::size_t>(n));
    sink_.send(conn, request_id, std::move(msg));
    off += static_cast<uint64_t>(n);
  }
  ::close(fd);
  return Status::Ok();
}

void LogFanout::Subscribe(RunLog& log, const JobInfo& info, const ConnPtr& conn,
                          uint64_t request_id, uint64_t offset, bool follow) {
  sink_.send(conn, request_id, sink_.status(info, false));
  if (!log.writable()) {
    // run.log is not being written (full disk): what it has goes out now, then live bytes.
    if (auto s = ReplayLog(conn, request_id, info.job_id(), log.path(), offset, log.size());
        !s.ok()) {
      return sink_.error(conn, request_id, s);
    }
    if (follow) {
      log.subs_.push_back({conn, request_id, log.size()});
    } else {
      sink_.send(conn, request_id, sink_.status(info, true));
    }
    return;
  }
  if (follow) {
    // Starts behind by what run.log already has: CatchUp serves that, paced, then it follows.
    const uint64_t from = std::min<uint64_t>(offset, log.size());
    log.subs_.push_back({conn, request_id, from, from < log.size()});
    CatchUp();
    return;
  }
  StartReplay({conn, request_id, log.path(), offset, log.size(), info});
}

void LogFanout::SubscribeEnded(const JobInfo& info, const ConnPtr& conn, uint64_t request_id,
                               uint64_t offset) {
  sink_.send(conn, request_id, sink_.status(info, false));
  std::error_code ec;
  uint64_t size = std::filesystem::file_size(info.log_path(), ec);
  if (ec) size = 0;
  StartReplay({conn, request_id, info.log_path(), offset, size, info});
}

void LogFanout::StartReplay(Replay replay) {
  // The first part goes out now (an unreadable log: the client hears why now, from PumpReplay).
  if (PumpReplay(replay)) return;
  replays_.push_back(std::move(replay));
  CatchUp();
}

bool LogFanout::PumpReplay(Replay& replay) {
  auto conn = replay.conn.lock();
  if (!conn) return true;
  if (replay.next < replay.end) {
    if (conn->queued_bytes() > lag_bytes_ / 4) return false;
    const uint64_t to = std::min<uint64_t>(replay.end, replay.next + lag_bytes_ / 2);
    if (auto s = ReplayLog(conn, replay.request_id, replay.final_info.job_id(), replay.path,
                           replay.next, to);
        !s.ok()) {
      HERD_LOG(kError) << "job " << replay.final_info.job_id() << ": " << s.message();
      sink_.error(conn, replay.request_id, s);
      return true;
    }
    replay.next = to;
    if (replay.next < replay.end) return false;
  }
  sink_.send(conn, replay.request_id, sink_.status(replay.final_info, true));
  return true;
}

void LogFanout::Publish(RunLog& log, std::string_view bytes) {
  bool lagging = false;
  for (auto sub = log.subs_.begin(); sub != log.subs_.end();) {
    auto conn = sub->conn.lock();
    if (!conn) {
      sub = log.subs_.erase(sub);
      continue;
    }
    // Behind: served from run.log by CatchUp (where run.log could not be written, queued as ever).
    if (log.writable() && (sub->lagging || conn->queued_bytes() > lag_bytes_)) {
      if (!sub->lagging) {
        HERD_LOG(kInfo) << "job " << log.job_id_ << ": a client is " << conn->queued_bytes()
                        << " bytes behind; serving it from " << log.path();
      }
      sub->lagging = true;
      lagging = true;
      ++sub;
      continue;
    }
    sub->sent = log.size_ + bytes.size();
    // Prefixing can make a chunk much longer than the output it came from: keep frames small.
    for (std::size_t done = 0; done < bytes.size(); done += limits::kLogReplayChunkBytes) {
      std::size_t n = std::min(bytes.size() - done, limits::kLogReplayChunkBytes);
      HeadToClient msg;
      msg.mutable_log_data()->set_job_id(log.job_id_);
      msg.mutable_log_data()->set_offset(log.size_ + done);
      msg.mutable_log_data()->set_data(bytes.data() + done, n);
      sink_.send(conn, sub->request_id, std::move(msg));
    }
    ++sub;
  }
  log.size_ += bytes.size();
  if (lagging) CatchUp();
}

void LogFanout::Notify(RunLog& log, const JobInfo& info, bool end_of_stream) {
  bool replaying = false;
  for (const auto& sub : log.subs_) {
    auto conn = sub.conn.lock();
    if (!conn) continue;
    if (end_of_stream && sub.lagging) {
      // Every byte before the end of the stream: the rest of run.log, paced, then the status.
      replays_.push_back({conn, sub.request_id, log.path(), sub.sent, log.size(), info});
      replaying = true;
      continue;
    }
    sink_.send(conn, sub.request_id, sink_.status(info, end_of_stream));
  }
  // The stream has ended for every follower (a lagging one goes on as a replay, not twice).
  if (end_of_stream) log.subs_.clear();
  if (replaying) CatchUp();
}

void LogFanout::Dropped(const ConnPtr& conn) {
  for (auto& [id, log] : logs_) {
    std::erase_if(log->subs_, [&](const RunLog::Subscriber& s) {
      auto c = s.conn.lock();
      return !c || c == conn;
    });
  }
}

void LogFanout::CatchUp(RunLog& log) {
  for (auto sub = log.subs_.begin(); sub != log.subs_.end();) {
    auto conn = sub->conn.lock();
    if (!conn) {
      sub = log.subs_.erase(sub);
      continue;
    }
    // Refill up to half the lag bound once the queue is down to a quarter of it.
    if (sub->lagging && conn->queued_bytes() <= lag_bytes_ / 4) {
      uint64_t to = std::min<uint64_t>(log.size(), sub->sent + lag_bytes_ / 2);
      if (auto s = ReplayLog(conn, sub->request_id, log.job_id_, log.path(), sub->sent, to);
          !s.ok()) {
        HERD_LOG(kError) << "job " << log.job_id_ << ": " << s.message()
                         << "; a client that fell behind misses output";
        to = log.size();
      }
      sub->sent = to;
      sub->lagging = sub->sent < log.size();
    }
    ++sub;
  }
}

void LogFanout::CatchUp() {
  bool any = false;
  for (auto& [id, log] : logs_) {
    CatchUp(*log);
    for (const auto& sub : log->subs_) any = any || sub.lagging;
  }
  for (auto r = replays_.begin(); r != replays_.end();) {
    r = PumpReplay(*r) ? replays_.erase(r) : std::next(r);
  }
  any = any || !replays_.empty();
  // The timer runs on real time (asio): its expiry is compared with the steady clock's.
  if (!any || timer_.expiry() > std::chrono::steady_clock::now()) return;
  timer_.expires_after(limits::kSubscriberCatchUpInterval);
  auto alive = alive_;
  timer_.async_wait([this, alive](boost::system::error_code ec) {
    if (!ec && *alive) CatchUp();
  });
}

}  // namespace herd::agent
