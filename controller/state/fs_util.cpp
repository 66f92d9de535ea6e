#include "controller/state/fs_util.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>

namespace herd::controller::internal {

Status WriteFileAtomic(const std::string& path, const std::string& content, unsigned mode) {
  std::string tmp = path + ".tmp-XXXXXX";
  const int fd = mkostemp(tmp.data(), O_CLOEXEC);
  if (fd < 0) return ErrnoError("create " + tmp, errno);
  auto fail = [&](std::string_view what, int err) {
    close(fd);
    unlink(tmp.c_str());
    return ErrnoError(std::string(what) + " " + tmp, err);
  };
  if (fchmod(fd, mode) != 0) return fail("chmod", errno);
  std::size_t done = 0;
  while (done < content.size()) {
    const ssize_t n = write(fd, content.data() + done, content.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return fail("write", errno);
    done += static_cast<std::size_t>(n);
  }
  if (fsync(fd) != 0) return fail("fsync", errno);
  if (close(fd) != 0) {
    const int err = errno;
    unlink(tmp.c_str());
    return ErrnoError("close " + tmp, err);
  }
  if (rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    unlink(tmp.c_str());
    return ErrnoError("rename " + tmp + " to " + path, err);
  }
  return Status::Ok();
}

Result<std::optional<std::string>> ReadFileIfExists(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return std::optional<std::string>();
    return ErrnoError("open " + path, errno);
  }
  std::string out;
  char buf[16384];
  while (true) {
    const ssize_t n = read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      close(fd);
      return ErrnoError("read " + path, err);
    }
    if (n == 0) break;
    out.append(buf, static_cast<std::size_t>(n));
  }
  close(fd);
  return std::optional<std::string>(std::move(out));
}

}  // namespace herd::controller::internal
