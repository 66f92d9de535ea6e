#include "controller/state/cluster_lock.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <thread>
#include <utility>

#include "controller/state/herd_home.hpp"
#include "shared/common/limits.hpp"

namespace herd::controller {
namespace {

std::string HolderPrefix() { return "pid " + std::to_string(getpid()) + ":"; }

// The holder's "pid 123: herd launch" line, or "" if it has not written it (yet).
std::string ReadHolder(int fd) {
  char buf[512];
  const ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
  if (n <= 0) return "";
  std::string s(buf, static_cast<std::size_t>(n));
  if (auto nl = s.find('\n'); nl != std::string::npos) s.resize(nl);
  return s;
}

// Whether `path` still names the file open at fd (`herd down` deletes a cluster's lock file).
bool StillAtPath(int fd, const std::string& path) {
  struct stat open_file {};
  struct stat at_path {};
  if (fstat(fd, &open_file) != 0 || stat(path.c_str(), &at_path) != 0) return false;
  return open_file.st_dev == at_path.st_dev && open_file.st_ino == at_path.st_ino;
}

std::string FormatWait(std::chrono::milliseconds wait) {
  if (wait < std::chrono::seconds(1)) return std::to_string(wait.count()) + " ms";
  return std::to_string(std::chrono::duration_cast<std::chrono::seconds>(wait).count()) + " s";
}

}  // namespace

std::string ClusterLock::PathFor(const std::string& cluster) {
  return HerdHome() + "/locks/" + cluster + ".lock";
}

Result<ClusterLock> ClusterLock::Acquire(const std::string& cluster, std::chrono::milliseconds wait,
                                         const std::string& what) {
  HERD_RETURN_IF_ERROR(ValidateClusterName(cluster));
  const std::string home = HerdHome();
  HERD_RETURN_IF_ERROR(EnsureDir(home + "/locks", 0700));
  const std::string path = home + "/locks/" + cluster + ".lock";
  const auto deadline = std::chrono::steady_clock::now() + wait;
  while (true) {
    const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) return ErrnoError("cluster " + cluster + ": open lock " + path, errno);
    while (true) {
      if (flock(fd, LOCK_EX | LOCK_NB) == 0) break;
      const int err = errno;
      if (err != EWOULDBLOCK && err != EINTR) {
        close(fd);
        return ErrnoError("cluster " + cluster + ": lock " + path, err);
      }
      const std::string holder = ReadHolder(fd);
      if (holder.rfind(HolderPrefix(), 0) == 0) {
        close(fd);
        return FailedPrecondition("cluster " + cluster + ": this process already holds its lock (" +
                                  holder + ")");
      }
      if (std::chrono::steady_clock::now() >= deadline) {
        close(fd);
        const std::string who = holder.empty() ? "" : " (" + holder + ")";
        return DeadlineExceeded("cluster " + cluster + " is busy: another herd command" + who +
                                " holds its lock; gave up after " + FormatWait(wait));
      }
      std::this_thread::sleep_for(limits::kClusterLockPollInterval);
    }
    if (!StillAtPath(fd, path)) {
      close(fd);  // removed by the `herd down` we waited for: lock the file now at the path
      continue;
    }
    // Say who we are. Failing to write it only makes a waiter's message vaguer.
    const std::string line = HolderPrefix() + " " + what + "\n";
    if (ftruncate(fd, 0) == 0) {
      [[maybe_unused]] ssize_t n = pwrite(fd, line.data(), line.size(), 0);
    }
    return ClusterLock(fd, cluster);
  }
}

std::optional<std::string> ClusterLock::HeldFor(const std::string& cluster) {
  if (!ValidateClusterName(cluster).ok()) return std::nullopt;
  const std::string path = PathFor(cluster);
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;  // never locked, or removed with its cluster
  std::optional<std::string> what;
  if (flock(fd, LOCK_SH | LOCK_NB) == 0) {
    flock(fd, LOCK_UN);
  } else if (errno == EWOULDBLOCK && StillAtPath(fd, path)) {
    const std::string holder = ReadHolder(fd);  // "pid 123: herd down"
    const auto colon = holder.find(": ");
    what = colon == std::string::npos ? "" : holder.substr(colon + 2);
  }
  close(fd);
  return what;
}

ClusterLock::ClusterLock(ClusterLock&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)), cluster_(std::move(other.cluster_)) {}

ClusterLock& ClusterLock::operator=(ClusterLock&& other) noexcept {
  if (this != &other) {
    Release();
    fd_ = std::exchange(other.fd_, -1);
    cluster_ = std::move(other.cluster_);
  }
  return *this;
}

ClusterLock::~ClusterLock() { Release(); }

void ClusterLock::ReleaseAndRemove() {
  if (fd_ < 0) return;
  const std::string path = PathFor(cluster_);
  // Unlinked while still locked: a waiter that locks the old file next sees it gone and retries.
  if (StillAtPath(fd_, path)) (void)unlink(path.c_str());
  Release();
}

void ClusterLock::Release() {
  if (fd_ < 0) return;
  // Clear the holder line while still locked, so nobody reads a finished command as the holder.
  [[maybe_unused]] int rc = ftruncate(fd_, 0);
  flock(fd_, LOCK_UN);
  close(fd_);
  fd_ = -1;
}

}  // namespace herd::controller
