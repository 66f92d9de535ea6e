// One `herd` command at a time per cluster: an exclusive flock(2) on <home>/locks/<name>.lock,
// held for the whole command.
//
// flock belongs to the open file, so the kernel drops it when the holder exits or crashes: a
// stale lock cannot outlive its command. The holder writes "pid <pid>: <what>" into the file so a
// waiter that gives up can say who holds it. The descriptor is close-on-exec, so ssh children
// (a ControlMaster that lingers for ControlPersist) never keep a cluster locked.
//
// `herd down` deletes the file with the cluster (ReleaseAndRemove). A waiter that had it open then
// holds a lock on a file no longer at the path; Acquire checks, after locking, that the path still
// names the file it locked and opens it again otherwise, so two commands never both hold a
// cluster's lock.
#pragma once

#include <chrono>
#include <optional>
#include <string>

#include "shared/common/status.hpp"

namespace herd::controller {

class ClusterLock {
 public:
  // Waits up to `wait` (limits::kClusterLockWait for a user's command; zero tries once).
  // `what` names the command for others, e.g. "herd launch". Errors:
  //   InvalidArgument: a bad cluster name (the name becomes a path);
  //   DeadlineExceeded: "cluster demo is busy: another herd command (pid 123: herd launch) holds
  //     its lock; gave up after 120 s";
  //   FailedPrecondition: this process already holds the lock (waiting would only time out);
  //   Io: the lock file cannot be opened.
  static Result<ClusterLock> Acquire(const std::string& cluster, std::chrono::milliseconds wait,
                                     const std::string& what);

  ClusterLock(ClusterLock&& other) noexcept;
  ClusterLock& operator=(ClusterLock&& other) noexcept;
  ClusterLock(const ClusterLock&) = delete;
  ClusterLock& operator=(const ClusterLock&) = delete;
  ~ClusterLock();

  // Releases early (the destructor does it otherwise). Idempotent.
  void Release();
  // Deletes the lock file, then releases: for `herd down`, which leaves no file of the cluster.
  void ReleaseAndRemove();
  bool held() const { return fd_ >= 0; }
  const std::string& cluster() const { return cluster_; }
  // <home>/locks/<cluster>.lock
  static std::string PathFor(const std::string& cluster);
  // What another command holding the cluster's lock said it does (`what` of its Acquire, e.g.
  // "herd down"; "" when it has not written it yet), or nullopt when nobody holds it. Creates no
  // file. Probing takes a shared lock for an instant: an Acquire polling then retries.
  static std::optional<std::string> HeldFor(const std::string& cluster);

 private:
  ClusterLock(int fd, std::string cluster) : fd_(fd), cluster_(std::move(cluster)) {}

  int fd_ = -1;
  std::string cluster_;
};

}  // namespace herd::controller
