#include "shared/common/file_util.hpp"

#include "shared/common/temp_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>

namespace herd {

int WriteAll(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno;
    if (n == 0) return EIO;
    data.remove_prefix(static_cast<std::size_t>(n));
  }
  return 0;
}

Result<TempFile> CreateTempFileBeside(const std::string& path) {
  std::filesystem::path target(path);
  std::string dir = target.has_parent_path() ? target.parent_path().string() : ".";
  // Built by appending: GCC 12 at -O3 reports a false -Wrestrict for `"." + std::string&&`
  // (GCC bug 105329).
  std::string name = ".";
  name += target.filename().string();
  name += ".XXXXXX";
  TempFile made;
  made.path = (std::filesystem::path(dir) / name).string();
  made.fd = ::mkostemp(made.path.data(), O_CLOEXEC);
  if (made.fd < 0) return ErrnoError("create temporary file for " + path, errno);
  return made;
}

void SyncParentDir(const std::string& path) {
  std::filesystem::path target(path);
  std::string dir = target.has_parent_path() ? target.parent_path().string() : ".";
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) return;
  ::fsync(dfd);
  ::close(dfd);
}

Status WriteFileAtomic(const std::string& path, std::string_view data, mode_t mode,
                       Durability durability) {
  const bool sync = durability == Durability::kPowerLoss;
  HERD_ASSIGN_OR_RETURN(TempFile made, CreateTempFileBeside(path));
  const int fd = made.fd;
  const std::string& tmp = made.path;
  auto fail = [&](std::string_view what, int err) {
    ::close(fd);
    ::unlink(tmp.c_str());
    return ErrnoError(std::string(what) + " " + tmp, err);
  };
  if (::fchmod(fd, mode) != 0) return fail("fchmod", errno);
  if (int err = WriteAll(fd, data); err != 0) return fail("write", err);
  if (sync && ::fsync(fd) != 0) return fail("fsync", errno);
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
  if (sync) SyncParentDir(path);
  return Status::Ok();
}

Status WriteFileSwapped(const std::string& path, std::string_view data, mode_t mode) {
  const std::string next = path + ".next";
  int fd = ::open(next.c_str(), O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, mode);
  if (fd < 0) return ErrnoError("open " + next, errno);
  // Over the old content from offset 0, then cut to the new size.
  int err = ::fchmod(fd, mode) == 0 ? WriteAll(fd, data) : errno;
  if (err == 0 && ::ftruncate(fd, static_cast<off_t>(data.size())) != 0) err = errno;
  if (::close(fd) != 0 && err == 0) err = errno;
  if (err != 0) return ErrnoError("write " + next, err);
  if (::renameat2(AT_FDCWD, next.c_str(), AT_FDCWD, path.c_str(), RENAME_EXCHANGE) == 0) {
    return Status::Ok();
  }
  // The first write (nothing to exchange with yet), or a file system without the exchange.
  if (errno == ENOENT && ::rename(next.c_str(), path.c_str()) == 0) return Status::Ok();
  ::unlink(next.c_str());
  return WriteFileAtomic(path, data, mode, Durability::kProcessCrash);
}

Result<std::string> ReadFile(const std::string& path, std::size_t max_bytes) {
  // POSIX calls rather than ifstream, so that a directory or an unreadable file gives its errno.
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  auto cannot_read = [&](int err) -> Status {
    std::string message = "cannot read " + path + ": " + std::strerror(err);
    return err == ENOENT ? NotFound(std::move(message)) : IoError(std::move(message));
  };
  if (fd < 0) return cannot_read(errno);
  auto too_big = [&](const std::string& size) {
    ::close(fd);
    return InvalidArgument(path + ": the file is " + size);
  };
  struct stat st {};
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) &&
      static_cast<std::uintmax_t>(st.st_size) > max_bytes) {
    return too_big(std::to_string(st.st_size) + " bytes");
  }
  std::string out;
  char buf[16384];
  while (true) {
    ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int err = errno;
      ::close(fd);
      return cannot_read(err);
    }
    if (n == 0) break;
    out.append(buf, static_cast<std::size_t>(n));
    // A pipe or a file that grew since fstat: never hold more than the limit and a buffer.
    if (out.size() > max_bytes) return too_big("more than " + std::to_string(max_bytes) + " bytes");
  }
  ::close(fd);
  return out;
}

Result<std::optional<std::string>> ReadFileIfExists(const std::string& path) {
  auto text = ReadFile(path);
  if (text.ok()) return std::optional<std::string>(std::move(text).value());
  if (text.status().code() == Code::kNotFound) return std::optional<std::string>();
  return text.status();
}

Result<bool> WriteFileIfChanged(const std::string& path, std::string_view data, mode_t mode,
                                Durability durability) {
  auto old = ReadFile(path);
  if (old.ok() && *old == data) return false;
  HERD_RETURN_IF_ERROR(WriteFileAtomic(path, data, mode, durability));
  return true;
}

}  // namespace herd
