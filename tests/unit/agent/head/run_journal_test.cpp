// The run journal (agent/head/run_journal): every record reads back as it was written, the text
// stays the format older heads wrote (a restarted head reads their journals), lines that are no
// record are left out, a torn last line is ignored, and Finish empties the file but keeps it.
#include "agent/head/run_journal.hpp"

#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "tests/unit/test_support.hpp"

namespace herd::agent {
namespace {

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST_CASE("every kind of record reads back as it was written") {
  const std::vector<JournalRecord> records = {
      JournalProcess{7, 2, 1, 0, "node-a", true, 3, "10.0.0.1", "7-train/setup-node-a.log"},
      JournalProcess{7, 2, 2, 5, "node-b", false, 8, "127.0.3.4", "7-train/tasks/5-node-b.log"},
      JournalStarted{"job7.a2.run.r5", 4242},
      JournalOutput{123456789012ULL, "job7.a2.run.r5", 99},
      JournalOutput{0, "job7.a2.setup.r0", 0},
      JournalExit{17, "job7.a2.run.r5", 0},
      JournalExit{17, "job7.a2.run.r5", 137},
      JournalExit{18, "job7.a2.run.r5", -1},  // a negative code survives the unsigned read
      JournalExit{std::numeric_limits<uint64_t>::max(), "k", std::numeric_limits<int>::min()},
  };
  for (const auto& record : records) {
    const std::string line = EncodeJournalRecord(record);
    CAPTURE(line);
    CHECK(line.find('\n') == std::string::npos);
    const auto decoded = DecodeJournalRecord(line);
    REQUIRE(decoded.has_value());
    CHECK(*decoded == record);
  }
}

TEST_CASE("records are the lines older heads wrote") {
  CHECK(EncodeJournalRecord(JournalProcess{7, 2, 1, 0, "node-a", true, 3, "10.0.0.1",
                                           "7-train/setup-node-a.log"}) ==
        "p 7 2 1 0 node-a 1 3 10.0.0.1 7-train/setup-node-a.log");
  CHECK(EncodeJournalRecord(JournalStarted{"job7.a2.run.r5", 4242}) == "s job7.a2.run.r5 4242");
  CHECK(EncodeJournalRecord(JournalOutput{300, "job7.a2.run.r5", 120}) ==
        "o 300 job7.a2.run.r5 120");
  CHECK(EncodeJournalRecord(JournalExit{300, "job7.a2.run.r5", 1}) == "x 300 job7.a2.run.r5 1");
  // An older head wrote a setup flag as std::to_string(bool): "0" or "1"; any other number is
  // read as set, as it was.
  const auto p = DecodeJournalRecord("p 1 1 2 0 n 0 1 10.0.0.2 1-t/tasks/0-n.log");
  REQUIRE(p.has_value());
  CHECK_FALSE(std::get<JournalProcess>(*p).setup);
}

TEST_CASE("lines that are no record are refused") {
  for (const char* line : {"", "q 1 2 3", "s job1.a1.run.r0", "s job1.a1.run.r0 pid",
                           "o 12 job1.a1.run.r0", "x job1.a1.run.r0 0",
                           // no ip: the fields shift and the log name is missing
                           "p 1 1 2 0 n 0 1  1-t/tasks/0-n.log", "p 1 1 2 0 n 0 1 10.0.0.2"}) {
    CAPTURE(line);
    CHECK_FALSE(DecodeJournalRecord(line).has_value());
  }
}

TEST_CASE("a journal file: appended records read back in order, a torn last line is ignored") {
  testing::TempDir dir("run-journal");
  const std::string log = dir / "logs/3-t/run.log";
  std::filesystem::create_directories(dir / "logs/3-t");
  const std::string path = JournalPathFor(log);
  CHECK(path == dir / "logs/3-t/run.journal");
  CHECK_FALSE(ReadJournal(path).has_value());  // none written

  RunJournal journal;
  CHECK(journal.Finish().ok());  // nothing written: nothing to do
  const std::vector<JournalRecord> written = {
      JournalProcess{3, 1, 2, 0, "n0", false, 1, "127.0.0.1", "3-t/tasks/0-n0.log"},
      JournalStarted{"job3.a1.run.r0", 77},
      JournalOutput{40, "job3.a1.run.r0", 33},
      JournalExit{52, "job3.a1.run.r0", 0},
  };
  for (const auto& r : written) REQUIRE(journal.Append(path, r).ok());
  auto read = ReadJournal(path);
  REQUIRE(read.has_value());
  CHECK(*read == written);

  // A head killed in the middle of a write leaves a line without its '\n'; junk lines are skipped.
  {
    std::ofstream out(path, std::ios::app);
    out << "garbage that is no record\n";
    out << "x 60 job3.a1.run.r0 1";  // torn
  }
  read = ReadJournal(path);
  REQUIRE(read.has_value());
  CHECK(*read == written);

  // At the job's end: emptied, not removed.
  REQUIRE(journal.Finish().ok());
  CHECK(std::filesystem::exists(path));
  CHECK(ReadAll(path).empty());
}

TEST_CASE("a journal that cannot be opened says why") {
  testing::TempDir dir("run-journal");
  RunJournal journal;
  const Status s = journal.Append(dir / "missing/run.journal", JournalStarted{"k", 1});
  CHECK_FALSE(s.ok());
  CHECK(s.message().find("missing/run.journal") != std::string::npos);
}

}  // namespace
}  // namespace herd::agent
