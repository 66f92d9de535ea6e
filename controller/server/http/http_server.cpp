// The API server's listener with Beast: HTTP/1.1 over ssl_stream<tcp_stream> (or tcp_stream for
// plain HTTP on loopback). One of the two translation units that instantiate Beast's ssl_stream
// (the other is http_client.cpp): keep everything else out of it, it compiles slowly.
//
// One Conn per connection, on its own strand. Reading is one loop that always has at most one
// read pending and feeds Beast's request parser by hand, so that it keeps watching the socket
// while a handler works or a response streams: a client that goes away is seen at once (on_close
// of the Responder), and bytes it sends meanwhile (a next request) wait in the buffer. Writing is
// a queue of response pieces, one write at a time. Every end goes through finish(), once.
#include "controller/server/http/http_server.hpp"

#include <openssl/err.h>
#include <openssl/ssl.h>

#include <fcntl.h>
#include <array>
#include <atomic>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <deque>
#include <exception>
#include <mutex>
#include <optional>
#include <vector>

#include "controller/server/http/request_codec.hpp"
#include "shared/common/log.hpp"

namespace herd::api_http {
namespace {

namespace beast = boost::beast;
namespace bhttp = beast::http;
namespace net = boost::asio;
namespace ssl = net::ssl;
using tcp = net::ip::tcp;
using TlsStream = beast::ssl_stream<beast::tcp_stream>;
using PlainStream = beast::tcp_stream;

// Job processes may be spawned by the process that serves the API: they must not inherit its
// sockets. Asio does not set close-on-exec itself.
void SetCloseOnExec(int fd) {
  int flags = ::fcntl(fd, F_GETFD);
  if (flags >= 0) ::fcntl(fd, F_SETFD, flags | FD_CLOEXEC);
}

// The bytes read from the socket in one go.
constexpr std::size_t kReadChunk = 16u << 10;

// What the listener and all its connections share.
struct Shared {
  HttpServerOptions options;
  std::shared_ptr<ssl::context> tls;  // null: plain HTTP
  std::atomic<std::size_t> connections{0};
};

// A piece of a response, queued by a Responder from any thread and written on the strand.
struct Piece {
  // kContinue: the interim "100 Continue" to a request that expects it before sending its body.
  enum Kind { kFull, kHead, kChunk, kEnd, kAbort, kContinue } kind = kFull;
  HttpResponse response;     // kFull; kHead: status, content_type and headers
  std::string data;          // kChunk
  bool close_after = false;  // kFull from the connection itself (an error): close after it
  std::size_t size() const { return kind == kChunk ? data.size() : response.body.size(); }
};

Piece HeadPiece(int status, std::string content_type, Headers headers) {
  Piece piece;
  piece.kind = Piece::kHead;
  piece.response.status = status;
  piece.response.content_type = std::move(content_type);
  piece.response.headers = std::move(headers);
  return piece;
}

Piece ChunkPiece(std::string data) {
  Piece piece;
  piece.kind = Piece::kChunk;
  piece.data = std::move(data);
  return piece;
}

// A handler's response made safe to serialize: a status Beast would refuse (or one that may not
// carry a body, with a body) becomes 500, and a header whose name or value holds CR, LF or NUL
// (it would split the response) is dropped. Both are bugs of the handler, logged as such.
void SanitizeResponse(HttpResponse& response) {
  const int status = response.status;
  const bool bodyless = status < 200 || status == 204 || status == 304;
  if (status < 200 || status > 599 || (bodyless && !response.body.empty())) {
    HERD_LOG(kError) << "api: a handler answered with status " << status
                     << (bodyless ? " and a body" : "") << "; sent as 500";
    response = HttpError(Internal("the server made an invalid response"));
  }
  auto bad = [](std::string_view text) {
    return text.empty() ||
           text.find_first_of(std::string_view("\r\n\0", 3)) != std::string_view::npos;
  };
  std::size_t before = response.headers.fields().size();
  Headers kept;
  for (const auto& [name, value] : response.headers.fields()) {
    if (!bad(name) && (value.empty() || !bad(value))) kept.Add(name, value);
  }
  if (kept.fields().size() != before) {
    HERD_LOG(kError) << "api: dropped " << before - kept.fields().size()
                     << " response header(s) holding CR, LF or NUL";
    response.headers = std::move(kept);
  }
  if (bad(response.content_type)) response.content_type.clear();
}

// The part of a connection a Responder talks to: submitting pieces (any thread) and the
// close-watch of the response in progress.
class ConnCore {
 public:
  virtual ~ConnCore() = default;
  virtual void Submit(uint64_t seq, Piece piece) = 0;
  // The pieces in order, as one hand-off to the connection's strand.
  virtual void SubmitAll(uint64_t seq, std::vector<Piece> pieces) = 0;
  // Closes the connection (the server stops); any thread.
  virtual void Abort() = 0;

  bool closed() const { return closed_.load(); }
  std::size_t queued() const { return queued_.load(); }

  void SetOnClose(uint64_t seq, std::function<void()> fn) {
    std::unique_lock<std::mutex> lock(mu_);
    if (closed_.load()) {
      const bool incomplete = complete_seq_ < seq;
      lock.unlock();
      if (incomplete) fn();
      return;
    }
    if (complete_seq_ >= seq) return;
    on_close_ = std::move(fn);
    on_close_seq_ = seq;
  }

 protected:
  // The response `seq` is complete: its close-watch is dropped.
  void MarkComplete(uint64_t seq) {
    std::function<void()> drop;
    std::lock_guard<std::mutex> lock(mu_);
    complete_seq_ = seq;
    if (on_close_seq_ == seq) drop = std::move(on_close_);
    on_close_ = nullptr;
  }
  // The connection ended: the close-watch of an incomplete response runs (here, on the strand).
  void MarkClosed() {
    std::function<void()> fn;
    {
      std::lock_guard<std::mutex> lock(mu_);
      closed_.store(true);
      if (on_close_seq_ > complete_seq_) fn = std::move(on_close_);
      on_close_ = nullptr;
    }
    if (fn) fn();
  }

  std::atomic<std::size_t> queued_{0};

 private:
  std::mutex mu_;
  std::atomic<bool> closed_{false};
  std::function<void()> on_close_;
  uint64_t on_close_seq_ = 0;
  uint64_t complete_seq_ = 0;
};

class ResponderImpl : public Responder {
 public:
  ResponderImpl(std::shared_ptr<ConnCore> conn, uint64_t seq) : conn_(std::move(conn)), seq_(seq) {}

  ~ResponderImpl() override {
    int phase = phase_.load();
    if (phase == kNone) {
      HERD_LOG(kError) << "api: a request was dropped without a response";
      Piece piece;
      piece.response = HttpError(Internal("the server dropped this request without an answer"));
      conn_->Submit(seq_, std::move(piece));
    } else if (phase == kStreaming) {
      // Ending it cleanly would tell the client the stream is complete: cut the connection.
      conn_->Submit(seq_, Piece{Piece::kAbort, {}, {}, false});
    }
  }

  void Respond(HttpResponse response) override {
    int expected = kNone;
    if (!phase_.compare_exchange_strong(expected, kDone)) {
      HERD_LOG(kError) << "api: a second response to one request was ignored";
      return;
    }
    Piece piece;
    piece.response = std::move(response);
    conn_->Submit(seq_, std::move(piece));
  }

  void StartStream(int status, std::string content_type, Headers headers) override {
    int expected = kNone;
    if (!phase_.compare_exchange_strong(expected, kStreaming)) {
      HERD_LOG(kError) << "api: StartStream after the response began was ignored";
      return;
    }
    conn_->Submit(seq_, HeadPiece(status, std::move(content_type), std::move(headers)));
  }

  bool Write(std::string chunk) override {
    if (phase_.load() != kStreaming || conn_->closed()) return false;
    if (chunk.empty()) return true;
    conn_->Submit(seq_, ChunkPiece(std::move(chunk)));
    return true;
  }

  void End() override {
    int expected = kStreaming;
    if (!phase_.compare_exchange_strong(expected, kDone)) return;
    conn_->Submit(seq_, Piece{Piece::kEnd, {}, {}, false});
  }

  bool StreamWhole(int status, std::string content_type, std::vector<std::string> chunks) override {
    int expected = kNone;
    if (!phase_.compare_exchange_strong(expected, kDone)) {
      HERD_LOG(kError) << "api: StreamWhole after the response began was ignored";
      return false;
    }
    std::vector<Piece> pieces;
    pieces.reserve(chunks.size() + 2);
    pieces.push_back(HeadPiece(status, std::move(content_type), {}));
    for (auto& c : chunks) {
      if (!c.empty()) pieces.push_back(ChunkPiece(std::move(c)));
    }
    pieces.push_back(Piece{Piece::kEnd, {}, {}, false});
    conn_->SubmitAll(seq_, std::move(pieces));
    return !conn_->closed();
  }

  bool Closed() const override { return conn_->closed(); }
  void OnClose(std::function<void()> fn) override { conn_->SetOnClose(seq_, std::move(fn)); }
  std::size_t queued_bytes() const override { return conn_->queued(); }

 private:
  enum { kNone, kStreaming, kDone };
  std::shared_ptr<ConnCore> conn_;
  const uint64_t seq_;
  std::atomic<int> phase_{kNone};
};

template <class Stream>
class Conn : public ConnCore, public std::enable_shared_from_this<Conn<Stream>> {
  static constexpr bool kTls = std::is_same_v<Stream, TlsStream>;
  using std::enable_shared_from_this<Conn<Stream>>::shared_from_this;

 public:
  // `socket` is accepted, its executor the connection's strand. `overloaded`: answer 503 to the
  // first request and close (more connections than max_connections).
  Conn(tcp::socket&& socket, std::shared_ptr<Shared> shared, bool overloaded)
      : shared_(std::move(shared)),
        opts_(shared_->options),
        stream_(MakeStream(std::move(socket), shared_.get())),
        ex_(stream_.get_executor()),
        read_timer_(ex_),
        write_timer_(ex_),
        buffer_(opts_.max_header_bytes + kReadChunk),
        overloaded_(overloaded) {
    shared_->connections.fetch_add(1);
  }

  void Start() {
    net::dispatch(ex_, [self = shared_from_this()] { self->do_start(); });
  }

  void Abort() override {
    net::post(ex_, [self = shared_from_this()] { self->finish("the server stops", false); });
  }

  void Submit(uint64_t seq, Piece piece) override {
    queued_.fetch_add(piece.size());
    net::post(ex_, [self = shared_from_this(), seq, piece = std::move(piece)]() mutable {
      self->on_piece(seq, std::move(piece));
    });
  }

  void SubmitAll(uint64_t seq, std::vector<Piece> pieces) override {
    for (const Piece& piece : pieces) queued_.fetch_add(piece.size());
    net::post(ex_, [self = shared_from_this(), seq, pieces = std::move(pieces)]() mutable {
      for (Piece& piece : pieces) self->on_piece(seq, std::move(piece));
    });
  }

 private:
  static Stream MakeStream(tcp::socket&& socket, Shared* shared) {
    if constexpr (kTls) {
      return Stream(std::move(socket), *shared->tls);
    } else {
      return Stream(std::move(socket));
    }
  }

  tcp::socket& socket() { return beast::get_lowest_layer(stream_).socket(); }

  void do_start() {
    beast::error_code ec;
    tcp::endpoint remote = socket().remote_endpoint(ec);
    if (!ec) {
      remote_address_ = remote.address().to_string();
      remote_port_ = remote.port();
    }
    socket().set_option(tcp::no_delay(true), ec);
    peer_ = remote_address_ + ":" + std::to_string(remote_port_);
    if constexpr (kTls) {
      arm_read_timer(opts_.handshake_timeout, "TLS handshake");
      stream_.async_handshake(ssl::stream_base::server,
                              beast::bind_front_handler(&Conn::on_handshake, shared_from_this()));
    } else {
      begin_request();
    }
  }

  void on_handshake(beast::error_code ec) {
    if (finished_) return;
    if (ec) {
      if (ec == net::error::eof || ec == ssl::error::stream_truncated ||
          ec == net::error::connection_reset) {
        // A connection closed before any TLS (a port probe, a health check of the TCP port).
        HERD_LOG(kInfo) << "api: " << peer_ << " closed before the TLS handshake";
      } else {
        // Typically a client that does not trust our CA ("tlsv1 alert unknown ca"), one that
        // refused our certificate ("certificate expired"), or plain HTTP ("http request").
        HERD_LOG(kWarn) << "api: TLS handshake with " << peer_ << " failed: " << ec.message();
      }
      return finish("", true);
    }
    begin_request();
  }

  // ---- Reading ----

  // A new deadline replaces the last; a wait of an older one that had already completed when
  // it was replaced is recognized by its generation and ignored.
  void arm_read_timer(limits::Duration after, const char* what) {
    read_timer_.expires_after(after);
    read_timer_.async_wait([self = shared_from_this(), what,
                            generation = ++read_timer_generation_](beast::error_code ec) {
      if (!ec && generation == self->read_timer_generation_) self->on_read_timeout(what);
    });
  }

  void on_read_timeout(const char* what) {
    if (finished_) return;
    if (state_ == State::kLinger) return finish("", false);
    if (state_ != State::kReading) return;
    if (!request_started_) return finish("", false);  // an idle keep-alive connection
    HERD_LOG(kInfo) << "api: " << peer_ << ": " << what << " timed out";
    reply_error(408, "the request was not received in time");
  }

  // Waits for (or parses the already buffered) next request.
  void begin_request() {
    state_ = State::kReading;
    parser_.emplace();
    parser_->header_limit(static_cast<std::uint32_t>(opts_.max_header_bytes));
    parser_->body_limit(opts_.max_body_bytes);
    parser_->eager(true);
    request_started_ = false;
    continue_sent_ = false;
    arm_read_timer(opts_.idle_timeout, "idle wait");
    if (buffer_.size() > 0) {
      parse_buffered();
    } else {
      do_read();
    }
  }

  void do_read() {
    if (reading_ || finished_) return;
    std::size_t room = buffer_.max_size() - buffer_.size();
    if (room == 0) {
      // A client that sends ahead while its request is handled: wait until the response is done.
      // (Reading a request, a full buffer is a header over the limit: the parser said so first.)
      if (state_ != State::kLinger) return;
      buffer_.consume(buffer_.size());
      room = buffer_.max_size();
    }
    reading_ = true;
    stream_.async_read_some(net::buffer(chunk_.data(), std::min(room, kReadChunk)),
                            beast::bind_front_handler(&Conn::on_read, shared_from_this()));
  }

  void on_read(beast::error_code ec, std::size_t n) {
    reading_ = false;
    if (finished_) return;
    if (ec) {
      bool gone = ec == net::error::eof || ec == net::error::connection_reset ||
                  ec == ssl::error::stream_truncated;
      if (state_ == State::kLinger || (state_ == State::kReading && !request_started_ && gone)) {
        return finish("", false);
      }
      if (state_ == State::kReading) {
        return finish("read a request: " + ec.message(), false);
      }
      // kHandling: the client went away while its request was handled or its response streamed.
      return finish(gone ? "" : "read: " + ec.message(), false);
    }
    if (state_ == State::kLinger) {
      buffer_.consume(buffer_.size());
      return do_read();
    }
    // Room for n was there when the read began, and the buffer only shrank since.
    buffer_.commit(net::buffer_copy(buffer_.prepare(n), net::buffer(chunk_.data(), n)));
    if (state_ == State::kReading) return parse_buffered();
    do_read();  // kHandling
  }

  void parse_buffered() {
    if (!request_started_ && buffer_.size() > 0) {
      request_started_ = true;
      arm_read_timer(opts_.request_read_timeout, "reading a request");
    }
    beast::error_code ec;
    while (buffer_.size() > 0 && !parser_->is_done()) {
      std::size_t used = parser_->put(buffer_.data(), ec);
      buffer_.consume(used);
      if (ec == bhttp::error::need_more) {
        ec = {};
        break;
      }
      if (ec) break;
      if (used == 0) break;
    }
    if (ec == bhttp::error::body_limit) {
      return reply_error(413, "the request body is over the limit of " +
                                  std::to_string(opts_.max_body_bytes) + " bytes");
    }
    if (ec == bhttp::error::header_limit) {
      return reply_error(431, "the request headers are over the limit of " +
                                  std::to_string(opts_.max_header_bytes) + " bytes");
    }
    if (ec) return reply_error(400, "bad HTTP request: " + ec.message());
    if (!parser_->is_done() && buffer_.size() == buffer_.max_size()) {
      return reply_error(431, "the request headers are over the limit of " +
                                  std::to_string(opts_.max_header_bytes) + " bytes");
    }
    if (!parser_->is_done()) {
      if (parser_->is_header_done() && !continue_sent_) send_continue();
      return do_read();
    }
    deliver();
  }

  // A client that sent "Expect: 100-continue" waits for this before its body (curl does so for
  // larger bodies). Its header passed the limits already: a body over max_body_bytes by its
  // Content-Length was refused before this.
  void send_continue() {
    continue_sent_ = true;
    auto expect = parser_->get().find(bhttp::field::expect);
    if (expect == parser_->get().end() ||
        !EqualsIgnoreCase(std::string_view(expect->value().data(), expect->value().size()),
                          "100-continue")) {
      return;
    }
    outbox_.push_back(Piece{Piece::kContinue, {}, {}, false});
    if (!writing_) do_write();
  }

  void deliver() {
    read_timer_.cancel();
    ++read_timer_generation_;
    bhttp::request<bhttp::string_body> message = parser_->release();
    parser_.reset();
    state_ = State::kHandling;
    keep_alive_ = message.keep_alive();
    ++seq_;
    if (overloaded_) {
      HERD_LOG(kWarn) << "api: " << peer_ << " refused: over " << opts_.max_connections
                      << " connections";
      return reply_error(503, "the server has too many connections; try again");
    }
    HttpRequest request;
    request.method = std::string(message.method_string());
    request.target = std::string(message.target());
    for (const auto& field : message) {
      request.headers.Add(std::string(field.name_string()), std::string(field.value()));
    }
    request.body = std::move(message.body());
    request.remote_address = remote_address_;
    request.remote_port = remote_port_;
    auto responder = std::make_shared<ResponderImpl>(shared_from_this(), seq_);
    try {
      opts_.handler(std::move(request), responder);
    } catch (const std::exception& e) {
      HERD_LOG(kError) << "api: handler threw: " << e.what();
      responder->Respond(HttpError(Internal("the request failed")));
    }
    responder.reset();
    // Keep reading: an end of the connection now is the client going away.
    do_read();
  }

  // An error answered by the connection itself, after which it closes.
  void reply_error(int status, std::string message) {
    read_timer_.cancel();
    ++read_timer_generation_;
    parser_.reset();
    state_ = State::kHandling;
    keep_alive_ = false;
    HERD_LOG(kInfo) << "api: " << peer_ << ": " << status << " " << message;
    Piece piece;
    Status why = status == 503   ? Unavailable(std::move(message))
                 : status == 408 ? DeadlineExceeded(std::move(message))
                                 : InvalidArgument(std::move(message));
    piece.response = HttpError(why);
    piece.response.status = status;
    piece.close_after = true;
    uint64_t seq = ++seq_;
    queued_.fetch_add(piece.size());
    on_piece(seq, std::move(piece));
  }

  // ---- Writing ----

  void on_piece(uint64_t seq, Piece piece) {
    if (finished_ || seq != seq_) {
      queued_.fetch_sub(piece.size());
      return;
    }
    if (piece.kind == Piece::kChunk && queued_.load() > opts_.max_stream_queued_bytes) {
      queued_.fetch_sub(piece.size());
      return finish(
          "not reading: over " + std::to_string(opts_.max_stream_queued_bytes) + " bytes queued",
          true);
    }
    if (piece.kind == Piece::kAbort) return finish("the response was abandoned", true);
    const bool stream_piece = piece.kind != Piece::kFull;
    outbox_.push_back(std::move(piece));
    if (writing_ || flush_posted_) return;
    if (!stream_piece) return do_write();
    // The pieces a handler submits together (a stream's head, its chunks and its end) are
    // queued on the strand behind this one: write once they are in the outbox too.
    flush_posted_ = true;
    net::post(ex_, [self = shared_from_this()] {
      self->flush_posted_ = false;
      if (!self->finished_ && !self->writing_ && !self->outbox_.empty()) self->do_write();
    });
  }

  // The bytes of the stream pieces at the front of the outbox, up to the first that is not one
  // (or the stream's end), into gathered_; in_flight_ says how many pieces they are.
  void GatherStream() {
    gathered_.clear();
    in_flight_ = 0;
    for (Piece& piece : outbox_) {
      if (piece.kind == Piece::kHead) {
        if (in_flight_ > 0) break;  // the head of a later response waits for this one's end
        SanitizeResponse(piece.response);
        bhttp::response<bhttp::empty_body> head;
        head.version(11);
        head.result(static_cast<unsigned>(piece.response.status));
        head.set(bhttp::field::server, "herd");
        head.set(bhttp::field::content_type, piece.response.content_type);
        for (const auto& [name, value] : piece.response.headers.fields()) head.insert(name, value);
        head.keep_alive(keep_alive_);
        head.chunked(true);
        close_after_ = !keep_alive_;
        bhttp::response_serializer<bhttp::empty_body> sr(head);
        sr.split(true);
        beast::error_code ec;
        while (!ec && !sr.is_header_done()) {
          sr.next(ec, [&](beast::error_code&, const auto& buffers) {
            gathered_ += beast::buffers_to_string(buffers);
            sr.consume(beast::buffer_bytes(buffers));
          });
        }
      } else if (piece.kind == Piece::kChunk) {
        gathered_ += beast::buffers_to_string(bhttp::make_chunk(net::buffer(piece.data)));
      } else if (piece.kind == Piece::kEnd) {
        gathered_ += beast::buffers_to_string(bhttp::make_chunk_last());
        ++in_flight_;
        break;
      } else {
        break;
      }
      ++in_flight_;
    }
  }

  void do_write() {
    Piece& piece = outbox_.front();
    writing_ = true;
    in_flight_ = 1;
    write_timer_.expires_after(opts_.write_timeout);
    write_timer_.async_wait([self = shared_from_this()](beast::error_code ec) {
      if (!ec && self->writing_) self->finish("write timed out", true);
    });
    auto done = beast::bind_front_handler(&Conn::on_write, shared_from_this());
    switch (piece.kind) {
      case Piece::kFull: {
        SanitizeResponse(piece.response);
        bool keep = keep_alive_ && !piece.close_after;
        full_.emplace();
        full_->version(11);
        full_->result(static_cast<unsigned>(piece.response.status));
        full_->set(bhttp::field::server, "herd");
        if (!piece.response.content_type.empty()) {
          full_->set(bhttp::field::content_type, piece.response.content_type);
        }
        for (const auto& [name, value] : piece.response.headers.fields())
          full_->insert(name, value);
        full_->keep_alive(keep);
        full_->body() = std::move(piece.response.body);
        full_->prepare_payload();
        close_after_ = !keep;
        return bhttp::async_write(stream_, *full_, std::move(done));
      }
      case Piece::kHead:
      case Piece::kChunk:
      case Piece::kEnd:
        // A stream's pieces queued by now go out in one write: the head, the chunks and the end
        // of a short answer are one TLS record and one send instead of one each.
        GatherStream();
        return net::async_write(stream_, net::buffer(gathered_), std::move(done));
      case Piece::kContinue:
        interim_.emplace();
        interim_->version(11);
        interim_->result(bhttp::status::continue_);
        return bhttp::async_write(stream_, *interim_, std::move(done));
      case Piece::kAbort:
        break;
    }
  }

  void on_write(beast::error_code ec, std::size_t) {
    writing_ = false;
    write_timer_.cancel();
    Piece::Kind kind = outbox_.front().kind;
    for (; in_flight_ > 0 && !outbox_.empty(); --in_flight_) {
      kind = outbox_.front().kind;
      queued_.fetch_sub(kind == Piece::kChunk ? outbox_.front().data.size() : 0);
      if (kind == Piece::kFull) queued_.fetch_sub(full_->body().size());
      outbox_.pop_front();
    }
    in_flight_ = 0;
    full_.reset();
    gathered_.clear();
    if (finished_) return;
    if (ec) return finish("write: " + ec.message(), false);
    if (kind == Piece::kFull || kind == Piece::kEnd) return response_done();
    if (!outbox_.empty()) do_write();
  }

  void response_done() {
    MarkComplete(seq_);
    // Pieces of this response queued after its end (a Write racing End) are dropped.
    while (!outbox_.empty()) {
      queued_.fetch_sub(outbox_.front().size());
      outbox_.pop_front();
    }
    if (close_after_) return linger();
    begin_request();
  }

  // Stop sending, read and discard what the client still sends (the rest of a refused body) for
  // a moment, then close: see limits::kApiCloseLinger.
  void linger() {
    state_ = State::kLinger;
    beast::error_code ec;
    socket().shutdown(tcp::socket::shutdown_send, ec);
    arm_read_timer(opts_.close_linger, "closing");
    buffer_.consume(buffer_.size());
    do_read();
  }

  // Runs once. `why` non-empty: logged (`warn` at warning level, else info).
  void finish(const std::string& why, bool warn) {
    if (finished_) return;
    finished_ = true;
    if (!why.empty()) {
      if (warn) {
        HERD_LOG(kWarn) << "api: dropping " << peer_ << ": " << why;
      } else {
        HERD_LOG(kInfo) << "api: " << peer_ << ": " << why;
      }
    }
    read_timer_.cancel();
    ++read_timer_generation_;
    write_timer_.cancel();
    beast::error_code ec;
    socket().shutdown(tcp::socket::shutdown_both, ec);
    socket().close(ec);
    std::size_t keep = writing_ ? in_flight_ : 0;  // the pieces Beast is still writing
    while (outbox_.size() > keep) {
      queued_.fetch_sub(outbox_.back().size());
      outbox_.pop_back();
    }
    shared_->connections.fetch_sub(1);
    MarkClosed();
  }

  enum class State { kReading, kHandling, kLinger };

  std::shared_ptr<Shared> shared_;
  const HttpServerOptions& opts_;  // in shared_
  Stream stream_;
  net::any_io_executor ex_;  // the strand
  net::steady_timer read_timer_;
  uint64_t read_timer_generation_ = 0;
  net::steady_timer write_timer_;
  // Bytes read but not yet parsed. A read never points into it: the parser consumes from it while
  // a read is pending (a request that came with the one before it), and flat_buffer's consume()
  // of everything moves its write position back to the start, under such a read's target.
  beast::flat_buffer buffer_;
  std::array<char, kReadChunk> chunk_;  // the target of the pending read
  std::optional<bhttp::request_parser<bhttp::string_body>> parser_;
  const bool overloaded_;
  std::string remote_address_;
  uint16_t remote_port_ = 0;
  std::string peer_;  // address:port, for messages

  State state_ = State::kReading;
  bool reading_ = false;
  bool request_started_ = false;
  bool continue_sent_ = false;
  bool keep_alive_ = true;
  uint64_t seq_ = 0;  // the request being answered

  std::deque<Piece> outbox_;
  bool writing_ = false;
  bool close_after_ = false;
  std::optional<bhttp::response<bhttp::string_body>> full_;
  std::size_t in_flight_ = 0;  // pieces at the outbox's front that the write in progress sends
  std::string gathered_;       // the bytes of those pieces when they are a stream's
  bool flush_posted_ = false;  // a do_write is queued on the strand
  std::optional<bhttp::response<bhttp::empty_body>> interim_;
  bool finished_ = false;
};

class Listener : public std::enable_shared_from_this<Listener> {
 public:
  Listener(net::io_context& io, std::shared_ptr<Shared> shared)
      : io_(io),
        shared_(std::move(shared)),
        acceptor_(net::make_strand(io)),
        retry_timer_(acceptor_.get_executor()) {}

  Status Bind() {
    const HttpServerOptions& o = shared_->options;
    beast::error_code ec;
    net::ip::address address = net::ip::make_address(o.host, ec);
    if (ec) return InvalidArgument("listen address '" + o.host + "': " + ec.message());
    tcp::endpoint endpoint(address, o.port);
    std::string where = o.host + ":" + std::to_string(o.port);
    acceptor_.open(endpoint.protocol(), ec);
    if (!ec) SetCloseOnExec(acceptor_.native_handle());
    if (!ec) acceptor_.set_option(net::socket_base::reuse_address(true), ec);
    if (!ec) acceptor_.bind(endpoint, ec);
    if (!ec) acceptor_.listen(net::socket_base::max_listen_connections, ec);
    if (!ec) port_ = acceptor_.local_endpoint(ec).port();
    if (ec == net::error::address_in_use) {
      return Unavailable("listen on " + where + ": " + ec.message());
    }
    if (ec) return IoError("listen on " + where + ": " + ec.message());
    return Status::Ok();
  }

  void Start() {
    net::dispatch(acceptor_.get_executor(), [self = shared_from_this()] { self->do_accept(); });
  }

  void Stop() {
    std::vector<std::weak_ptr<ConnCore>> conns;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopped_) return;
      stopped_ = true;
      conns = std::move(conns_);
      conns_.clear();
    }
    net::post(acceptor_.get_executor(), [self = shared_from_this()] {
      beast::error_code ec;
      self->acceptor_.close(ec);
      self->retry_timer_.cancel();
    });
    for (const auto& weak : conns) {
      if (auto conn = weak.lock()) conn->Abort();
    }
  }

  uint16_t port() const { return port_; }
  std::size_t connections() const { return shared_->connections.load(); }

 private:
  void do_accept() {
    acceptor_.async_accept(net::make_strand(io_),
                           beast::bind_front_handler(&Listener::on_accept, shared_from_this()));
  }

  void on_accept(beast::error_code ec, tcp::socket socket) {
    if (ec == net::error::operation_aborted) return;
    if (ec) {
      // E.g. out of file descriptors: wait instead of spinning.
      HERD_LOG(kWarn) << "api: accept on port " << port_ << ": " << ec.message();
      retry_timer_.expires_after(limits::kAcceptRetryDelay);
      retry_timer_.async_wait([self = shared_from_this()](beast::error_code wait_ec) {
        if (!wait_ec) self->do_accept();
      });
      return;
    }
    SetCloseOnExec(socket.native_handle());
    const std::size_t open = shared_->connections.load();
    const std::size_t max = shared_->options.max_connections;
    if (open >= 2 * max) {
      // Far over the limit: not even a 503 (it would cost a TLS handshake each).
      beast::error_code ignored;
      socket.close(ignored);
      return do_accept();
    }
    if (shared_->tls) {
      Add(std::make_shared<Conn<TlsStream>>(std::move(socket), shared_, open >= max));
    } else {
      Add(std::make_shared<Conn<PlainStream>>(std::move(socket), shared_, open >= max));
    }
    do_accept();
  }

  template <class C>
  void Add(std::shared_ptr<C> conn) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopped_) return;  // the socket closes with the connection
      // Weak: a closed connection is forgotten (pruned when the list doubled since).
      if (conns_.size() >= 2 * pruned_at_ + 64) {
        std::erase_if(conns_, [](const std::weak_ptr<ConnCore>& w) { return w.expired(); });
        pruned_at_ = conns_.size();
      }
      conns_.push_back(conn);
    }
    conn->Start();
  }

  net::io_context& io_;
  std::shared_ptr<Shared> shared_;
  tcp::acceptor acceptor_;
  net::steady_timer retry_timer_;
  uint16_t port_ = 0;
  std::mutex mu_;
  bool stopped_ = false;
  std::vector<std::weak_ptr<ConnCore>> conns_;
  std::size_t pruned_at_ = 0;
};

class Server : public HttpServer {
 public:
  explicit Server(std::shared_ptr<Listener> listener)
      : port_(listener->port()), listener_(std::move(listener)) {}
  ~Server() override { Stop(); }
  uint16_t port() const override { return port_; }
  std::size_t connections() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return listener_ ? listener_->connections() : 0;
  }
  void Stop() override {
    std::shared_ptr<Listener> listener;
    {
      std::lock_guard<std::mutex> lock(mu_);
      listener = std::move(listener_);
    }
    if (listener) listener->Stop();
  }

 private:
  const uint16_t port_;
  mutable std::mutex mu_;
  std::shared_ptr<Listener> listener_;
};

Result<std::shared_ptr<ssl::context>> MakeServerContext(const HttpServerOptions& o) {
  auto ctx = std::make_shared<ssl::context>(ssl::context::tls_server);
  SSL_CTX* native = ctx->native_handle();
  if (SSL_CTX_set_min_proto_version(native, TLS1_2_VERSION) != 1) {
    return Internal("cannot restrict TLS to 1.2 and later");
  }
  // TLS 1.2: forward-secret AEAD suites only; no renegotiation (a client could make the server
  // redo handshakes at will).
  if (SSL_CTX_set_cipher_list(native, "ECDHE+AESGCM:ECDHE+CHACHA20") != 1) {
    ERR_clear_error();
    return Internal("cannot set the TLS 1.2 cipher list");
  }
  SSL_CTX_set_options(native, SSL_OP_NO_RENEGOTIATION | SSL_OP_CIPHER_SERVER_PREFERENCE);
  SSL_CTX_set_mode(native, SSL_MODE_RELEASE_BUFFERS);
  beast::error_code ec;
  if (o.cert_file.empty() || o.key_file.empty()) {
    return InvalidArgument(
        "the API server needs a certificate and key file (or plain HTTP on "
        "a loopback address)");
  }
  ctx->use_certificate_chain_file(o.cert_file, ec);
  if (ec) return InvalidArgument("certificate '" + o.cert_file + "': " + ec.message());
  ctx->use_private_key_file(o.key_file, ssl::context::pem, ec);
  if (ec) return InvalidArgument("private key '" + o.key_file + "': " + ec.message());
  if (SSL_CTX_check_private_key(native) != 1) {
    ERR_clear_error();
    return InvalidArgument("private key " + o.key_file + " does not belong to " + o.cert_file);
  }
  ctx->set_verify_mode(ssl::verify_none, ec);  // clients authenticate with tokens
  if (ec) return Internal("set_verify_mode: " + ec.message());
  return ctx;
}

}  // namespace

bool IsLoopbackAddress(std::string_view host) {
  beast::error_code ec;
  net::ip::address address = net::ip::make_address(std::string(host), ec);
  if (ec) return false;
  if (address.is_v4()) return address.to_v4().is_loopback();
  net::ip::address_v6 v6 = address.to_v6();
  if (v6.is_v4_mapped()) return net::ip::make_address_v4(net::ip::v4_mapped, v6).is_loopback();
  return v6.is_loopback();
}

Result<std::unique_ptr<HttpServer>> ListenHttp(boost::asio::io_context& io,
                                               HttpServerOptions options) {
  if (!options.handler) return InvalidArgument("the API server needs a handler");
  if (options.max_connections == 0) return InvalidArgument("max_connections must be positive");
  auto shared = std::make_shared<Shared>();
  if (options.plain_http) {
    if (!IsLoopbackAddress(options.host)) {
      return InvalidArgument("plain HTTP is only allowed on a loopback address, not '" +
                             options.host + "': use TLS (a certificate and key)");
    }
  } else {
    HERD_ASSIGN_OR_RETURN(shared->tls, MakeServerContext(options));
  }
  shared->options = std::move(options);
  auto listener = std::make_shared<Listener>(io, shared);
  HERD_RETURN_IF_ERROR(listener->Bind());
  listener->Start();
  return std::unique_ptr<HttpServer>(std::make_unique<Server>(std::move(listener)));
}

}  // namespace herd::api_http
