#include "controller/state/fs_util.hpp"

#include "shared/common/file_util.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>

namespace herd::controller::internal {

Status WriteFileAtomic(const std::string& path, const std::string& content, unsigned mode) {
  return herd::WriteFileAtomic(path, content, static_cast<mode_t>(mode));
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
