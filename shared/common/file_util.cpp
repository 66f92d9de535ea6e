#include "shared/common/file_util.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

namespace herd {

Status WriteFileAtomic(const std::string& path, std::string_view data, mode_t mode,
                       Durability durability) {
  const bool sync = durability == Durability::kPowerLoss;
  std::filesystem::path target(path);
  std::string dir = target.has_parent_path() ? target.parent_path().string() : ".";
  // Built by appending: GCC 12 at -O3 reports a false -Wrestrict for `"." + std::string&&`
  // (GCC bug 105329).
  std::string name = ".";
  name += target.filename().string();
  name += ".XXXXXX";
  std::string tmp = (std::filesystem::path(dir) / name).string();
  int fd = ::mkstemp(tmp.data());
  if (fd < 0) return ErrnoError("create temporary file for " + path, errno);
  auto fail = [&](std::string_view what) {
    int err = errno;
    ::close(fd);
    ::unlink(tmp.c_str());
    return ErrnoError(std::string(what) + " " + tmp, err);
  };
  if (::fchmod(fd, mode) != 0) return fail("fchmod");
  std::size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return fail("write");
    }
    done += static_cast<std::size_t>(n);
  }
  if (sync && ::fsync(fd) != 0) return fail("fsync");
  if (::close(fd) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    return ErrnoError("close " + tmp, err);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    return ErrnoError("rename to " + path, err);
  }
  // The rename itself must survive a crash too.
  int dfd = sync ? ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
  return Status::Ok();
}

Status WriteFileSwapped(const std::string& path, std::string_view data, mode_t mode) {
  const std::string next = path + ".next";
  int fd = ::open(next.c_str(), O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, mode);
  if (fd < 0) return ErrnoError("open " + next, errno);
  bool ok = ::fchmod(fd, mode) == 0;
  std::size_t done = 0;
  while (ok && done < data.size()) {
    ssize_t n = ::pwrite(fd, data.data() + done, data.size() - done, static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    ok = n > 0;
    if (ok) done += static_cast<std::size_t>(n);
  }
  ok = ok && ::ftruncate(fd, static_cast<off_t>(data.size())) == 0;
  const int err = errno;
  if (::close(fd) != 0 || !ok) return ErrnoError("write " + next, ok ? errno : err);
  if (::renameat2(AT_FDCWD, next.c_str(), AT_FDCWD, path.c_str(), RENAME_EXCHANGE) == 0) {
    return Status::Ok();
  }
  // The first write (nothing to exchange with yet), or a file system without the exchange.
  if (errno == ENOENT && ::rename(next.c_str(), path.c_str()) == 0) return Status::Ok();
  ::unlink(next.c_str());
  return WriteFileAtomic(path, data, mode, Durability::kProcessCrash);
}

Result<std::string> ReadFile(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    int err = errno;
    if (err == ENOENT) return NotFound("no such file: " + path);
    return ErrnoError("open " + path, err);
  }
  std::string out;
  char buf[16384];
  while (true) {
    ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0) {
      if (errno == EINTR) continue;
      int err = errno;
      ::close(fd);
      return ErrnoError("read " + path, err);
    }
    if (n == 0) break;
    out.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  return out;
}

Result<bool> WriteFileIfChanged(const std::string& path, std::string_view data, mode_t mode,
                                Durability durability) {
  auto old = ReadFile(path);
  if (old.ok() && *old == data) return false;
  HERD_RETURN_IF_ERROR(WriteFileAtomic(path, data, mode, durability));
  return true;
}

}  // namespace herd
