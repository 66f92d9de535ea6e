// herd _serve (hidden): a warm worker of the API server (controller/server/warm_workers.hpp). Its
// stdin is a socket to the server; it runs the read commands the server sends there
// (warm_protocol.hpp) one after another in this process, with the user's environment the server
// gave it, and answers each with its output and exit code. It exits at the socket's end, on a
// malformed request, or after limits::kApiWarmWorkerIdle without a request.
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <ostream>
#include <streambuf>
#include <string>
#include <vector>

#include "controller/cli/cli.hpp"
#include "controller/cli/command.hpp"
#include "controller/ops/cluster_ops.hpp"
#include "controller/ops/system_parts.hpp"
#include "controller/server/stream_frames.hpp"
#include "controller/server/warm_protocol.hpp"
#include "shared/common/limits.hpp"

namespace herd::cli {
namespace {

// A stream whose bytes go to the server as frames of one tag, a frame each time its buffer
// (kApiMaxFrameBytes) fills and at the command's end: a long read (a log printed whole) streams.
class FrameBuf final : public std::streambuf {
 public:
  FrameBuf(int fd, server::FrameTag tag) : fd_(fd), tag_(tag), buf_(limits::kApiMaxFrameBytes) {
    setp(buf_.data(), buf_.data() + buf_.size());
  }
  // False once the server is gone (the rest of the command's output is dropped).
  bool Flush() {
    const std::string frame = TakeFrame();
    if (!frame.empty()) ok_ = server::SendAll(fd_, frame);
    return ok_;
  }
  // The frame of what the buffer holds (empty when nothing, or once the server is gone), the
  // buffer emptied: the command's last output goes to the server in one send with its exit frame.
  std::string TakeFrame() {
    std::string frame;
    if (pptr() > pbase() && ok_) {
      frame = server::EncodeFrame(tag_, std::string_view(pbase(), pptr() - pbase()));
    }
    setp(buf_.data(), buf_.data() + buf_.size());
    return frame;
  }
  bool ok() const { return ok_; }

 protected:
  int_type overflow(int_type ch) override {
    Flush();
    if (!traits_type::eq_int_type(ch, traits_type::eof())) {
      *pptr() = traits_type::to_char_type(ch);
      pbump(1);
    }
    return traits_type::not_eof(ch);
  }
  int sync() override { return Flush() ? 0 : -1; }

 private:
  const int fd_;
  const server::FrameTag tag_;
  std::vector<char> buf_;
  bool ok_ = true;
};

int Serve(int fd) {
  // A long-lived process: the heads of a read's clusters are asked in threads, not a fork of this
  // process per cluster (ops::AskMode).
  ops::SetAskMode(ops::AskMode::kThread);
  // ... and a read's head connection serves the next read of the same cluster (no mux hello,
  // no kept-forward lookup per read).
  ops::KeepHeadConnections();
  // ... and every read uses one connection to the cluster store, not a connection of its own.
  ops::KeepClusterStoreOpen();
  // Kept from one command to the next: each is kApiMaxFrameBytes, allocated and zeroed once.
  FrameBuf out_buf(fd, server::FrameTag::kStdout), err_buf(fd, server::FrameTag::kStderr);
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
    std::ostream out(&out_buf), err(&err_buf);
    const int code = controller::RunOneCommandArgs(std::move(*args), out, err);
    // The output still buffered and the exit code in one send: the server's thread, and through
    // it the client, wake once for a short read's whole answer, not once per frame.
    if (!out_buf.ok() || !err_buf.ok()) return 0;
    std::string last = out_buf.TakeFrame();
    last += err_buf.TakeFrame();
    last += server::EncodeFrame(server::FrameTag::kExit, std::to_string(code));
    if (!server::SendAll(fd, last)) return 0;
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
