#include "agent/head/run_journal.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <type_traits>

namespace herd::agent {

namespace {

template <class... F>
struct Overloaded : F... {
  using F::operator()...;
};
template <class... F>
Overloaded(F...) -> Overloaded<F...>;

}  // namespace

std::string EncodeJournalRecord(const JournalRecord& record) {
  using std::to_string;
  return std::visit(
      Overloaded{
          [](const JournalProcess& p) {
            return "p " + to_string(p.job_id) + " " + to_string(p.attempt) + " " +
                   to_string(p.kind) + " " + to_string(p.rank) + " " + p.node_id + " " +
                   to_string(p.setup ? 1 : 0) + " " + to_string(p.num_nodes) + " " + p.ip + " " +
                   p.log_name;
          },
          [](const JournalStarted& s) { return "s " + s.key + " " + to_string(s.pid); },
          [](const JournalOutput& o) {
            return "o " + to_string(o.log_size) + " " + o.key + " " + to_string(o.committed);
          },
          [](const JournalExit& x) {
            return "x " + to_string(x.log_size) + " " + x.key + " " + to_string(x.exit_code);
          },
      },
      record);
}

std::optional<JournalRecord> DecodeJournalRecord(const std::string& line) {
  std::istringstream f(line);
  std::string tag;
  f >> tag;
  if (tag == "p") {
    JournalProcess p;
    int setup = 0;
    f >> p.job_id >> p.attempt >> p.kind >> p.rank >> p.node_id >> setup >> p.num_nodes >> p.ip >>
        p.log_name;
    if (!f) return std::nullopt;
    p.setup = setup != 0;
    return p;
  }
  if (tag == "s") {
    JournalStarted s;
    f >> s.key >> s.pid;
    if (!f) return std::nullopt;
    return s;
  }
  if (tag == "o" || tag == "x") {
    uint64_t size = 0;
    std::string key;
    // Read unsigned for both: an exit code written negative reads back as its two's complement,
    // which the cast below turns back into the code.
    uint64_t value = 0;
    f >> size >> key >> value;
    if (!f) return std::nullopt;
    if (tag == "o") return JournalOutput{size, std::move(key), value};
    return JournalExit{size, std::move(key), static_cast<int>(value)};
  }
  return std::nullopt;
}

std::string JournalPathFor(const std::string& log_path) {
  return (std::filesystem::path(log_path).parent_path() / "run.journal").string();
}

std::optional<std::vector<JournalRecord>> ReadJournal(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::vector<JournalRecord> records;
  std::string line;
  while (std::getline(in, line)) {
    if (in.eof()) break;  // no '\n': torn by a crash
    if (auto record = DecodeJournalRecord(line)) records.push_back(std::move(*record));
  }
  return records;
}

RunJournal::~RunJournal() {
  if (fd_ >= 0) ::close(fd_);
}

Status RunJournal::Append(const std::string& path, const JournalRecord& record) {
  if (fd_ < 0) {
    fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd_ < 0) return ErrnoError("cannot open " + path, errno);
  }
  const std::string line = EncodeJournalRecord(record) + "\n";
  // One write per record: a head killed mid-way leaves whole lines.
  if (::write(fd_, line.data(), line.size()) != static_cast<ssize_t>(line.size())) {
    return ErrnoError("cannot append to " + path, errno);
  }
  return Status::Ok();
}

Status RunJournal::Finish() {
  if (fd_ < 0) return Status::Ok();
  Status s = Status::Ok();
  if (::ftruncate(fd_, 0) != 0) s = ErrnoError("cannot empty the journal", errno);
  ::close(fd_);
  fd_ = -1;
  return s;
}

}  // namespace herd::agent
