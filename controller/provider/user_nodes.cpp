#include "controller/provider/user_nodes.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pwd.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <thread>

#include "controller/provider/netns.hpp"
#include "controller/provider/node_files.hpp"
#include "controller/ssh/parallel.hpp"
#include "controller/ssh/ssh_command.hpp"
#include "controller/ssh/subprocess.hpp"
#include "controller/ssh/tcp_probe.hpp"
#include "shared/common/file_util.hpp"
#include "shared/common/limits.hpp"
#include "shared/common/log.hpp"

namespace herd::controller {
namespace {

using node_files::EnsureNodeFiles;
using node_files::MakeDir;
using node_files::ReadIfAny;
using node_files::ReadProc;
using node_files::Tail;
using node_files::WriteIfChanged;

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr const char* kSshd = "/usr/sbin/sshd";

struct Record {
  std::string cluster;
  uid_t uid = 0;
  int subnet = -1;  // S of 127.213.S.0/24
  int num_nodes = 0;
  std::vector<int> ports;  // sshd port of node i
};

std::string NodeName(const std::string& cluster, int index) {
  return index == 0 ? cluster + "-head" : cluster + "-worker" + std::to_string(index);
}
std::string NodeIp(int subnet, int i) {
  return "127.213." + std::to_string(subnet) + "." + std::to_string(i + 1);
}
std::string NodesDir(const std::string& state_dir) { return state_dir + "/nodes"; }
std::string NodeDir(const std::string& state_dir, const std::string& node) {
  return NodesDir(state_dir) + "/" + node;
}

// sshd_config takes a path in double quotes (no escapes inside); '%' starts a token in
// AuthorizedKeysFile. Paths that cannot be written that way are refused up front.
Status CheckConfigPath(const std::string& path) {
  if (path.find_first_of("\"\\\n\r") != std::string::npos) {
    return InvalidArgument("state_dir " + path +
                           " contains a quote, backslash or newline, which sshd_config cannot "
                           "express; choose another HERD_HOME");
  }
  return Status::Ok();
}
std::string ConfigQuote(const std::string& path) { return "\"" + path + "\""; }
std::string EscapeTokens(const std::string& path) {
  std::string out;
  for (char c : path) out += c == '%' ? std::string("%%") : std::string(1, c);
  return out;
}

Result<std::string> UserName() {
  std::vector<char> buf(16384);
  passwd pw{}, *found = nullptr;
  int rc = ::getpwuid_r(::geteuid(), &pw, buf.data(), buf.size(), &found);
  if (rc != 0 || found == nullptr || pw.pw_name == nullptr || *pw.pw_name == '\0') {
    return FailedPrecondition("uid " + std::to_string(::geteuid()) +
                              " has no user name (passwd entry), and sshd logs users in by name");
  }
  return std::string(pw.pw_name);
}

Status CheckTools() {
  if (::access(kSshd, X_OK) != 0) {
    return FailedPrecondition(std::string("the local provider needs sshd at ") + kSshd +
                              " (package openssh-server)");
  }
  return Status::Ok();
}

Result<std::optional<Record>> ReadRecord(const std::string& state_dir) {
  std::string path = state_dir + "/" + UserNodes::kRecordFile;
  auto content = ReadIfAny(path);
  if (!content) return std::optional<Record>();
  Record r;
  long uid = -1;
  std::map<int, int> ports;
  std::istringstream in(*content);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream tok(line);
    std::string key;
    if (!(tok >> key) || key.starts_with("#")) continue;
    if (key == "cluster") {
      tok >> r.cluster;
    } else if (key == "uid") {
      tok >> uid;
    } else if (key == "subnet") {
      tok >> r.subnet;
    } else if (key == "num_nodes") {
      tok >> r.num_nodes;
    } else if (key == "port") {
      int i = -1, p = -1;
      if (tok >> i >> p) ports[i] = p;
    }
  }
  bool ok = !r.cluster.empty() && uid >= 0 && r.subnet >= 1 && r.subnet <= 254 &&
            r.num_nodes >= 1 && r.num_nodes <= limits::kLocalMaxNodes;
  for (int i = 0; ok && i < r.num_nodes; ++i) {
    auto it = ports.find(i);
    // 0: not chosen yet (a crash between the record and the first start).
    ok = it != ports.end() && (it->second == 0 || (it->second > 1024 && it->second < 65536));
    if (ok) r.ports.push_back(it->second);
  }
  if (!ok)
    return IoError(path + ": damaged local provider record; `herd down` removes the cluster");
  r.uid = static_cast<uid_t>(uid);
  return std::optional<Record>(r);
}

Status WriteRecord(const std::string& state_dir, const Record& r) {
  std::string text =
      "# herd local provider, user mode: nodes are sshds on loopback addresses\n"
      "cluster " +
      r.cluster + "\nuid " + std::to_string(r.uid) + "\nsubnet " + std::to_string(r.subnet) +
      "\nnum_nodes " + std::to_string(r.num_nodes) + "\n";
  for (int i = 0; i < r.num_nodes; ++i) {
    text += "port " + std::to_string(i) + " " + std::to_string(r.ports[i]) + "\n";
  }
  return WriteFileAtomic(state_dir + "/" + UserNodes::kRecordFile, text, 0600);
}

// An exclusive flock on the directory that holds the clusters' state dirs, held while a range is
// chosen (a lock on the directory itself leaves no file behind).
class DirLock {
 public:
  DirLock() = default;
  DirLock(const DirLock&) = delete;
  DirLock& operator=(const DirLock&) = delete;
  ~DirLock() {
    if (fd_ >= 0) ::close(fd_);  // closing releases the flock
  }
  Status Acquire(const std::string& path) {
    fd_ = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd_ < 0) return ErrnoError("open " + path, errno);
    auto deadline = Clock::now() + limits::kLocalCommandTimeout;
    while (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
      if (errno != EWOULDBLOCK && errno != EINTR) return ErrnoError("flock " + path, errno);
      if (Clock::now() >= deadline) return Unavailable("another herd command holds " + path);
      std::this_thread::sleep_for(milliseconds(50));
    }
    return Status::Ok();
  }

 private:
  int fd_ = -1;
};

Result<int> ChooseSubnet(const std::string& cluster, const std::string& state_dir) {
  std::set<int> used;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(fs::path(state_dir).parent_path(), ec)) {
    if (e.path() == fs::path(state_dir)) continue;
    auto other = ReadRecord(e.path().string());
    if (other.ok() && other->has_value()) used.insert((*other)->subnet);
  }
  // FNV-1a of the name, as the namespace mode does: the same range again after down + launch.
  uint32_t h = 2166136261u;
  for (char c : cluster) h = (h ^ static_cast<uint8_t>(c)) * 16777619u;
  int start = static_cast<int>(h % 254) + 1;
  for (int k = 0; k < 254; ++k) {
    int s = (start - 1 + k) % 254 + 1;
    if (!used.contains(s)) return s;
  }
  return Unavailable("no free range left in 127.213.0.0/16 for local cluster " + cluster);
}

// A socket bound to ip:port (0: the kernel picks), or an error; SO_REUSEADDR as sshd sets it, so
// connections of a previous sshd in TIME_WAIT do not count as taken.
Result<int> BindProbe(const std::string& ip, int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return ErrnoError("socket", errno);
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  if (::inet_pton(AF_INET, ip.c_str(), &a.sin_addr) != 1) {
    ::close(fd);
    return InvalidArgument("bad address " + ip);
  }
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    Status s = ErrnoError("bind " + ip + ":" + std::to_string(port), errno);
    ::close(fd);
    return s;
  }
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return static_cast<int>(ntohs(a.sin_port));
}

std::vector<std::string> Split0(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start < s.size()) {
    size_t end = s.find('\0', start);
    if (end == std::string::npos) end = s.size();
    out.push_back(s.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

pid_t ParentOf(pid_t pid) {
  std::string stat = ReadProc(pid, "stat");
  auto rp = stat.rfind(')');
  if (rp == std::string::npos) return 0;
  std::istringstream in(stat.substr(rp + 1));
  std::string state;
  long ppid = 0;
  in >> state >> ppid;
  return static_cast<pid_t>(ppid);
}

std::vector<pid_t> AllPids() {
  std::vector<pid_t> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("/proc", ec)) {
    std::string n = e.path().filename().string();
    if (n.empty() || !std::all_of(n.begin(), n.end(), ::isdigit)) continue;
    out.push_back(static_cast<pid_t>(std::atol(n.c_str())));
  }
  return out;
}

// A node's sshd, by its command line: sshd makes itself non-dumpable, so its /proc environ and exe
// are root's to read, but cmdline is not. The listener shows its argv ("/usr/sbin/sshd -D -f
// <node>/sshd_config ...") or retitles itself "sshd: /usr/sbin/sshd -D -f <node>/sshd_config ...
// [listener] ..." (OpenSSH >= 8.x). node_dir ends with '/' to mean "every node below it".
bool IsSshdOf(pid_t pid, const std::string& node_dir) {
  std::string cmdline = ReadProc(pid, "cmdline");
  if (!cmdline.starts_with(std::string(kSshd) + '\0') && !cmdline.starts_with("sshd: ")) {
    return false;
  }
  if (!node_dir.ends_with("/")) return cmdline.find(node_dir + "/sshd_config") != std::string::npos;
  size_t at = cmdline.find(node_dir);
  return at != std::string::npos && cmdline.find("/sshd_config", at) != std::string::npos;
}

// Everything a session started has the node's HOME (sshd's SetEnv); node_dir as for IsSshdOf.
bool HasNodeHome(pid_t pid, const std::string& node_dir) {
  bool any = node_dir.ends_with("/");
  for (const auto& kv : Split0(ReadProc(pid, "environ"))) {
    if (!kv.starts_with("HOME=")) continue;
    std::string v = kv.substr(5);
    return any ? v.starts_with(node_dir)
               : (v == node_dir + "/home" || v.starts_with(node_dir + "/home/"));
  }
  return false;
}

std::vector<pid_t> Collect(const std::string& node_dir) {
  const pid_t self = ::getpid();
  std::set<pid_t> found;
  std::multimap<pid_t, pid_t> children;
  for (pid_t p : AllPids()) {
    if (p == self || !netns::IsAlive(p)) continue;
    children.emplace(ParentOf(p), p);
    if (IsSshdOf(p, node_dir) || HasNodeHome(p, node_dir)) found.insert(p);
  }
  // The sshd's per-connection children, and descendants that changed their environment.
  std::vector<pid_t> todo(found.begin(), found.end());
  while (!todo.empty()) {
    pid_t p = todo.back();
    todo.pop_back();
    auto [b, e] = children.equal_range(p);
    for (auto it = b; it != e; ++it) {
      if (it->second != self && found.insert(it->second).second) todo.push_back(it->second);
    }
  }
  return {found.begin(), found.end()};
}

// SIGTERM, then SIGKILL after the grace period, repeated until nothing of the node is left.
// Processes seen once stay on the list while they live: a child whose parent died and that
// changed its environment is no longer found by a fresh scan.
Status KillNode(const std::string& node_dir, const std::string& what) {
  std::set<pid_t> seen;
  auto scan = [&] {
    for (pid_t p : Collect(node_dir)) seen.insert(p);
    std::vector<pid_t> alive;
    for (pid_t p : seen) {
      if (netns::IsAlive(p)) alive.push_back(p);
    }
    return alive;
  };
  auto pids = scan();
  if (pids.empty()) return Status::Ok();
  const auto start = Clock::now();
  for (pid_t p : pids) ::kill(p, SIGTERM);
  while (true) {
    std::this_thread::sleep_for(limits::kKillSweepInterval);
    pids = scan();
    if (pids.empty()) return Status::Ok();
    auto elapsed = Clock::now() - start;
    for (pid_t p : pids) ::kill(p, elapsed >= limits::kKillGracePeriod ? SIGKILL : SIGTERM);
    if (elapsed >= limits::kKillGracePeriod + limits::kKillSweepTimeout) break;
  }
  std::string left;
  for (pid_t p : pids) left += (left.empty() ? "" : " ") + std::to_string(p);
  return Internal("processes of " + what + " survived SIGKILL: " + left);
}

// The node's listening sshd (per-connection children retitle themselves "sshd: user@notty").
bool IsNodeSshd(pid_t pid, const std::string& node_dir) {
  if (!netns::IsAlive(pid) || !IsSshdOf(pid, node_dir)) return false;
  std::string cmdline = ReadProc(pid, "cmdline");
  return cmdline.starts_with(std::string(kSshd) + '\0') ||
         cmdline.find("[listener]") != std::string::npos;
}

struct NodeSpec {
  int index;
  std::string name, dir, ip;
};

NodeSpec Spec(const Record& r, const std::string& state_dir, int i) {
  std::string name = NodeName(r.cluster, i);
  return {i, name, NodeDir(state_dir, name), NodeIp(r.subnet, i)};
}

std::string SshdConfig(const NodeSpec& n, int port) {
  const std::string& d = n.dir;
  return "# Written by herd's local provider (user mode) for node " + n.name +
         "; rewritten on every start.\n"
         "ListenAddress " +
         n.ip + ":" + std::to_string(port) +
         "\n"
         "HostKey " +
         ConfigQuote(d + "/ssh_host_ed25519_key") +
         "\n"
         "PidFile " +
         ConfigQuote(d + "/sshd.pid") +
         "\n"
         "AuthorizedKeysFile " +
         ConfigQuote(EscapeTokens(d + "/authorized_keys")) +
         "\n"
         // The node directory may sit below group-writable directories.
         "StrictModes no\n"
         "UsePAM no\n"
         "PubkeyAuthentication yes\n"
         "PasswordAuthentication no\n"
         "KbdInteractiveAuthentication no\n"
         "PermitUserEnvironment no\n"
         "SetEnv " +
         ConfigQuote("HOME=" + d + "/home") +
         "\n"
         // sshd starts sessions in the passwd home; `session` enters the node's home first.
         "ForceCommand exec /bin/sh " +
         ShellQuote(d + "/session") +
         "\n"
         "PrintMotd no\n"
         "PrintLastLog no\n"
         "X11Forwarding no\n"
         "AllowTcpForwarding yes\n"
         // Fan-out multiplexes many sessions over one ControlMaster connection.
         "MaxSessions 64\n"
         "MaxStartups 64:30:128\n"
         "AcceptEnv LANG LC_*\n"
         "Subsystem sftp /usr/lib/openssh/sftp-server\n";
}

// Run by every session (ForceCommand): the requested command with the user's shell, as sshd runs
// it, but in the node's home. SSH_ORIGINAL_COMMAND is unset (not empty) for a login shell.
std::string SessionScript(const NodeSpec& n) {
  return "# herd local node " + n.name +
         ": every ssh session runs this, in the node's own home.\n"
         "cd \"$HOME\" || { echo \"herd: cannot enter the node home $HOME\" >&2; exit 1; }\n"
         "if [ -n \"${SSH_ORIGINAL_COMMAND+set}\" ]; then\n"
         "  exec \"${SHELL:-/bin/sh}\" -c \"$SSH_ORIGINAL_COMMAND\"\n"
         "fi\n"
         "exec \"${SHELL:-/bin/sh}\" -l\n";
}

// Files of one node: those of both modes (EnsureNodeFiles) and the session script.
Status EnsureUserNodeFiles(const NodeSpec& n, const std::string* public_key) {
  HERD_RETURN_IF_ERROR(EnsureNodeFiles(n.dir, n.name, public_key));
  return WriteIfChanged(n.dir + "/session", SessionScript(n), 0600);
}

// Starts the node's sshd unless it runs (on the recorded port while that is free, else on a new
// one, which *port then holds), and waits for its banner.
Status EnsureSshd(const NodeSpec& n, int* port) {
  std::string pidfile = n.dir + "/sshd.pid";
  if (auto text = ReadIfAny(pidfile); text && *port > 0) {
    pid_t pid = static_cast<pid_t>(std::atol(text->c_str()));
    if (IsNodeSshd(pid, n.dir) && ProbeSshBanner(n.ip, *port, milliseconds(2000)).ok()) {
      return Status::Ok();
    }
  }
  // A listener whose pid file was lost would hold the port: stop it (sessions stay).
  std::vector<pid_t> stray;
  for (pid_t p : Collect(n.dir)) {
    if (IsNodeSshd(p, n.dir)) stray.push_back(p);
  }
  for (pid_t p : stray) ::kill(p, SIGKILL);
  for (auto until = Clock::now() + limits::kKillSweepTimeout;
       Clock::now() < until &&
       std::any_of(stray.begin(), stray.end(), [](pid_t p) { return netns::IsAlive(p); });) {
    std::this_thread::sleep_for(limits::kKillSweepInterval);
  }
  if (*port <= 0 || !BindProbe(n.ip, *port).ok()) {
    HERD_ASSIGN_OR_RETURN(*port, BindProbe(n.ip, 0));
  }
  HERD_RETURN_IF_ERROR(WriteIfChanged(n.dir + "/sshd_config", SshdConfig(n, *port), 0600));
  HERD_ASSIGN_OR_RETURN(pid_t pid, SpawnDetached({kSshd, "-D", "-f", n.dir + "/sshd_config", "-E",
                                                  n.dir + "/sshd.log"},
                                                 n.dir + "/sshd.out"));
  // sshd writes the same pid there once it listens; written now so a crash in between is seen.
  HERD_RETURN_IF_ERROR(WriteFileAtomic(pidfile, std::to_string(pid) + "\n", 0600));

  const std::string where = n.name + " (" + n.ip + ":" + std::to_string(*port) + ")";
  auto deadline = Clock::now() + limits::kLocalNodeStartTimeout;
  Status last;
  while (Clock::now() < deadline) {
    if (!netns::IsAlive(pid)) {
      return Unavailable(where + ": sshd exited at start; " + n.dir +
                         "/sshd.out: " + Tail(n.dir + "/sshd.out", 1000) +
                         "; sshd.log: " + Tail(n.dir + "/sshd.log", 1000));
    }
    last = ProbeSshBanner(n.ip, *port, milliseconds(500));
    if (last.ok()) return Status::Ok();
    std::this_thread::sleep_for(milliseconds(50));
  }
  return DeadlineExceeded(where + ": sshd gave no banner within " +
                          std::to_string(std::chrono::duration_cast<std::chrono::seconds>(
                                             limits::kLocalNodeStartTimeout)
                                             .count()) +
                          " s: " + last.message() +
                          "; sshd.log: " + Tail(n.dir + "/sshd.log", 1000));
}

Result<std::vector<NodeHandle>> BringUp(Record r, const std::string& state_dir,
                                        const std::string* public_key) {
  HERD_ASSIGN_OR_RETURN(std::string user, UserName());
  HERD_RETURN_IF_ERROR(MakeDir(NodesDir(state_dir), 0700));
  std::vector<int> ports = r.ports;
  Status up = ForEachParallel(
      static_cast<size_t>(r.num_nodes),
      [&](size_t i) -> Status {
        NodeSpec n = Spec(r, state_dir, static_cast<int>(i));
        HERD_RETURN_IF_ERROR(EnsureUserNodeFiles(n, public_key));
        return EnsureSshd(n, &ports[i]);
      },
      [&](size_t i) { return NodeName(r.cluster, static_cast<int>(i)); });
  // Ports that changed are recorded even when another node failed: their sshds run on them.
  if (ports != r.ports) {
    r.ports = ports;
    HERD_RETURN_IF_ERROR(WriteRecord(state_dir, r));
  }
  HERD_RETURN_IF_ERROR(up);
  std::vector<NodeHandle> out;
  for (int i = 0; i < r.num_nodes; ++i) {
    NodeSpec n = Spec(r, state_dir, i);
    out.push_back({n.name, n.ip, r.ports[i], user, "", n.dir + "/home"});
  }
  return out;
}

Result<Record> LoadExisting(const std::string& cluster, const std::string& state_dir) {
  HERD_ASSIGN_OR_RETURN(std::optional<Record> r, ReadRecord(state_dir));
  if (!r) {
    return NotFound("local cluster " + cluster + " has no nodes (no record in " + state_dir + ")");
  }
  if (r->cluster != cluster) {
    return FailedPrecondition(state_dir + " records local cluster " + r->cluster + ", not " +
                              cluster);
  }
  if (r->uid != ::geteuid()) {
    return FailedPrecondition("local cluster " + cluster + " runs as uid " +
                              std::to_string(r->uid) + "; manage it as that user (this is uid " +
                              std::to_string(::geteuid()) + ")");
  }
  return *r;
}

}  // namespace

bool UserNodes::HasRecord(const std::string& state_dir) {
  return ::access((state_dir + "/" + kRecordFile).c_str(), F_OK) == 0;
}

std::vector<pid_t> UserNodes::Processes(const std::string& state_dir, const std::string& node) {
  return Collect(node.empty() ? NodesDir(state_dir) + "/" : NodeDir(state_dir, node));
}

Result<std::vector<NodeHandle>> UserNodes::Provision(const ProvisionRequest& req) {
  HERD_RETURN_IF_ERROR(CheckTools());
  HERD_RETURN_IF_ERROR(CheckConfigPath(req.state_dir));
  HERD_RETURN_IF_ERROR(MakeDir(req.state_dir, 0700));
  Record record;
  {
    DirLock lock;
    HERD_RETURN_IF_ERROR(lock.Acquire(fs::path(req.state_dir).parent_path().string()));
    HERD_ASSIGN_OR_RETURN(std::optional<Record> existing, ReadRecord(req.state_dir));
    if (existing) {
      HERD_ASSIGN_OR_RETURN(record, LoadExisting(req.cluster, req.state_dir));
      if (record.num_nodes != req.num_nodes) {
        return FailedPrecondition("local cluster " + req.cluster + " has " +
                                  std::to_string(record.num_nodes) + " node(s), not " +
                                  std::to_string(req.num_nodes) + "; tear it down first");
      }
    } else {
      record.cluster = req.cluster;
      record.uid = ::geteuid();
      record.num_nodes = req.num_nodes;
      record.ports.assign(static_cast<size_t>(req.num_nodes), 0);
      HERD_ASSIGN_OR_RETURN(record.subnet, ChooseSubnet(req.cluster, req.state_dir));
      // Recorded before anything is made, so that other clusters avoid the range.
      HERD_RETURN_IF_ERROR(WriteRecord(req.state_dir, record));
      HERD_LOG(kInfo) << "local cluster " << req.cluster << " (user mode): addresses 127.213."
                      << record.subnet << ".1-" << record.num_nodes << ", sshd as uid "
                      << record.uid;
    }
  }
  return BringUp(record, req.state_dir, &req.ssh_public_key);
}

Result<std::vector<NodeHandle>> UserNodes::Start(const std::string& cluster,
                                                 const std::string& state_dir) {
  HERD_RETURN_IF_ERROR(CheckTools());
  HERD_ASSIGN_OR_RETURN(Record record, LoadExisting(cluster, state_dir));
  return BringUp(record, state_dir, nullptr);
}

Status UserNodes::Stop(const std::string& cluster, const std::string& state_dir) {
  HERD_ASSIGN_OR_RETURN(Record record, LoadExisting(cluster, state_dir));
  return ForEachParallel(
      static_cast<size_t>(record.num_nodes),
      [&](size_t i) -> Status {
        NodeSpec n = Spec(record, state_dir, static_cast<int>(i));
        HERD_RETURN_IF_ERROR(KillNode(n.dir, "node " + n.name));
        std::error_code ec;
        fs::remove(n.dir + "/sshd.pid", ec);
        return Status::Ok();
      },
      [&](size_t i) { return NodeName(cluster, static_cast<int>(i)); });
}

Status UserNodes::Teardown(const std::string& cluster, const std::string& state_dir) {
  auto record = ReadRecord(state_dir);
  if (record.ok() && record->has_value() && (*record)->uid != ::geteuid() && ::geteuid() != 0) {
    return FailedPrecondition("local cluster " + cluster + " runs as uid " +
                              std::to_string((*record)->uid) + "; tear it down as that user");
  }
  // Found by the environment tags, so a lost or damaged record leaves nothing running either.
  HERD_RETURN_IF_ERROR(KillNode(NodesDir(state_dir) + "/", "local cluster " + cluster));
  std::error_code ec;
  fs::remove_all(NodesDir(state_dir), ec);
  if (ec) return IoError("remove " + NodesDir(state_dir) + ": " + ec.message());
  fs::remove(state_dir + "/" + kRecordFile, ec);
  fs::remove(state_dir + "/" + kRecordFile + ".tmp", ec);
  fs::remove(state_dir, ec);  // only when nothing else (the controller's own files) is left
  return Status::Ok();
}

}  // namespace herd::controller
