#include "controller/ssh/kept_forward.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <chrono>
#include <filesystem>
#include <thread>

#include "shared/common/file_util.hpp"
#include "shared/common/limits.hpp"
#include "shared/common/log.hpp"

namespace herd::controller {
namespace {

// The lock's descriptor, closed (and so unlocked) on scope exit.
class FdGuard {
 public:
  explicit FdGuard(int fd) : fd_(fd) {}
  ~FdGuard() {
    if (fd_ >= 0) ::close(fd_);
  }
  FdGuard(const FdGuard&) = delete;
  FdGuard& operator=(const FdGuard&) = delete;

 private:
  int fd_;
};

int ParsePort(std::string_view text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.remove_suffix(1);
  int port = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), port);
  if (ec != std::errc() || end != text.data() + text.size() || port <= 0 || port > 65535) return 0;
  return port;
}

}  // namespace

KeptForward::KeptForward(SshRunner& ssh, SshTarget target, std::string remote_host, int remote_port,
                         std::string record_path)
    : ssh_(ssh),
      target_(std::move(target)),
      remote_host_(std::move(remote_host)),
      remote_port_(remote_port),
      record_path_(std::move(record_path)) {}

int KeptForward::Recorded() const {
  auto text = ReadFile(record_path_);
  if (!text.ok()) return 0;
  return ParsePort(*text);
}

Result<int> KeptForward::Renew(int stale) {
  const std::string dir = std::filesystem::path(record_path_).parent_path().string();
  if (!dir.empty() && ::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return ErrnoError("mkdir " + dir, errno);
  }
  const std::string lock_path = record_path_ + ".lock";
  const int fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return ErrnoError("open " + lock_path, errno);
  FdGuard guard(fd);
  const auto deadline = std::chrono::steady_clock::now() + limits::kKeptForwardLockWait;
  while (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    if (errno != EWOULDBLOCK && errno != EINTR) return ErrnoError("lock " + lock_path, errno);
    if (std::chrono::steady_clock::now() > deadline) {
      return DeadlineExceeded("another herd command has been renewing the port-forward to " +
                              remote_host_ + ":" + std::to_string(remote_port_) + " for " +
                              FormatSeconds(limits::kKeptForwardLockWait) + " (lock " + lock_path +
                              ")");
    }
    std::this_thread::sleep_for(limits::kClusterLockPollInterval);
  }
  const int now = Recorded();
  if (now != 0 && now != stale) return now;  // renewed by another command while we waited
  if (now != 0) {
    if (Status s = ssh_.CancelForward(target_, now, remote_host_, remote_port_); !s.ok()) {
      HERD_LOG(kDebug) << s.message();  // the master is gone or the forward with it
    }
  }
  HERD_ASSIGN_OR_RETURN(int port, ssh_.ForwardLocalPort(target_, remote_host_, remote_port_));
  HERD_RETURN_IF_ERROR(WriteFileAtomic(record_path_, std::to_string(port) + "\n", 0600));
  return port;
}

}  // namespace herd::controller
