// The per-cluster mux: what `ssh -o ControlMaster=auto -o ControlPersist` is for ssh, for herd's
// connection to a cluster's head. A detached `herd _mux` process, started by the first command that
// connects to the head, keeps a loaded TLS context and one TLS websocket to the head open ahead of
// time (the next one is dialled when no command is being relayed, or at once for a command that
// finds none ready). A herd command connects to its unix
// socket (mux.sock, 0600, in the cluster's directory), says which head it wants (MuxHello,
// mux.proto) and gets a head connection of its own, relayed frame for frame: no OpenSSL setup, no
// certificate decoding and no handshake on the command's path. Closing the command's socket closes
// its head connection, so a head session lives exactly as long as the command's (Ctrl-C detaches,
// as before). The mux exits when idle for limits::kMuxIdleExit, when it cannot reach the head, when
// a command names another endpoint (stale), and on SIGTERM (`herd down` / `herd stop`). A command
// that finds no working mux dials the head itself, as without one, and starts a new mux.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "shared/common/limits.hpp"
#include "shared/common/status.hpp"
#include "shared/transport/transport.hpp"

namespace herd::controller {

using ConnPtr = std::shared_ptr<transport::Connection>;
using DialHeadFn =
    std::function<void(transport::Handlers, std::function<void(Result<ConnPtr>)> done)>;

struct MuxOptions {
  std::string socket_path;  // mux.sock; mux.sock.lock and mux.sock.pid lie beside it
  std::string head;         // "host:port" of the head (the kept forward's local port)
  std::string certs_dir;    // ca.crt, client.crt, client.key
  std::string certs_stamp;  // CertsStamp(certs_dir) when the files were loaded
  std::chrono::milliseconds idle_exit = limits::kMuxIdleExit;
  DialHeadFn dial;  // one new connection to the head
};

class Mux {
 public:
  Mux(boost::asio::io_context& io, MuxOptions options);
  ~Mux();
  // Takes mux.sock.lock (AlreadyExists when another mux holds it), binds mux.sock with mode 0600,
  // writes mux.sock.pid, starts accepting and dials the first head connection.
  Status Start();
  // Closes every connection, removes the socket and pid file and calls on_exit once. Runs by
  // itself when idle, when a dial fails and on a stale hello.
  void Shutdown(const std::string& why);
  void set_on_exit(std::function<void(const std::string& why)> f) { on_exit_ = std::move(f); }
  int relayed() const { return relayed_; }  // commands handed a head connection so far
  int reused() const { return reused_; }    // head connections kept for the next command
  std::size_t waiting() const { return waiting_.size(); }  // commands waiting for a dial

 private:
  struct Client {
    ConnPtr conn;
    ConnPtr head;  // null until paired
    bool hello_done = false;
    // Requests sent and not answered to the end (request id -> is a Subscribe), and whether
    // anything was seen that the mux cannot account for: a head connection is handed to the
    // next command only when neither holds (no reply of this command can reach the next one).
    std::map<uint64_t, bool> open;
    bool unclean = false;
  };
  void DoAccept();
  void OnClientMessage(const ConnPtr& conn, std::string message);
  void OnClientClose(const ConnPtr& conn);
  void Refuse(const ConnPtr& conn, const std::string& why);
  void Pair(const ConnPtr& client, ConnPtr head);
  void MaybeDial();
  void OnDialed(Result<ConnPtr> head);
  void OnHeadMessage(const ConnPtr& head, std::string message);
  void OnHeadClose(const ConnPtr& head);
  void ArmIdle();

  boost::asio::io_context& io_;
  MuxOptions options_;
  boost::asio::local::stream_protocol::acceptor acceptor_;
  boost::asio::steady_timer idle_timer_;
  int lock_fd_ = -1;
  bool started_ = false;
  bool shut_ = false;
  bool dialing_ = false;
  ConnPtr spare_;
  std::deque<ConnPtr> waiting_;  // hello answered by the next dial
  std::map<const transport::Connection*, Client> clients_;
  std::map<const transport::Connection*, ConnPtr> head_to_client_;  // head -> its command
  std::chrono::steady_clock::time_point last_activity_;
  int relayed_ = 0;
  int reused_ = 0;
  std::function<void(const std::string&)> on_exit_;
};

// `herd _mux`: runs a mux with real head dials until it exits; the process's exit code.
int RunMuxProcess(const std::string& socket_path, const std::string& head,
                  const std::string& certs_dir);

// Inode, size and mtime of the certificate files in certs_dir ("" parts for missing ones): what
// tells a mux that the certificates it loaded were replaced.
std::string CertsStamp(const std::string& certs_dir);

// ---- The command's side ----
// mux.sock in a cluster's directory, or "" when that path does not fit a unix socket address, or
// the mux is turned off (HERD_MUX=0).
std::string MuxSocketPath(const std::string& cluster_dir);
// Connects to the mux at socket_path and asks for a head connection to `head` with certs_dir; the
// returned socket then carries the client protocol (hand it to transport::StartFramed). Bounded by
// limits::kMuxReadyTimeout.
Result<boost::asio::local::stream_protocol::socket> ConnectMux(boost::asio::io_context& io,
                                                               const std::string& socket_path,
                                                               const std::string& head,
                                                               const std::string& certs_dir);
// Starts `herd _mux` detached (log: mux.log beside the socket).
Status SpawnMux(const std::string& socket_path, const std::string& head,
                const std::string& certs_dir);
// Ends the mux of socket_path, if one runs (SIGTERM, SIGKILL after limits::kMuxStopWait), and
// removes its files. For `herd down` and `herd stop`.
void StopMux(const std::string& socket_path);

}  // namespace herd::controller
