#include "controller/ssh/tcp_probe.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>

namespace herd::controller {
namespace {

using Clock = std::chrono::steady_clock;

int RemainingMs(Clock::time_point deadline) {
  auto ms = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return ms < 0 ? 0 : static_cast<int>(ms);
}

struct AddrInfoDeleter {
  void operator()(addrinfo* a) const { ::freeaddrinfo(a); }
};

// One address: connect without blocking past the deadline, then read the greeting.
Status ProbeOne(const addrinfo* ai, Clock::time_point deadline) {
  int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
  if (fd < 0) return ErrnoError("socket", errno);
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};

  if (::connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
    if (errno != EINPROGRESS) return Unavailable(std::string("connect: ") + std::strerror(errno));
    pollfd p{fd, POLLOUT, 0};
    int r;
    do {
      r = ::poll(&p, 1, RemainingMs(deadline));
    } while (r < 0 && errno == EINTR);
    if (r == 0) return DeadlineExceeded("connect timed out");
    int err = 0;
    socklen_t len = sizeof err;
    ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) return Unavailable(std::string("connect: ") + std::strerror(err));
  }

  // RFC 4253 lets a server send other lines before its "SSH-" identification line.
  std::string pending;  // the current, incomplete line
  std::string first_line;
  size_t total = 0;
  char buf[256];
  while (total < 8192) {
    pollfd p{fd, POLLIN, 0};
    int r;
    do {
      r = ::poll(&p, 1, RemainingMs(deadline));
    } while (r < 0 && errno == EINTR);
    if (r == 0) return DeadlineExceeded("connected, but no SSH banner in time");
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n <= 0) {
      if (first_line.empty() && pending.empty()) {
        return Unavailable("connection closed before the SSH banner");
      }
      break;
    }
    total += static_cast<size_t>(n);
    pending.append(buf, static_cast<size_t>(n));
    for (;;) {
      if (pending.size() >= 4 && pending.compare(0, 4, "SSH-") == 0) return Status::Ok();
      auto nl = pending.find('\n');
      if (nl == std::string::npos) break;
      if (first_line.empty()) first_line = pending.substr(0, std::min<size_t>(nl, 80));
      pending.erase(0, nl + 1);
    }
  }
  std::string shown = first_line.empty() ? pending.substr(0, 80) : first_line;
  for (char& c : shown) {
    if (c == '\r' || c == '\n') c = ' ';
  }
  return Unavailable("not an SSH server (greeting \"" + shown + "\")");
}

}  // namespace

Status ProbeSshBanner(const std::string& host, int port, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_family = AF_UNSPEC;
  addrinfo* res = nullptr;
  std::string service = std::to_string(port);
  int rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &res);
  if (rc != 0) return Unavailable("cannot resolve " + host + ": " + ::gai_strerror(rc));
  std::unique_ptr<addrinfo, AddrInfoDeleter> owner(res);
  Status last = Unavailable("no address for " + host);
  for (const addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
    last = ProbeOne(ai, deadline);
    if (last.ok() || RemainingMs(deadline) == 0) return last;
  }
  return last;
}

Result<int> PickFreeLocalPort() {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return ErrnoError("socket", errno);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof addr;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    Status st = ErrnoError("bind 127.0.0.1:0", errno);
    ::close(fd);
    return st;
  }
  ::close(fd);
  return static_cast<int>(ntohs(addr.sin_port));
}

}  // namespace herd::controller
