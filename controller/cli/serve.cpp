// herd _serve (hidden): a warm worker of the API server (controller/server/warm_workers.hpp). Its
// stdin is a socket to the server; it runs the read commands the server sends there
// (warm_protocol.hpp) one after another in this process, with the user's environment the server
// gave it, and answers each with its output and exit code. It exits at the socket's end, on a
// malformed request, or after limits::kApiWarmWorkerIdle without a request.
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <sstream>

#include "controller/cli/cli.hpp"
#include "controller/cli/command.hpp"
#include "controller/server/stream_frames.hpp"
#include "controller/server/warm_protocol.hpp"
#include "shared/common/limits.hpp"

namespace herd::cli {
namespace {

// Output in frames of at most kApiMaxFrameBytes each (a command's output is held whole: reads
// print tables and lists, not streams).
std::string Frames(server::FrameTag tag, std::string_view bytes) {
  std::string framed;
  while (!bytes.empty()) {
    const std::size_t n = std::min(bytes.size(), limits::kApiMaxFrameBytes);
    framed += server::EncodeFrame(tag, bytes.substr(0, n));
    bytes.remove_prefix(n);
  }
  return framed;
}

int Serve(int fd) {
  std::string pending;
  char buf[64 << 10];
  while (true) {
    std::size_t eol = pending.find('\n');
    while (eol == std::string::npos) {
      pollfd p{fd, POLLIN, 0};
      const int ready = ::poll(&p, 1, static_cast<int>(limits::kApiWarmWorkerIdle.count()));
      if (ready < 0 && errno == EINTR) continue;
      if (ready <= 0) return 0;  // idle (or poll failed): the server starts another when needed
      const ssize_t n = ::read(fd, buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return 0;
      pending.append(buf, static_cast<std::size_t>(n));
      if (pending.size() > limits::kApiMaxBodyBytes) return 2;
      eol = pending.find('\n');
    }
    auto args = server::DecodeWarmRequest(std::string_view(pending).substr(0, eol));
    pending.erase(0, eol + 1);
    if (!args.ok()) {
      (void)server::SendAll(fd, server::EncodeFrame(server::FrameTag::kStderr,
                                                    "herd: " + args.status().message() + "\n") +
                                    server::EncodeFrame(server::FrameTag::kExit, "2"));
      return 2;
    }
    std::ostringstream out, err;
    const int code = controller::RunCliArgs(std::move(*args), out, err);
    if (!server::SendAll(fd,
                         Frames(server::FrameTag::kStdout, out.str()) +
                             Frames(server::FrameTag::kStderr, err.str()) +
                             server::EncodeFrame(server::FrameTag::kExit, std::to_string(code)))) {
      return 0;
    }
  }
}

class ServeCommand final : public Command {
 public:
  CLI::App* Add(CLI::App& app) override {
    cmd_ = app.add_subcommand("_serve", "");
    cmd_->group("");  // internal: started by herd-api with a socket on stdin
    return cmd_;
  }
  bool Chosen() const override { return cmd_->parsed(); }
  int Run(CliContext&) override { return Serve(STDIN_FILENO); }

 private:
  CLI::App* cmd_ = nullptr;
};

}  // namespace

std::unique_ptr<Command> MakeServeCommand() { return std::make_unique<ServeCommand>(); }

}  // namespace herd::cli
