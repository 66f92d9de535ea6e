#include "controller/core/mux.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <boost/asio/signal_set.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "controller/ssh/subprocess.hpp"
#include "herd/v1/mux.pb.h"
#include "shared/common/file_util.hpp"
#include "shared/common/host_port.hpp"
#include "shared/common/log.hpp"
#include "shared/proto/frame.hpp"
#include "shared/transport/framed_socket.hpp"

namespace herd::controller {

namespace fs = std::filesystem;
namespace net = boost::asio;
using local = net::local::stream_protocol;
using herd::v1::MuxHello;
using herd::v1::MuxReady;

namespace {

std::string LockPath(const std::string& socket_path) { return socket_path + ".lock"; }
std::string PidPath(const std::string& socket_path) { return socket_path + ".pid"; }

std::string EncodeReady(const std::string& error) {
  MuxReady ready;
  ready.set_version(herd::v1::PROTOCOL_VERSION_1);
  ready.set_error(error);
  return ready.SerializeAsString();
}

void SetCloseOnExec(int fd) {
  int flags = ::fcntl(fd, F_GETFD);
  if (flags >= 0) ::fcntl(fd, F_SETFD, flags | FD_CLOEXEC);
}

}  // namespace

Mux::Mux(net::io_context& io, MuxOptions options)
    : io_(io), options_(std::move(options)), acceptor_(io), idle_timer_(io) {}

Mux::~Mux() {
  on_exit_ = nullptr;  // what it refers to may be gone already
  if (started_ && !shut_) Shutdown("destroyed");
  if (lock_fd_ >= 0) ::close(lock_fd_);
}

Status Mux::Start() {
  const std::string& path = options_.socket_path;
  lock_fd_ = ::open(LockPath(path).c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (lock_fd_ < 0) return IoError("mux lock " + LockPath(path) + ": " + std::strerror(errno));
  if (::flock(lock_fd_, LOCK_EX | LOCK_NB) != 0) {
    return AlreadyExists("another mux serves " + path);
  }
  // We hold the lock: a socket file left there is a dead mux's.
  ::unlink(path.c_str());
  boost::system::error_code ec;
  acceptor_.open(local(), ec);
  if (!ec) SetCloseOnExec(acceptor_.native_handle());
  mode_t old = ::umask(0177);  // the socket is created 0600
  if (!ec) acceptor_.bind(local::endpoint(path), ec);
  ::umask(old);
  if (!ec) acceptor_.listen(net::socket_base::max_listen_connections, ec);
  if (ec) return IoError("mux socket " + path + ": " + ec.message());
  // Whole or not at all: a reader (StopMux, a test) must never see the file empty or half written.
  if (Status s = WriteFileAtomic(PidPath(path), std::to_string(::getpid()) + "\n", 0644,
                                 Durability::kProcessCrash);
      !s.ok()) {
    HERD_LOG(kWarn) << "mux pid file: " << s.message() << " (`herd down` will not find this mux)";
  }
  started_ = true;
  last_activity_ = std::chrono::steady_clock::now();
  DoAccept();
  MaybeDial();
  ArmIdle();
  return Status::Ok();
}

void Mux::Shutdown(const std::string& why) {
  if (shut_) return;
  shut_ = true;
  boost::system::error_code ec;
  acceptor_.close(ec);
  idle_timer_.cancel();
  if (started_) {
    ::unlink(options_.socket_path.c_str());
    ::unlink(PidPath(options_.socket_path).c_str());
  }
  if (lock_fd_ >= 0) ::close(lock_fd_);  // a new mux may start now
  lock_fd_ = -1;
  if (spare_) spare_->Close();
  spare_.reset();
  for (auto& [key, client] : clients_) {
    client.conn->Close();
    if (client.head) client.head->Close();
  }
  clients_.clear();
  head_to_client_.clear();
  waiting_.clear();
  HERD_LOG(kInfo) << "mux " << options_.socket_path << " exits: " << why << " (" << relayed_
                  << " command(s) relayed, " << reused_ << " head connection(s) reused)";
  if (on_exit_) {
    auto f = std::move(on_exit_);
    on_exit_ = nullptr;
    f(why);
  }
}

void Mux::DoAccept() {
  acceptor_.async_accept([this](boost::system::error_code ec, local::socket socket) {
    if (shut_) return;
    if (ec) {
      HERD_LOG(kWarn) << "mux accept: " << ec.message();
      if (ec == net::error::operation_aborted) return;
    } else {
      SetCloseOnExec(socket.native_handle());
      transport::Handlers h;
      h.on_message = [this](const ConnPtr& c, std::string m) { OnClientMessage(c, std::move(m)); };
      h.on_close = [this](const ConnPtr& c, const Status&) { OnClientClose(c); };
      ConnPtr conn = transport::StartFramed(std::move(socket), std::move(h), "herd command");
      Client client;
      client.conn = conn;
      clients_[conn.get()] = std::move(client);
    }
    DoAccept();
  });
}

void Mux::Refuse(const ConnPtr& conn, const std::string& why) {
  conn->Send(EncodeReady(why));
  conn->Close();
}

void Mux::OnClientMessage(const ConnPtr& conn, std::string message) {
  auto it = clients_.find(conn.get());
  if (it == clients_.end()) return;
  Client& client = it->second;
  if (client.hello_done) {
    // The protocol has the command wait for MuxReady, so a paired head is there.
    auto request = proto::Decode<herd::v1::ClientToHead>(message);
    if (!request.ok() ||
        !client.open.emplace(request->request_id(), request->has_subscribe()).second) {
      client.unclean = true;
    }
    if (client.head) client.head->Send(std::move(message));
    return;
  }
  client.hello_done = true;
  MuxHello hello;
  if (!hello.ParseFromString(message) || hello.version() != herd::v1::PROTOCOL_VERSION_1) {
    return Refuse(conn, "not a MuxHello of protocol version 1");
  }
  if (hello.head() != options_.head || hello.certs_dir() != options_.certs_dir ||
      hello.certs_stamp() != options_.certs_stamp) {
    Refuse(conn, "stale mux: it serves " + options_.head + " with " + options_.certs_dir +
                     (hello.certs_stamp() != options_.certs_stamp ? " (certificates replaced since)"
                                                                  : ""));
    // The command knows the current endpoint better: make way for the mux it starts.
    return Shutdown("stale: a command asked for " + hello.head());
  }
  if (spare_) {
    ConnPtr head = std::move(spare_);
    spare_.reset();
    Pair(conn, std::move(head));
  } else {
    waiting_.push_back(conn);
  }
  MaybeDial();
}

void Mux::Pair(const ConnPtr& client, ConnPtr head) {
  auto it = clients_.find(client.get());
  if (it == clients_.end()) {  // the command left meanwhile: keep the connection for the next
    if (!spare_) {
      spare_ = std::move(head);
    } else {
      head->Close();
    }
    return;
  }
  head_to_client_[head.get()] = client;
  it->second.head = std::move(head);
  ++relayed_;
  client->Send(EncodeReady(""));
}

void Mux::OnClientClose(const ConnPtr& conn) {
  std::erase(waiting_, conn);
  auto it = clients_.find(conn.get());
  if (it != clients_.end()) {
    Client& client = it->second;
    if (client.head) {
      head_to_client_.erase(client.head.get());
      // No session of this command left on it: it serves the next command.
      bool reusable = !client.unclean && client.open.empty() && !shut_;
      if (reusable && !waiting_.empty()) {
        ++reused_;
        ConnPtr next = waiting_.front();
        waiting_.pop_front();
        Pair(next, std::move(client.head));
      } else if (reusable && !spare_) {
        ++reused_;
        spare_ = std::move(client.head);
      } else {
        client.head->Close();
      }
    }
    clients_.erase(it);
  }
  last_activity_ = std::chrono::steady_clock::now();
  MaybeDial();
}

// A command waiting gets a dial at once. The spare is replaced only while no command is relayed:
// the head is single-threaded, and a handshake there (certificate verification) during a
// command would delay that command's requests by as much as the mux saved it.
void Mux::MaybeDial() {
  if (shut_ || dialing_) return;
  if (waiting_.empty() && (spare_ || !head_to_client_.empty())) return;
  dialing_ = true;
  transport::Handlers h;
  h.on_message = [this](const ConnPtr& c, std::string m) { OnHeadMessage(c, std::move(m)); };
  h.on_close = [this](const ConnPtr& c, const Status&) { OnHeadClose(c); };
  auto started = std::chrono::steady_clock::now();
  options_.dial(std::move(h), [this, started](Result<ConnPtr> head) {
    HERD_LOG(kDebug) << "mux: head dialled in "
                     << std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() -
                                                                  started)
                            .count()
                     << " ms";
    OnDialed(std::move(head));
  });
}

void Mux::OnDialed(Result<ConnPtr> head) {
  dialing_ = false;
  if (shut_) {
    if (head.ok()) (*head)->Close();
    return;
  }
  if (!head.ok()) {
    std::string why = "cannot reach the head at " + options_.head + ": " + head.status().message();
    for (const auto& conn : waiting_) Refuse(conn, why);
    waiting_.clear();
    return Shutdown(why);
  }
  if (!waiting_.empty()) {
    ConnPtr client = waiting_.front();
    waiting_.pop_front();
    Pair(client, std::move(head).value());
  } else if (!spare_) {
    spare_ = std::move(head).value();
  } else {
    (*head)->Close();  // a reused connection became the spare meanwhile
  }
  MaybeDial();
}

void Mux::OnHeadMessage(const ConnPtr& head, std::string message) {
  auto it = head_to_client_.find(head.get());
  if (it == head_to_client_.end()) {
    return;  // a spare's: nothing is asked on it
  }
  if (auto c = clients_.find(it->second.get()); c != clients_.end()) {
    Client& client = c->second;
    auto reply = proto::Decode<herd::v1::HeadToClient>(message);
    auto req = reply.ok() ? client.open.find(reply->request_id()) : client.open.end();
    if (req == client.open.end()) {
      client.unclean = true;
    } else if (req->second) {
      // A stream ends with a JobStatus marked end_of_stream; an error may not end it on the head.
      if (reply->has_error()) client.unclean = true;
      if (reply->has_job_status() && reply->job_status().end_of_stream()) client.open.erase(req);
    } else {
      client.open.erase(req);  // one reply (or error) per request
    }
  }
  it->second->Send(std::move(message));
}

void Mux::OnHeadClose(const ConnPtr& head) {
  if (head == spare_) {
    spare_.reset();
    HERD_LOG(kInfo) << "mux: the head closed the spare connection; dialling again";
    MaybeDial();
    return;
  }
  auto it = head_to_client_.find(head.get());
  if (it == head_to_client_.end()) return;
  ConnPtr client = it->second;
  head_to_client_.erase(it);
  if (auto c = clients_.find(client.get()); c != clients_.end()) c->second.head.reset();
  client->Close();  // the command sees its head connection end, as with a direct one
  MaybeDial();
}

void Mux::ArmIdle() {
  if (shut_) return;
  auto left = options_.idle_exit - std::chrono::duration_cast<std::chrono::milliseconds>(
                                       std::chrono::steady_clock::now() - last_activity_);
  if (!clients_.empty() || left.count() > 0) {
    idle_timer_.expires_after(clients_.empty() ? left
                                               : std::chrono::milliseconds(options_.idle_exit));
  } else {
    return Shutdown("idle for " + std::to_string(options_.idle_exit.count() / 1000) + " s");
  }
  idle_timer_.async_wait([this](boost::system::error_code ec) {
    if (!ec) ArmIdle();
  });
}

int RunMuxProcess(const std::string& socket_path, const std::string& head,
                  const std::string& certs_dir) {
  net::io_context io;
  auto hp = ParseHostPort(head, "--head");
  if (!hp.ok()) {
    HERD_LOG(kError) << "mux: " << hp.status().ToString();
    return 2;
  }
  std::string host = hp->host;
  uint16_t port = hp->port;
  std::string stamp = CertsStamp(certs_dir);  // before loading: a change after it shows
  transport::TlsFiles files{certs_dir + "/ca.crt", certs_dir + "/client.crt",
                            certs_dir + "/client.key"};
  auto tls = transport::LoadClientTls(files);
  if (!tls.ok()) {
    HERD_LOG(kError) << "mux: " << tls.status().ToString();
    return 1;
  }
  MuxOptions o;
  o.socket_path = socket_path;
  o.head = head;
  o.certs_dir = certs_dir;
  o.certs_stamp = stamp;
  o.dial = [&io, host, port, tls = *tls](transport::Handlers h,
                                         std::function<void(Result<ConnPtr>)> done) {
    transport::DialOptions d;
    d.host = host;
    d.port = port;
    d.loaded_tls = tls;
    d.role = transport::Role::kClient;
    d.handlers = std::move(h);
    transport::Dial(io, std::move(d), std::move(done));
  };
  Mux mux(io, std::move(o));
  net::signal_set signals(io, SIGTERM, SIGINT, SIGHUP);
  net::steady_timer stop_timer(io);
  mux.set_on_exit([&](const std::string&) {
    signals.cancel();
    // Let the closes go out (websocket close frames, the refusal that made us stale), bounded.
    stop_timer.expires_after(limits::kMuxCloseLinger);
    stop_timer.async_wait([&io](boost::system::error_code) { io.stop(); });
  });
  Status s = mux.Start();
  if (s.code() == Code::kAlreadyExists) return 0;  // another mux got there first
  if (!s.ok()) {
    HERD_LOG(kError) << "mux: " << s.ToString();
    return 1;
  }
  signals.async_wait([&](boost::system::error_code ec, int sig) {
    if (!ec) mux.Shutdown("signal " + std::to_string(sig));
  });
  io.run();
  return 0;
}

std::string CertsStamp(const std::string& certs_dir) {
  std::string out;
  for (const char* name : {"ca.crt", "client.crt", "client.key"}) {
    struct stat st {};
    if (::stat((certs_dir + "/" + name).c_str(), &st) == 0) {
      out += std::to_string(st.st_ino) + ":" + std::to_string(st.st_size) + ":" +
             std::to_string(st.st_mtim.tv_sec) + "." + std::to_string(st.st_mtim.tv_nsec);
    }
    out += ";";
  }
  return out;
}

std::string MuxSocketPath(const std::string& cluster_dir) {
  if (const char* env = std::getenv("HERD_MUX"); env && std::string_view(env) == "0") return "";
  std::string path = cluster_dir + "/mux.sock";
  if (path.size() >= sizeof(sockaddr_un::sun_path)) return "";
  return path;
}

Result<local::socket> ConnectMux(net::io_context& io, const std::string& socket_path,
                                 const std::string& head, const std::string& certs_dir) {
  local::socket socket(io);
  boost::system::error_code ec;
  socket.connect(local::endpoint(socket_path), ec);
  if (ec) return Unavailable("mux " + socket_path + ": " + ec.message());
  // A job's or an ssh master's copy of this socket would keep the head connection open.
  SetCloseOnExec(socket.native_handle());
  MuxHello hello;
  hello.set_version(herd::v1::PROTOCOL_VERSION_1);
  hello.set_head(head);
  hello.set_certs_dir(certs_dir);
  hello.set_certs_stamp(CertsStamp(certs_dir));
  HERD_RETURN_IF_ERROR(
      transport::WriteFrameSync(socket, hello.SerializeAsString(), limits::kMuxReadyTimeout)
          .WithContext("mux " + socket_path));
  auto frame = transport::ReadFrameSync(socket, limits::kMuxReadyTimeout);
  if (!frame.ok()) return frame.status().WithContext("mux " + socket_path);
  MuxReady ready;
  if (!ready.ParseFromString(*frame) || ready.version() != herd::v1::PROTOCOL_VERSION_1) {
    return Unavailable("mux " + socket_path + ": not a MuxReady of protocol version 1");
  }
  if (!ready.error().empty()) return Unavailable("mux " + socket_path + ": " + ready.error());
  return socket;
}

Status SpawnMux(const std::string& socket_path, const std::string& head,
                const std::string& certs_dir) {
  std::error_code ec;
  std::string self = fs::read_symlink("/proc/self/exe", ec).string();
  if (ec) return IoError("cannot find the herd binary: " + ec.message());
  std::string log = fs::path(socket_path).parent_path() / "mux.log";
  HERD_ASSIGN_OR_RETURN(pid_t pid, SpawnDetached({self, "_mux", "--socket", socket_path, "--head",
                                                  head, "--certs", certs_dir},
                                                 log, {{"HERD_TRACE", "0"}}));
  (void)pid;
  return Status::Ok();
}

namespace {
// The process of pid is a `herd _mux` of socket_path (not a reused pid).
bool IsMuxOf(pid_t pid, const std::string& socket_path) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/cmdline");
  std::string arg;
  bool mux = false, ours = false;
  while (std::getline(in, arg, '\0')) {
    if (arg == "_mux") mux = true;
    if (arg == socket_path) ours = true;
  }
  return mux && ours;
}
}  // namespace

void StopMux(const std::string& socket_path) {
  if (socket_path.empty()) return;
  pid_t pid = 0;
  {
    std::ifstream in(PidPath(socket_path));
    in >> pid;
  }
  if (pid > 0 && IsMuxOf(pid, socket_path)) {
    ::kill(pid, SIGTERM);
    auto deadline = std::chrono::steady_clock::now() + limits::kMuxStopWait;
    while (IsMuxOf(pid, socket_path) && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (IsMuxOf(pid, socket_path)) ::kill(pid, SIGKILL);
  }
  ::unlink(socket_path.c_str());
  ::unlink(PidPath(socket_path).c_str());
  ::unlink(LockPath(socket_path).c_str());
}

}  // namespace herd::controller
