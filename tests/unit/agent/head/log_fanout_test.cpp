// The run.log fan-out (agent/head/log_fanout): a follower gets every byte at its offset and the
// end of the stream; one that falls behind gets no live data and is served from run.log once its
// queue drains, before the end of the stream; a job that is over is replayed whole; where run.log
// cannot be written, followers still get the bytes live.
#include "agent/head/log_fanout.hpp"

#include <doctest/doctest.h>

#include <boost/asio/io_context.hpp>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "tests/unit/test_support.hpp"

namespace herd::agent {
namespace {

// A client connection whose queue the test sets.
class QueueConn : public transport::Connection {
 public:
  void Send(std::string) override {}
  void Close() override {}
  const transport::PeerIdentity& peer() const override { return peer_; }
  std::size_t queued_bytes() const override { return queued; }
  std::size_t queued = 0;

 private:
  transport::PeerIdentity peer_;
};

struct Sent {
  const transport::Connection* conn;
  uint64_t request_id;
  herd::v1::HeadToClient msg;
};

struct Fixture {
  static constexpr std::size_t kLag = 64;
  boost::asio::io_context io;
  std::vector<Sent> sent;
  std::vector<std::string> errors;
  LogFanout fanout{io, kLag,
                   ClientSink{
                       [this](const ClientSink::ConnPtr& c, uint64_t id, herd::v1::HeadToClient m) {
                         sent.push_back({c.get(), id, std::move(m)});
                       },
                       [this](const ClientSink::ConnPtr&, uint64_t, const Status& s) {
                         errors.push_back(s.message());
                       },
                       [](const herd::v1::JobInfo& info, bool eos) {
                         herd::v1::HeadToClient m;
                         *m.mutable_job_status()->mutable_job() = info;
                         m.mutable_job_status()->set_end_of_stream(eos);
                         return m;
                       },
                   }};

  // What conn got: its log bytes in order (checking each offset follows the last), and its
  // statuses (true for end_of_stream).
  std::string Data(const transport::Connection* conn, uint64_t from = 0) const {
    std::string data;
    uint64_t next = from;
    for (const auto& s : sent) {
      if (s.conn != conn || !s.msg.has_log_data()) continue;
      CHECK(s.msg.log_data().offset() == next);
      data += s.msg.log_data().data();
      next += s.msg.log_data().data().size();
    }
    return data;
  }
  std::vector<bool> Statuses(const transport::Connection* conn) const {
    std::vector<bool> out;
    for (const auto& s : sent) {
      if (s.conn == conn && s.msg.has_job_status()) {
        out.push_back(s.msg.job_status().end_of_stream());
      }
    }
    return out;
  }
};

herd::v1::JobInfo Info(int64_t id, const std::string& log_path) {
  herd::v1::JobInfo info;
  info.set_job_id(id);
  info.set_log_path(log_path);
  return info;
}

void Append(Fixture& f, RunLog& log, const std::string& bytes) {
  REQUIRE(log.Write(bytes) == 0);
  f.fanout.Publish(log, bytes);
}

TEST_CASE("a follower gets every byte at its offset, then the end of the stream") {
  testing::TempDir dir("fanout");
  Fixture f;
  RunLog log;
  const auto info = Info(1, dir / "run.log");
  REQUIRE(log.Open(f.fanout, 1, info.log_path()).ok());
  Append(f, log, "before\n");
  auto conn = std::make_shared<QueueConn>();
  f.fanout.Subscribe(log, info, conn, 9, 0, /*follow=*/true);  // from 0: run.log first
  Append(f, log, "after\n");
  CHECK(f.Data(conn.get()) == "before\nafter\n");
  CHECK(log.size() == 13);
  f.fanout.Notify(log, info, false);
  f.fanout.Notify(log, info, true);
  CHECK(f.Statuses(conn.get()) == std::vector<bool>{false, false, true});
  Append(f, log, "late\n");  // no follower any more
  CHECK(f.Data(conn.get()) == "before\nafter\n");
  CHECK(f.errors.empty());
}

TEST_CASE("a follower that falls behind is served from run.log once its queue drains") {
  testing::TempDir dir("fanout");
  Fixture f;
  RunLog log;
  const auto info = Info(2, dir / "run.log");
  REQUIRE(log.Open(f.fanout, 2, info.log_path()).ok());
  auto slow = std::make_shared<QueueConn>();
  auto fast = std::make_shared<QueueConn>();
  f.fanout.Subscribe(log, info, slow, 1, 0, true);
  f.fanout.Subscribe(log, info, fast, 2, 0, true);
  Append(f, log, "one\n");
  slow->queued = Fixture::kLag + 1;
  Append(f, log, "two\n");
  Append(f, log, "three\n");
  CHECK(f.Data(slow.get()) == "one\n");  // nothing live while behind
  CHECK(f.Data(fast.get()) == "one\ntwo\nthree\n");
  slow->queued = Fixture::kLag / 4;  // drained enough: the next pass refills it from run.log
  Append(f, log, "four\n");
  CHECK(f.Data(slow.get()) == "one\ntwo\nthree\nfour\n");
  // Behind again when the job ends: the rest of run.log, then the end of the stream.
  slow->queued = Fixture::kLag + 1;
  Append(f, log, std::string(100, 'x') + "\n");
  f.fanout.Notify(log, info, true);
  CHECK(f.Statuses(slow.get()) == std::vector<bool>{false});  // the end not before its bytes
  slow->queued = 0;
  // Served by the catch-up timer, at most kLag / 2 a pass.
  const std::string all = "one\ntwo\nthree\nfour\n" + std::string(100, 'x') + "\n";
  for (int i = 0; i < 20 && f.Statuses(slow.get()).size() < 2; ++i) f.io.run_one();
  CHECK(f.Data(slow.get()) == all);
  CHECK(f.Statuses(slow.get()) == std::vector<bool>{false, true});
  CHECK(f.Statuses(fast.get()) == std::vector<bool>{false, true});
}

TEST_CASE("a job that is over is replayed from run.log, then the end of the stream") {
  testing::TempDir dir("fanout");
  Fixture f;
  const std::string text = std::string(200, 'y') + "\nlast line\n";
  const auto info = Info(3, dir.Write("run.log", text));
  auto conn = std::make_shared<QueueConn>();
  f.fanout.SubscribeEnded(info, conn, 4, 0);
  // Paced: kLag / 2 at a time, a part at each pass of the catch-up timer.
  for (int i = 0; i < 20 && f.Statuses(conn.get()).size() < 2; ++i) f.io.run_one();
  CHECK(f.Data(conn.get()) == text);
  CHECK(f.Statuses(conn.get()) == std::vector<bool>{false, true});
  auto from = std::make_shared<QueueConn>();
  f.fanout.SubscribeEnded(info, from, 5, 201);
  CHECK(f.Data(from.get(), 201) == "last line\n");
}

TEST_CASE("where run.log cannot be written, followers still get every byte live") {
  testing::TempDir dir("fanout");
  Fixture f;
  RunLog log;
  const auto info = Info(4, dir / "missing/run.log");
  CHECK_FALSE(log.Open(f.fanout, 4, info.log_path()).ok());
  CHECK_FALSE(log.writable());
  auto conn = std::make_shared<QueueConn>();
  conn->queued = Fixture::kLag * 10;  // behind, but there is no run.log to serve it from
  f.fanout.Subscribe(log, info, conn, 1, 0, true);
  Append(f, log, "kept only in memory\n");
  CHECK(f.Data(conn.get()) == "kept only in memory\n");
}

TEST_CASE("a closed connection follows nothing") {
  testing::TempDir dir("fanout");
  Fixture f;
  RunLog log;
  const auto info = Info(5, dir / "run.log");
  REQUIRE(log.Open(f.fanout, 5, info.log_path()).ok());
  auto conn = std::make_shared<QueueConn>();
  f.fanout.Subscribe(log, info, conn, 1, 0, true);
  f.fanout.Dropped(conn);
  Append(f, log, "unseen\n");
  CHECK(f.Data(conn.get()).empty());
}

TEST_CASE("OffsetOfLastLines: where `logs --tail N` starts") {
  herd::testing::TempDir dir;
  const std::string path = dir.path() + "/run.log";
  auto write = [&](const std::string& text) {
    std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
    return static_cast<uint64_t>(text.size());
  };
  uint64_t end = write("a\nbb\nccc\n");
  CHECK(OffsetOfLastLines(path, end, 1) == 5);  // "ccc\n"
  CHECK(OffsetOfLastLines(path, end, 2) == 2);  // "bb\nccc\n"
  CHECK(OffsetOfLastLines(path, end, 3) == 0);
  CHECK(OffsetOfLastLines(path, end, 10) == 0);  // fewer lines than asked: all of it
  CHECK(OffsetOfLastLines(path, end, 0) == end);
  // A last line not ended yet (a job still printing it) counts as a line.
  end = write("a\nbb\ncc");
  CHECK(OffsetOfLastLines(path, end, 1) == 5);
  CHECK(OffsetOfLastLines(path, end, 2) == 2);
  // Only the first `end` bytes count (what the head has journaled), and lines across the
  // 64 KiB chunks it reads backwards in.
  std::string big;
  for (int i = 0; i < 20000; ++i) big += "line " + std::to_string(i) + "\n";
  end = write(big + "partial");
  const uint64_t limit = big.size();
  const uint64_t at = OffsetOfLastLines(path, limit, 15000);
  CHECK(big.substr(at, 10) == "line 5000\n");
  CHECK(OffsetOfLastLines(dir.path() + "/missing", 100, 3) == 100);
}

}  // namespace
}  // namespace herd::agent
