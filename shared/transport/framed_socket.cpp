#include "shared/transport/framed_socket.hpp"

#include <poll.h>

#include <cstring>

#include <array>
#include <atomic>
#include <boost/asio/post.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>
#include <deque>

#include "shared/common/limits.hpp"

namespace herd::transport {

namespace net = boost::asio;
using Socket = net::local::stream_protocol::socket;

namespace {

std::array<unsigned char, kFrameHeaderBytes> Header(std::size_t size) {
  return {static_cast<unsigned char>(size >> 24), static_cast<unsigned char>(size >> 16),
          static_cast<unsigned char>(size >> 8), static_cast<unsigned char>(size)};
}

std::size_t SizeOf(const std::array<unsigned char, kFrameHeaderBytes>& h) {
  return (std::size_t{h[0]} << 24) | (std::size_t{h[1]} << 16) | (std::size_t{h[2]} << 8) |
         std::size_t{h[3]};
}

Status TooBig(std::size_t size, const std::string& where) {
  return InvalidArgument(where + ": a message of " + std::to_string(size) + " bytes (over " +
                         std::to_string(limits::kMaxFrameBytes) + ")");
}

class FramedSession : public Connection, public std::enable_shared_from_this<FramedSession> {
 public:
  FramedSession(Socket socket, Handlers handlers, std::string description)
      : socket_(std::move(socket)), handlers_(std::move(handlers)) {
    peer_.remote_address = std::move(description);
  }

  void Start() {
    net::post(socket_.get_executor(), [self = shared_from_this()] { self->do_read_header(); });
  }

  void Send(std::string message) override {
    queued_.fetch_add(message.size());
    net::post(socket_.get_executor(),
              [self = shared_from_this(), m = std::move(message)]() mutable {
                self->on_send(std::move(m));
              });
  }
  void Close() override {
    net::post(socket_.get_executor(), [self = shared_from_this()] { self->on_close_request(); });
  }
  const PeerIdentity& peer() const override { return peer_; }
  std::size_t queued_bytes() const override { return queued_.load(); }

 private:
  void do_read_header() {
    if (finished_) return;
    net::async_read(socket_, net::buffer(header_),
                    [self = shared_from_this()](boost::system::error_code ec, std::size_t n) {
                      self->on_header(ec, n);
                    });
  }

  void on_header(boost::system::error_code ec, std::size_t n) {
    if (finished_) return;
    if (ec == net::error::eof && n == 0) return finish(Status::Ok());
    if (ec) return fail(ec, "read");
    std::size_t size = SizeOf(header_);
    if (size > limits::kMaxFrameBytes) return finish(TooBig(size, peer_.remote_address));
    body_.resize(size);
    net::async_read(socket_, net::buffer(body_),
                    [self = shared_from_this()](boost::system::error_code e, std::size_t) {
                      self->on_body(e);
                    });
  }

  void on_body(boost::system::error_code ec) {
    if (finished_) return;
    if (ec) return fail(ec, "read");
    if (handlers_.on_message) handlers_.on_message(shared_from_this(), std::move(body_));
    body_.clear();
    do_read_header();
  }

  void on_send(std::string message) {
    if (finished_ || close_requested_) {
      queued_.fetch_sub(message.size());
      return;
    }
    if (message.size() > limits::kMaxFrameBytes) {
      queued_.fetch_sub(message.size());
      return finish(TooBig(message.size(), "send to " + peer_.remote_address));
    }
    outbox_.push_back(std::move(message));
    if (!writing_) do_write();
  }

  void do_write() {
    writing_ = true;
    out_header_ = Header(outbox_.front().size());
    std::array<net::const_buffer, 2> buffers{net::buffer(out_header_),
                                             net::buffer(outbox_.front())};
    net::async_write(socket_, buffers,
                     [self = shared_from_this()](boost::system::error_code ec, std::size_t) {
                       self->on_write(ec);
                     });
  }

  void on_write(boost::system::error_code ec) {
    writing_ = false;
    queued_.fetch_sub(outbox_.front().size());
    outbox_.pop_front();
    if (finished_) return;
    if (ec) return fail(ec, "write");
    if (!outbox_.empty()) return do_write();
    if (close_requested_) finish(Status::Ok());
  }

  void on_close_request() {
    if (finished_) return;
    close_requested_ = true;
    if (!writing_) finish(Status::Ok());
  }

  void fail(boost::system::error_code ec, const std::string& what) {
    if (ec == net::error::operation_aborted && close_requested_) return finish(Status::Ok());
    finish(Unavailable(what + " " + peer_.remote_address + ": " + ec.message()));
  }

  // Runs once: closes the socket, drops the queue and tells the user.
  void finish(Status why) {
    if (finished_) return;
    finished_ = true;
    boost::system::error_code ignored;
    socket_.shutdown(Socket::shutdown_both, ignored);
    socket_.close(ignored);
    std::size_t keep = writing_ ? 1 : 0;
    while (outbox_.size() > keep) {
      queued_.fetch_sub(outbox_.back().size());
      outbox_.pop_back();
    }
    Handlers handlers = std::move(handlers_);
    handlers_ = {};
    if (handlers.on_close) handlers.on_close(shared_from_this(), why);
  }

  Socket socket_;
  Handlers handlers_;
  PeerIdentity peer_;
  std::array<unsigned char, kFrameHeaderBytes> header_{};
  std::array<unsigned char, kFrameHeaderBytes> out_header_{};
  std::string body_;
  std::deque<std::string> outbox_;
  std::atomic<std::size_t> queued_{0};
  bool writing_ = false;
  bool close_requested_ = false;
  bool finished_ = false;
};

// Waits until the socket is ready for `events` or the deadline passes. (Asio's blocking calls
// would poll forever after a SO_RCVTIMEO timeout, so the bound is kept here.)
Status WaitReady(Socket& socket, short events, std::chrono::steady_clock::time_point deadline,
                 std::chrono::milliseconds timeout) {
  while (true) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() < 0) left = std::chrono::milliseconds(0);
    pollfd p{socket.native_handle(), events, 0};
    int n = ::poll(&p, 1, static_cast<int>(left.count()));
    if (n > 0) return Status::Ok();
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Unavailable(std::string("poll: ") + std::strerror(errno));
    return DeadlineExceeded("no answer within " + std::to_string(timeout.count()) + " ms");
  }
}

// Moves all of `buffer` in or out, each step after WaitReady.
template <bool kWrite>
Status Transfer(Socket& socket, char* data, std::size_t size,
                std::chrono::steady_clock::time_point deadline, std::chrono::milliseconds timeout) {
  std::size_t done = 0;
  while (done < size) {
    HERD_RETURN_IF_ERROR(WaitReady(socket, kWrite ? POLLOUT : POLLIN, deadline, timeout));
    boost::system::error_code ec;
    std::size_t n = kWrite ? socket.write_some(net::buffer(data + done, size - done), ec)
                           : socket.read_some(net::buffer(data + done, size - done), ec);
    if (ec) return Unavailable(std::string(kWrite ? "write: " : "read: ") + ec.message());
    done += n;
  }
  return Status::Ok();
}

}  // namespace

std::string EncodeLengthPrefixed(std::string_view message) {
  auto h = Header(message.size());
  std::string out(h.begin(), h.end());
  out.append(message);
  return out;
}

std::shared_ptr<Connection> StartFramed(Socket socket, Handlers handlers, std::string description) {
  auto session = std::make_shared<FramedSession>(std::move(socket), std::move(handlers),
                                                 std::move(description));
  session->Start();
  return session;
}

Status WriteFrameSync(Socket& socket, std::string_view message, std::chrono::milliseconds timeout) {
  if (message.size() > limits::kMaxFrameBytes) return TooBig(message.size(), "send");
  auto deadline = std::chrono::steady_clock::now() + timeout;
  std::string bytes = EncodeLengthPrefixed(message);
  return Transfer<true>(socket, bytes.data(), bytes.size(), deadline, timeout);
}

Result<std::string> ReadFrameSync(Socket& socket, std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  std::array<unsigned char, kFrameHeaderBytes> header{};
  HERD_RETURN_IF_ERROR(Transfer<false>(socket, reinterpret_cast<char*>(header.data()),
                                       header.size(), deadline, timeout));
  std::size_t size = SizeOf(header);
  if (size > limits::kMaxFrameBytes) return TooBig(size, "read");
  std::string body(size, '\0');
  HERD_RETURN_IF_ERROR(Transfer<false>(socket, body.data(), size, deadline, timeout));
  return body;
}

}  // namespace herd::transport
