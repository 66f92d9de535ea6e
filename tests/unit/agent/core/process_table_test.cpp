// The worker's process table on disk (agent/core/process_table): what a restarted agent reads back
// is what the previous one saved, the live file stays small whatever the node's history, the
// journal of exits stays bounded, and damage or an older agent's file loses no live entry.
#include "agent/core/process_table.hpp"

#include <doctest/doctest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include "agent/core/worker.hpp"
#include "shared/common/file_util.hpp"
#include "shared/common/limits.hpp"
#include "tests/unit/test_support.hpp"

namespace herd::agent {
namespace {

using Entries = ProcessTableFile::Entries;

herd::v1::SupervisedProcess Running(int64_t job, int rank) {
  herd::v1::SupervisedProcess e;
  e.mutable_key()->set_job_id(job);
  e.mutable_key()->set_attempt(1);
  e.mutable_key()->set_rank(rank);
  e.set_pid(1000 + static_cast<int>(job));
  e.set_supervisor_pid(2000 + static_cast<int>(job));
  e.set_group(JobGroupName(job, 1));
  e.set_log_path("/logs/" + std::to_string(job) + "/tasks/" + std::to_string(rank) + ".log");
  return e;
}

herd::v1::SupervisedProcess Ended(int64_t job, int rank, int code) {
  herd::v1::SupervisedProcess e = Running(job, rank);
  e.set_exited(true);
  *e.mutable_exit()->mutable_key() = e.key();
  e.mutable_exit()->set_exit_code(code);
  e.mutable_exit()->set_output_bytes(100 + static_cast<uint64_t>(job));
  return e;
}

// What a fresh agent finds, by process key.
std::map<std::string, herd::v1::SupervisedProcess> Reload(const std::string& dir) {
  ProcessTableFile fresh(dir);
  std::map<std::string, herd::v1::SupervisedProcess> out;
  for (auto& e : fresh.Load()) out[ProcessKeyString(e.key())] = e;
  return out;
}

auto NoneMore() {
  return [] { return Entries{}; };
}

TEST_CASE("what was saved is what a restarted agent loads: live entries and every exit") {
  testing::TempDir dir("herd-ptable");
  ProcessTableFile t(dir.path());
  CHECK(t.Load().empty());  // first start

  // Job 1 starts, job 2 starts, job 1 ends with 3, job 2 ends with 0, job 3 is running.
  REQUIRE(t.Save({Running(1, 0)}, {}, NoneMore()).ok());
  REQUIRE(t.Save({Running(1, 0), Running(2, 0)}, {}, NoneMore()).ok());
  REQUIRE(t.Save({Running(2, 0)}, {Ended(1, 0, 3)}, NoneMore()).ok());
  REQUIRE(t.Save({Running(3, 0)}, {Ended(2, 0, 0)}, NoneMore()).ok());
  CHECK(t.journal_records() == 2);

  auto got = Reload(dir.path());
  REQUIRE(got.size() == 3);
  CHECK(got["job1.a1.run.r0"].exited());
  CHECK(got["job1.a1.run.r0"].exit().exit_code() == 3);
  CHECK(got["job1.a1.run.r0"].exit().output_bytes() == 101);
  CHECK(got["job2.a1.run.r0"].exited());
  CHECK(got["job2.a1.run.r0"].exit().exit_code() == 0);
  CHECK_FALSE(got["job3.a1.run.r0"].exited());
  CHECK(got["job3.a1.run.r0"].pid() == 1003);
  CHECK(got["job3.a1.run.r0"].group() == JobGroupName(3, 1));

  // The live file holds the running process only.
  herd::v1::ProcessTable live;
  REQUIRE(live.ParseFromString(*ReadFile(t.table_path())));
  CHECK(live.processes_size() == 1);
}

TEST_CASE("an exit appended after the live table was written wins over its live entry") {
  testing::TempDir dir("herd-ptable");
  ProcessTableFile t(dir.path());
  REQUIRE(t.Save({Running(7, 0), Running(7, 1)}, {}, NoneMore()).ok());
  // The agent appended rank 1's exit and died before rewriting the live table.
  std::string record;
  {
    ProcessTableFile other(dir.path() + "/elsewhere");
    std::filesystem::create_directories(dir.path() + "/elsewhere");
    REQUIRE(other.Save({}, {Ended(7, 1, 9)}, NoneMore()).ok());
    record = *ReadFile(other.journal_path());
  }
  std::ofstream(t.journal_path(), std::ios::binary | std::ios::app) << record;

  auto got = Reload(dir.path());
  REQUIRE(got.size() == 2);
  CHECK_FALSE(got["job7.a1.run.r0"].exited());
  CHECK(got["job7.a1.run.r1"].exited());
  CHECK(got["job7.a1.run.r1"].exit().exit_code() == 9);
}

TEST_CASE("a long history: the live file stays small, the journal stays bounded") {
  testing::TempDir dir("herd-ptable");
  ProcessTableFile t(dir.path());
  const int kMax = limits::kMaxExitedProcessesKept;
  // What the worker keeps in memory: the newest kMax exits.
  std::map<int64_t, herd::v1::SupervisedProcess> memory;
  auto all = [&] {
    Entries out;
    for (const auto& [job, e] : memory) out.push_back(e);
    return out;
  };
  off_t biggest_live = 0, biggest_journal = 0;
  const int jobs = 3 * kMax + 17;
  for (int64_t job = 1; job <= jobs; ++job) {
    REQUIRE(t.Save({Running(job, 0)}, {}, all).ok());
    memory[job] = Ended(job, 0, static_cast<int>(job % 256));
    if (memory.size() > static_cast<size_t>(kMax)) memory.erase(memory.begin());
    REQUIRE(t.Save({}, {memory[job]}, all).ok());
    struct stat st {};
    REQUIRE(::stat(t.table_path().c_str(), &st) == 0);
    biggest_live = std::max(biggest_live, st.st_size);
    REQUIRE(::stat(t.journal_path().c_str(), &st) == 0);
    biggest_journal = std::max(biggest_journal, st.st_size);
    REQUIRE(t.journal_records() <= 2 * kMax);
  }
  CHECK(biggest_live < 200);  // one entry, never the history
  // Bounded by twice the kept exits (each record is ~50 bytes here).
  CHECK(biggest_journal < 2 * kMax * 80);

  // After the last compaction the journal holds at least the newest kMax exits.
  auto got = Reload(dir.path());
  for (int64_t job = jobs - kMax + 1; job <= jobs; ++job) {
    auto it = got.find("job" + std::to_string(job) + ".a1.run.r0");
    REQUIRE(it != got.end());
    CHECK(it->second.exit().exit_code() == static_cast<int>(job % 256));
  }
  CHECK(got.size() <= static_cast<size_t>(2 * kMax));
}

TEST_CASE("a torn last record loses that exit only; an older agent's table still loads") {
  testing::TempDir dir("herd-ptable");
  SUBCASE("torn record") {
    ProcessTableFile t(dir.path());
    REQUIRE(t.Save({Running(5, 0)}, {Ended(4, 0, 0)}, NoneMore()).ok());
    std::ofstream(t.journal_path(), std::ios::binary | std::ios::app)
        << std::string("\x40\0\0\0\x0a", 5);
    auto got = Reload(dir.path());
    CHECK(got.size() == 2);
    CHECK(got["job4.a1.run.r0"].exited());
    CHECK_FALSE(got["job5.a1.run.r0"].exited());
    // Loading cut the damage off: what the next agent appends is read after the first record.
    ProcessTableFile again(dir.path());
    CHECK(again.Load().size() == 2);
    CHECK(again.journal_records() == 1);
    REQUIRE(again.Save({}, {Ended(5, 0, 6)}, NoneMore()).ok());
    got = Reload(dir.path());
    CHECK(got.size() == 2);
    CHECK(got["job5.a1.run.r0"].exit().exit_code() == 6);
  }
  SUBCASE("an older agent kept exits in processes.pb") {
    herd::v1::ProcessTable old;
    *old.add_processes() = Ended(1, 0, 2);
    *old.add_processes() = Running(2, 0);
    REQUIRE(WriteFileAtomic(dir / "processes.pb", old.SerializeAsString(), 0600).ok());
    ProcessTableFile t(dir.path());
    auto entries = t.Load();
    REQUIRE(entries.size() == 2);
    CHECK(t.journal_records() == 0);  // neither came from a journal: the worker appends them
    auto got = Reload(dir.path());
    CHECK(got["job1.a1.run.r0"].exit().exit_code() == 2);
    CHECK(got["job2.a1.run.r0"].pid() == 1002);
  }
}

TEST_CASE("a journal that cannot be written: the exits go into the live table and an error") {
  testing::TempDir dir("herd-ptable");
  ProcessTableFile t(dir.path());
  // A directory where the journal should be: appending fails, the table file does not.
  std::filesystem::create_directories(t.journal_path());
  Status s = t.Save({Running(2, 0)}, {Ended(1, 0, 4)}, NoneMore());
  CHECK_FALSE(s.ok());
  CHECK(s.message().find("processes.exits") != std::string::npos);
  herd::v1::ProcessTable live;
  REQUIRE(live.ParseFromString(*ReadFile(t.table_path())));
  CHECK(live.processes_size() == 2);
  std::filesystem::remove(t.journal_path());
  auto got = Reload(dir.path());
  CHECK(got["job1.a1.run.r0"].exit().exit_code() == 4);
  CHECK_FALSE(got["job2.a1.run.r0"].exited());
}

}  // namespace
}  // namespace herd::agent
