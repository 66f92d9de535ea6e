// run.journal, next to a job's run.log: what a restarted head needs to carry on with a job that
// was SETTING_UP or RUNNING (its processes, their pids and exits, and how many output bytes of
// each are in run.log). One line of text per record, each written with one write(): a head killed
// mid-way leaves whole lines, and a torn last line is ignored when read back.
//
//   p JOB ATTEMPT KIND RANK NODE SETUP NUM_NODES IP LOG_NAME   a process was sent to NODE
//   s KEY PID                                                  it started
//   o LOG_SIZE KEY COMMITTED   its output up to COMMITTED is in run.log, which is LOG_SIZE bytes
//   x LOG_SIZE KEY EXIT_CODE   it exited; run.log is LOG_SIZE bytes with all of its output
//
// KEY is ProcessKeyString (no spaces).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "shared/common/status.hpp"

namespace herd::agent {

struct JournalProcess {  // "p"
  int64_t job_id = 0;
  int32_t attempt = 0;
  int kind = 0;  // herd::v1::ProcessKind
  int rank = 0;
  std::string node_id;
  bool setup = false;
  int num_nodes = 0;
  std::string ip;
  std::string log_name;
  bool operator==(const JournalProcess&) const = default;
};
struct JournalStarted {  // "s"
  std::string key;
  int pid = 0;
  bool operator==(const JournalStarted&) const = default;
};
struct JournalOutput {  // "o"
  uint64_t log_size = 0;
  std::string key;
  uint64_t committed = 0;
  bool operator==(const JournalOutput&) const = default;
};
struct JournalExit {  // "x"
  uint64_t log_size = 0;
  std::string key;
  int exit_code = 0;
  bool operator==(const JournalExit&) const = default;
};
using JournalRecord = std::variant<JournalProcess, JournalStarted, JournalOutput, JournalExit>;

// One record as its line, without the '\n'.
std::string EncodeJournalRecord(const JournalRecord& record);
// nullopt for a line that is no record (an unknown tag, a field missing or malformed).
std::optional<JournalRecord> DecodeJournalRecord(const std::string& line);

// The journal path of a job whose run.log is log_path.
std::string JournalPathFor(const std::string& log_path);

// The records of a journal file, in order; its whole lines only, lines that are no record left
// out. nullopt when the file cannot be read (none was written).
std::optional<std::vector<JournalRecord>> ReadJournal(const std::string& path);

// A job's journal being written. Opened at the first record; Finish empties and closes it.
class RunJournal {
 public:
  RunJournal() = default;
  ~RunJournal();
  RunJournal(const RunJournal&) = delete;
  RunJournal& operator=(const RunJournal&) = delete;

  // Appends one record to path (opened, created if need be, at the first call).
  Status Append(const std::string& path, const JournalRecord& record);
  // At the job's end: emptied, not removed (only a job still active at a restart is restored from
  // it, and an inode freed per job is stepped over by every file creation for a minute:
  // WriteFileSwapped), then closed. Nothing to do when no record was written.
  Status Finish();

 private:
  int fd_ = -1;
};

}  // namespace herd::agent
