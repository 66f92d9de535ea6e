#include "agent/core/process_table.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <set>

#include "agent/core/process_key.hpp"
#include "shared/common/file_util.hpp"
#include "shared/common/limits.hpp"
#include "shared/common/log.hpp"

namespace herd::agent {
namespace {

// A record's length prefix larger than this is not one we wrote (a torn or foreign file).
constexpr uint32_t kMaxRecordBytes = 1u << 20;

void AppendRecord(std::string& out, const herd::v1::SupervisedProcess& e) {
  std::string bytes = e.SerializeAsString();
  auto n = static_cast<uint32_t>(bytes.size());
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((n >> (8 * i)) & 0xff));
  out += bytes;
}

std::string Records(const ProcessTableFile::Entries& entries) {
  std::string out;
  for (const auto& e : entries) AppendRecord(out, e);
  return out;
}

// Appends data to path in one write; on failure the file is cut back to its previous size, so
// that no torn record hides the ones appended after it.
Status AppendAll(const std::string& path, const std::string& data) {
  int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return ErrnoError("open " + path, errno);
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int e = errno;
    ::close(fd);
    return ErrnoError("fstat " + path, e);
  }
  const int err = WriteAll(fd, data);
  if (err != 0 && ::ftruncate(fd, st.st_size) != 0) {
    HERD_LOG(kWarn) << "cannot cut " << path
                    << " back after a failed append: " << ErrnoError("ftruncate", errno).message();
  }
  ::close(fd);
  return err == 0 ? Status() : ErrnoError("append to " + path, err);
}

}  // namespace

ProcessTableFile::ProcessTableFile(std::string state_dir) : dir_(std::move(state_dir)) {}

ProcessTableFile::Entries ProcessTableFile::Load() {
  Entries out;
  std::set<std::string> ended;
  journal_records_ = 0;
  if (auto bytes = ReadFile(journal_path()); bytes.ok()) {
    const std::string& b = *bytes;
    size_t pos = 0;
    while (pos < b.size()) {
      uint32_t n = 0;
      if (b.size() - pos < 4) break;
      for (int i = 0; i < 4; ++i)
        n |= static_cast<uint32_t>(static_cast<unsigned char>(b[pos + i])) << (8 * i);
      herd::v1::SupervisedProcess e;
      if (n > kMaxRecordBytes || b.size() - pos - 4 < n ||
          !e.ParseFromArray(b.data() + pos + 4, static_cast<int>(n)) || !e.exited()) {
        break;
      }
      pos += 4 + n;
      ++journal_records_;
      ended.insert(ProcessKeyString(e.key()));
      out.push_back(std::move(e));
    }
    if (pos < b.size()) {
      // Cut off, so that the records appended from now on are read after it.
      HERD_LOG(kWarn) << journal_path() << ": " << b.size() - pos
                      << " bytes after the last whole record dropped (a record torn by a crash)";
      if (::truncate(journal_path().c_str(), static_cast<off_t>(pos)) != 0) {
        HERD_LOG(kWarn) << ErrnoError("truncate " + journal_path(), errno).message();
      }
    }
  }
  auto bytes = ReadFile(table_path());
  if (!bytes.ok()) return out;  // first start
  herd::v1::ProcessTable table;
  if (!table.ParseFromString(*bytes)) {
    HERD_LOG(kError) << table_path() << ": not a process table; starting without it";
    return out;
  }
  for (auto& e : *table.mutable_processes()) {
    if (ended.count(ProcessKeyString(e.key())) > 0) continue;  // it ended since
    out.push_back(std::move(e));
  }
  return out;
}

Status ProcessTableFile::Save(const Entries& live, const Entries& newly_exited,
                              const std::function<Entries()>& all_exited) {
  Status journal;
  if (!newly_exited.empty()) {
    const int after = journal_records_ + static_cast<int>(newly_exited.size());
    if (after > 2 * limits::kMaxExitedProcessesKept) {
      Entries all = all_exited();
      journal = WriteFileAtomic(journal_path(), Records(all), 0600, Durability::kProcessCrash);
      if (journal.ok()) journal_records_ = static_cast<int>(all.size());
    } else {
      journal = AppendAll(journal_path(), Records(newly_exited));
      if (journal.ok()) journal_records_ = after;
    }
  }
  herd::v1::ProcessTable table;
  for (const auto& e : live) *table.add_processes() = e;
  if (!journal.ok()) {
    for (const auto& e : newly_exited) *table.add_processes() = e;
  }
  // Three times per job: swapped with its kept predecessor, no inode freed per write.
  Status s = WriteFileSwapped(table_path(), table.SerializeAsString(), 0600);
  if (!journal.ok()) return journal;
  return s;
}

}  // namespace herd::agent
