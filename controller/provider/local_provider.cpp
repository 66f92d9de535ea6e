#include "controller/provider/local_provider.hpp"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>
#include <thread>

#include <yaml-cpp/yaml.h>

#include "controller/provider/aws_provider.hpp"
#include "controller/provider/herd_config.hpp"
#include "controller/provider/netns.hpp"
#include "controller/provider/node_files.hpp"
#include "controller/provider/user_nodes.hpp"
#include "controller/ssh/parallel.hpp"
#include "controller/ssh/ssh_command.hpp"
#include "controller/ssh/subprocess.hpp"
#include "shared/common/agent_layout.hpp"
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

constexpr const char* kRecordFile = "local_provider.state";
// Serialises network changes of all local clusters on this machine (subnet choice included).
constexpr const char* kLockPath = "/run/herd-local-provider.lock";
// Where a node sees its own directory: the node covers /root with its home, and state_dir is
// usually under /root/.herd, so sshd must not read its files through the original path.
constexpr const char* kNodeMount = "/run/herd-node";
// In the node's directory (kNodeMount inside the node): sshd's PidFile, written once it listens.
constexpr const char* kSshdListeningFile = "sshd.listening";
constexpr const char* kSshd = "/usr/sbin/sshd";
constexpr int kMaxClusterNameLength = 40;  // "<name>-worker199" stays a valid 63-byte hostname

struct Record {
  std::string cluster;
  int subnet = -1;  // S of 10.213.S.0/24
  int num_nodes = 0;
};

std::string NodeIp(int subnet, int i) {
  return "10.213." + std::to_string(subnet) + "." + std::to_string(i + 1);
}
std::string HostIp(int subnet) { return "10.213." + std::to_string(subnet) + ".254"; }
std::string HostVeth(int subnet) { return "herdl" + std::to_string(subnet); }

// The route to the cluster's subnet through `dev` (from address `src`), as the kernel makes it for
// the address, with delayed ACKs off. OpenSSH turns Nagle off only for sessions with a pty, so
// every exchange of a non-interactive session (a connection's key exchange and authentication, a
// session's open and exit) would wait for the peer's delayed ACK, most of a fresh `ssh node true`.
// Both ends get it: the nodes' routes (node <-> node, node -> this machine) and this machine's
// (this machine -> node).
std::string QuickAckRoute(int subnet, const std::string& dev, const std::string& src) {
  return "route replace 10.213." + std::to_string(subnet) + ".0/24 dev " + dev +
         " proto kernel scope link src " + src + " quickack 1";
}

std::string NodeDir(const std::string& state_dir, const std::string& node) {
  return state_dir + "/nodes/" + node;
}

Status NeedRoot() {
  if (::geteuid() != 0) {
    return FailedPrecondition(
        "this local cluster uses network namespaces, which need root (running as uid " +
        std::to_string(::geteuid()) + ")");
  }
  return Status::Ok();
}

Status CheckTools() {
  if (::access(kSshd, X_OK) != 0) {
    return FailedPrecondition(std::string("the local provider needs sshd at ") + kSshd +
                              " (package openssh-server)");
  }
  auto r = RunProcess({"ip", "netns", "list"}, {}, limits::kLocalCommandTimeout);
  if (!r.ok() || r->exit_code != 0) {
    return FailedPrecondition("the local provider needs `ip netns` (package iproute2): " +
                              (r.ok() ? r->err : r.status().message()));
  }
  return Status::Ok();
}

Status ValidateCluster(const std::string& cluster) {
  bool ok = !cluster.empty() && cluster.size() <= kMaxClusterNameLength &&
            std::isalnum(static_cast<unsigned char>(cluster.front())) && cluster.back() != '-' &&
            std::all_of(cluster.begin(), cluster.end(), [](char c) {
              return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-';
            });
  if (!ok) {
    return InvalidArgument("cluster name \"" + cluster +
                           "\" must be 1-40 characters of a-z, 0-9 and '-', starting with a letter "
                           "or digit and not ending with '-'");
  }
  return Status::Ok();
}

Result<std::optional<Record>> ReadRecord(const std::string& state_dir) {
  std::string path = state_dir + "/" + kRecordFile;
  auto content = ReadIfAny(path);
  if (!content) return std::optional<Record>();
  Record r;
  std::istringstream in(*content);
  std::string key;
  while (in >> key) {
    if (key == "cluster") {
      in >> r.cluster;
    } else if (key == "subnet") {
      in >> r.subnet;
    } else if (key == "num_nodes") {
      in >> r.num_nodes;
    } else {
      std::string rest;
      std::getline(in, rest);
    }
  }
  if (r.cluster.empty() || r.subnet < 0 || r.subnet > 255 || r.num_nodes < 1) {
    return IoError(path + ": damaged local provider record; `herd down` removes the cluster");
  }
  return std::optional<Record>(r);
}

Status WriteRecord(const std::string& state_dir, const Record& r) {
  std::string text =
      "# herd local provider: nodes of this cluster are network namespaces\n"
      "cluster " +
      r.cluster + "\nsubnet " + std::to_string(r.subnet) + "\nnum_nodes " +
      std::to_string(r.num_nodes) + "\n";
  return WriteFileAtomic(state_dir + "/" + kRecordFile, text, 0600);
}

// An exclusive lock on a machine-wide file, held while namespaces, links and subnets change.
class HostLock {
 public:
  HostLock() = default;
  HostLock(const HostLock&) = delete;
  HostLock& operator=(const HostLock&) = delete;
  ~HostLock() {
    if (fd_ >= 0) ::close(fd_);  // closing releases the flock
  }
  Status Acquire() {
    fd_ = ::open(kLockPath, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd_ < 0) return ErrnoError(std::string("open ") + kLockPath, errno);
    auto deadline = Clock::now() + limits::kLocalCommandTimeout;
    while (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
      if (errno != EWOULDBLOCK && errno != EINTR) return ErrnoError("flock", errno);
      if (Clock::now() >= deadline) {
        return Unavailable(std::string("another herd command holds ") + kLockPath);
      }
      std::this_thread::sleep_for(milliseconds(50));
    }
    return Status::Ok();
  }

 private:
  int fd_ = -1;
};

// "a.b.c.d/len" or "a.b.c.d" -> (address, length).
std::optional<std::pair<uint32_t, int>> ParsePrefix(const std::string& s) {
  auto slash = s.find('/');
  std::string addr = s.substr(0, slash);
  int len = slash == std::string::npos ? 32 : std::atoi(s.c_str() + slash + 1);
  uint32_t a = 0;
  int parts = 0;
  std::istringstream in(addr);
  std::string octet;
  while (std::getline(in, octet, '.')) {
    if (octet.empty() || !std::all_of(octet.begin(), octet.end(), ::isdigit)) return std::nullopt;
    int v = std::atoi(octet.c_str());
    if (v > 255) return std::nullopt;
    a = (a << 8) | static_cast<uint32_t>(v);
    ++parts;
  }
  if (parts != 4 || len < 0 || len > 32) return std::nullopt;
  return std::make_pair(a, len);
}

bool Overlaps(uint32_t a, int alen, uint32_t b, int blen) {
  int m = std::min(alen, blen);
  if (m == 0) return true;
  uint32_t mask = m == 32 ? 0xffffffffu : ~((1u << (32 - m)) - 1);
  return (a & mask) == (b & mask);
}

// Subnets this machine already uses or another local cluster has recorded.
Result<std::set<int>> UsedSubnets(const std::string& state_dir) {
  std::set<int> used;
  std::vector<std::string> prefixes;
  for (const auto& args : {std::vector<std::string>{"-4", "-o", "route", "show", "table", "all"},
                           std::vector<std::string>{"-4", "-o", "addr", "show"}}) {
    HERD_ASSIGN_OR_RETURN(std::string out, netns::IpOutput("", args));
    std::istringstream lines(out);
    std::string line;
    while (std::getline(lines, line)) {
      std::istringstream tok(line);
      std::vector<std::string> t;
      std::string w;
      while (tok >> w) t.push_back(w);
      if (t.empty()) continue;
      if (args[2] == "addr") {
        auto inet = std::find(t.begin(), t.end(), "inet");
        if (inet != t.end() && inet + 1 != t.end()) prefixes.push_back(*(inet + 1));
        continue;
      }
      static const std::set<std::string> kTypes = {
          "unicast",   "local",       "broadcast", "multicast", "anycast",
          "blackhole", "unreachable", "prohibit",  "throw",     "nat"};
      size_t i = kTypes.contains(t[0]) ? 1 : 0;
      // A default route covers everything by design; more specific routes win over it.
      if (i < t.size() && t[i] != "default") prefixes.push_back(t[i]);
    }
  }
  for (const auto& p : prefixes) {
    auto parsed = ParsePrefix(p);
    if (!parsed || parsed->second == 0) continue;
    for (int s = 0; s < 256; ++s) {
      uint32_t net = (10u << 24) | (213u << 16) | (static_cast<uint32_t>(s) << 8);
      if (Overlaps(parsed->first, parsed->second, net, 24)) used.insert(s);
    }
  }
  // Records of other clusters beside this one (a stopped or half-made cluster has no route).
  std::error_code ec;
  fs::path parent = fs::path(state_dir).parent_path();
  for (const auto& e : fs::directory_iterator(parent, ec)) {
    if (e.path() == fs::path(state_dir)) continue;
    auto other = ReadRecord(e.path().string());
    if (other.ok() && other->has_value()) used.insert((*other)->subnet);
  }
  return used;
}

Result<int> ChooseSubnet(const std::string& cluster, const std::string& state_dir) {
  HERD_ASSIGN_OR_RETURN(std::set<int> used, UsedSubnets(state_dir));
  // FNV-1a of the name: a cluster tends to get the same subnet again after `down` + `launch`.
  uint32_t h = 2166136261u;
  for (char c : cluster) h = (h ^ static_cast<uint8_t>(c)) * 16777619u;
  int start = static_cast<int>(h % 254) + 1;
  for (int k = 0; k < 254; ++k) {
    int s = (start - 1 + k) % 254 + 1;
    if (!used.contains(s) && !netns::Ip("", {"link", "show", "dev", HostVeth(s)}).ok()) return s;
  }
  return Unavailable("no free /24 left in 10.213.0.0/16 for local cluster " + cluster);
}

bool LinkExists(const std::string& ns, const std::string& dev) {
  return netns::Ip(ns, {"link", "show", "dev", dev}).ok();
}

// Node i's addresses and routes, as `ip -batch` lines: its subnet (QuickAckRoute) and the
// configured host routes through this machine's end of the uplink. Those carry `proto static`,
// which nothing else in the node uses: the ones of an earlier config are flushed first.
std::vector<std::string> NodeNetworkCommands(const Record& r, int i,
                                             const std::vector<std::string>& host_routes) {
  std::vector<std::string> lines = {
      "link set lo up", "addr replace " + NodeIp(r.subnet, i) + "/24 dev eth0", "link set eth0 up",
      QuickAckRoute(r.subnet, "eth0", NodeIp(r.subnet, i)), "route flush proto static"};
  for (const auto& p : host_routes) {
    lines.push_back("route replace " + p + " via " + HostIp(r.subnet) + " dev eth0 proto static");
  }
  return lines;
}

// Creates what is missing of the cluster's network; what exists stays. Run under HostLock.
// Commands go in batches (`ip -batch`, one process per namespace at most), so a 64-node cluster
// costs tens of `ip` processes, not thousands.
Status EnsureNetwork(const Record& r, const std::vector<std::string>& host_routes) {
  const std::string br = LocalProvider::BridgeNetns(r.cluster);
  HERD_RETURN_IF_ERROR(netns::Ensure(br));
  HERD_ASSIGN_OR_RETURN(std::vector<std::string> names, netns::LinkNames(br));
  std::set<std::string> br_links(names.begin(), names.end());
  std::vector<std::string> br_batch = {"link set lo up"};
  if (!br_links.count("br0")) br_batch.push_back("link add br0 type bridge");
  br_batch.push_back("link set br0 up");
  HERD_RETURN_IF_ERROR(netns::IpBatch(br, br_batch));

  const std::string hv = HostVeth(r.subnet);
  if (!LinkExists("", hv) || !br_links.count("uplink")) {
    // Half of a pair, or a pair from a crash: remove both ends and make it again.
    if (LinkExists("", hv)) HERD_RETURN_IF_ERROR(netns::Ip("", {"link", "del", hv}));
    if (LinkExists(br, "uplink")) HERD_RETURN_IF_ERROR(netns::Ip(br, {"link", "del", "uplink"}));
    HERD_RETURN_IF_ERROR(
        netns::Ip("", {"link", "add", hv, "type", "veth", "peer", "name", "uplink", "netns", br}));
  }
  HERD_RETURN_IF_ERROR(netns::Ip(br, {"link", "set", "uplink", "master", "br0", "up"}));
  HERD_RETURN_IF_ERROR(netns::IpBatch(
      "", {"addr replace " + HostIp(r.subnet) + "/24 dev " + hv, "link set " + hv + " up",
           QuickAckRoute(r.subnet, hv, HostIp(r.subnet))}));

  // Node namespaces that existed before this call: only they can hold stale neighbour entries.
  std::vector<bool> existed(r.num_nodes);
  std::vector<std::string> root_batch;
  for (int i = 0; i < r.num_nodes; ++i) {
    const std::string ns = LocalProvider::NodeNetns(r.cluster, i);
    existed[i] = netns::Exists(ns);
    if (!existed[i]) root_batch.push_back("netns add " + ns);
  }
  HERD_RETURN_IF_ERROR(netns::IpBatch("", root_batch));

  // A node's veth pair exists iff its bridge port does (deleting one end deletes both, and a
  // deleted namespace takes its end with it).
  auto add_pair = [&](int i) {
    return "link add eth0 netns " + LocalProvider::NodeNetns(r.cluster, i) +
           " type veth peer name n" + std::to_string(i) + " netns " + br;
  };
  std::vector<int> remade;
  root_batch.clear();
  for (int i = 0; i < r.num_nodes; ++i) {
    if (br_links.count("n" + std::to_string(i))) continue;
    remade.push_back(i);
    root_batch.push_back(add_pair(i));
  }
  if (!remade.empty()) {
    // -force: a node whose namespace still has an eth0 without its peer fails its line alone;
    // it is repaired one by one below.
    (void)netns::IpBatch("", root_batch, true);
    HERD_ASSIGN_OR_RETURN(names, netns::LinkNames(br));
    br_links = std::set<std::string>(names.begin(), names.end());
    for (int i : remade) {
      if (br_links.count("n" + std::to_string(i))) continue;
      const std::string ns = LocalProvider::NodeNetns(r.cluster, i);
      if (LinkExists(ns, "eth0")) HERD_RETURN_IF_ERROR(netns::Ip(ns, {"link", "del", "eth0"}));
      HERD_RETURN_IF_ERROR(netns::IpBatch("", {add_pair(i)}));
    }
  }
  br_batch.clear();
  for (int i = 0; i < r.num_nodes; ++i) {
    br_batch.push_back("link set n" + std::to_string(i) + " master br0 up");
  }
  HERD_RETURN_IF_ERROR(netns::IpBatch(br, br_batch));
  HERD_RETURN_IF_ERROR(ForEachParallel(
      static_cast<size_t>(r.num_nodes),
      [&](size_t i) -> Status {
        return netns::IpBatch(LocalProvider::NodeNetns(r.cluster, static_cast<int>(i)),
                              NodeNetworkCommands(r, static_cast<int>(i), host_routes));
      },
      [&](size_t i) { return LocalProvider::NodeName(r.cluster, static_cast<int>(i)); }));

  // A remade node has a new MAC address; neighbours would keep sending to the old one until
  // their ARP entry expires (30 s and more), so forget it everywhere it may be known.
  if (!remade.empty()) {
    std::vector<std::string> flush;
    for (int i : remade) flush.push_back("neigh flush to " + NodeIp(r.subnet, i));
    (void)netns::IpBatch("", flush, true);
    for (int j = 0; j < r.num_nodes; ++j) {
      if (existed[j]) (void)netns::IpBatch(LocalProvider::NodeNetns(r.cluster, j), flush, true);
    }
  }
  return Status::Ok();
}

std::string HostsFile(const Record& r) {
  std::string text = "# Written by herd's local provider: every node of cluster " + r.cluster +
                     ".\n"
                     "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n";
  for (int i = 0; i < r.num_nodes; ++i) {
    text += NodeIp(r.subnet, i) + "\t" + LocalProvider::NodeName(r.cluster, i) + "\n";
  }
  return text;
}

std::string SshdConfig(const std::string& node) {
  std::string m = kNodeMount;
  return "# Written by herd's local provider for node " + node +
         "; rewritten on every provision.\n"
         "Port 22\n"
         "HostKey " +
         m +
         "/ssh_host_ed25519_key\n"
         "AuthorizedKeysFile " +
         m +
         "/authorized_keys\n"
         "PermitRootLogin prohibit-password\n"
         "PubkeyAuthentication yes\n"
         "PasswordAuthentication no\n"
         "KbdInteractiveAuthentication no\n"
         "UsePAM no\n"
         // OpenSSH 9's default key exchange (sntrup761x25519) costs many times the CPU of
         // curve25519 per new connection; these nodes are namespaces of this machine, so the
         // classic exchange loses nothing.
         "KexAlgorithms curve25519-sha256,curve25519-sha256@libssh.org\n"
         // AES-GCM runs on AES-NI; clients prefer chacha20-poly1305, which costs more CPU per
         // byte here, where both ends of every transfer (the agent upload) share the machine.
         "Ciphers aes128-gcm@openssh.com,aes256-gcm@openssh.com\n"
         // Written by sshd once its listening socket is bound: the provider waits for this file
         // instead of connecting (a banner probe is a connection: sshd forks and re-executes
         // itself for it).
         "PidFile " +
         m + "/" + kSshdListeningFile +
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

// What makes a process the node's sshd: the node's network namespace, a UTS and mount namespace
// of its own (hostname; /run, /etc/hosts and /root from the node's directory), then sshd. Done
// with system calls in the new process before the exec (SpawnDetached's before_exec), not as
// `nsenter | unshare | sh -c 'hostname; umount; mount...'`: that would be ten program starts per
// node on the path of every cold launch.
struct NodeSshd {
  std::string netns_path, hostname, dir, mount_point, hosts, home;
  std::vector<std::string> argv;

  NodeSshd(const std::string& ns, const std::string& node, const std::string& node_dir)
      : netns_path(netns::Path(ns)),
        hostname(node),
        dir(node_dir),
        mount_point(kNodeMount),
        hosts(mount_point + "/hosts"),
        home(mount_point + "/home"),
        argv({kSshd, "-D", "-f", mount_point + "/sshd_config", "-E", mount_point + "/sshd.log"}) {}

  // In the new process: async-signal-safe calls only. An errno, 0 when done.
  int Enter() const {
    int fd = ::open(netns_path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return errno;
    if (::setns(fd, CLONE_NEWNET) != 0) return errno;
    ::close(fd);
    if (::unshare(CLONE_NEWUTS | CLONE_NEWNS) != 0) return errno;
    if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) return errno;
    if (::sethostname(hostname.data(), hostname.size()) != 0) return errno;
    // The copy of /run/netns in this mount namespace would keep every cluster's namespaces alive
    // after `ip netns delete`: drop it (there may be none).
    (void)::umount2("/run/netns", MNT_DETACH);
    if (::mount("herd-run", "/run", "tmpfs", 0, "mode=755") != 0) return errno;
    for (const char* d : {"/run/sshd", mount_point.c_str()}) {
      if (::mkdir(d, 0755) != 0 && errno != EEXIST) return errno;
    }
    if (::mount(dir.c_str(), mount_point.c_str(), nullptr, MS_BIND, nullptr) != 0) return errno;
    if (::mount(hosts.c_str(), "/etc/hosts", nullptr, MS_BIND, nullptr) != 0) return errno;
    if (::mount(home.c_str(), "/root", nullptr, MS_BIND, nullptr) != 0) return errno;
    return 0;
  }
};

bool SameNetns(pid_t pid, const std::string& ns) {
  struct stat a {
  }, b{};
  return ::stat(("/proc/" + std::to_string(pid) + "/ns/net").c_str(), &a) == 0 &&
         ::stat(netns::Path(ns).c_str(), &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

// The node's listening sshd. Per-session sshd processes run the same binary but retitle
// themselves "sshd: root@notty"; the listener shows "sshd: /usr/sbin/sshd -D ... [listener] ..."
// (OpenSSH >= 8.x) or its original argv.
bool IsNodeSshd(pid_t pid, const std::string& ns) {
  if (!netns::IsAlive(pid) || !SameNetns(pid, ns)) return false;
  std::error_code ec;
  if (fs::read_symlink("/proc/" + std::to_string(pid) + "/exe", ec).string() != kSshd) return false;
  std::string cmdline = ReadProc(pid, "cmdline");
  return cmdline.starts_with(std::string(kSshd) + '\0') ||
         cmdline.find("[listener]") != std::string::npos;
}

struct NodeSpec {
  int index;
  std::string name, ns, dir, ip;
};

NodeSpec Spec(const Record& r, const std::string& state_dir, int i) {
  std::string name = LocalProvider::NodeName(r.cluster, i);
  return {i, name, LocalProvider::NodeNetns(r.cluster, i), NodeDir(state_dir, name),
          NodeIp(r.subnet, i)};
}

// The cgroups the node's agent made (it records their directory, kCgroupScopeFile): removed once
// no process of the node is left, as the namespace is. Only empty cgroups can be removed, so a
// stray path could not take anything else with it; one outside /sys/fs/cgroup is not touched.
void RemoveAgentCgroups(const std::string& node_dir) {
  auto text = ReadFile(node_dir + "/home/" + kDefaultAgentDir + "/state/" + kCgroupScopeFile);
  if (!text.ok()) return;  // no agent started there, or a machine without cgroups
  std::string scope = text->substr(0, text->find('\n'));
  if (!scope.starts_with("/sys/fs/cgroup/") || scope.find("/..") != std::string::npos) return;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(scope, ec)) {
    if (entry.is_directory(ec)) ::rmdir(entry.path().c_str());  // a job's cgroup
  }
  if (::rmdir(scope.c_str()) != 0 && errno != ENOENT) {
    HERD_LOG(kWarn) << "cannot remove the cgroup " << scope << ": " << std::strerror(errno);
  }
}

// Files of one node: those of both modes (EnsureNodeFiles), /etc/hosts and sshd_config.
Status EnsureNetnsNodeFiles(const Record& r, const NodeSpec& n, const std::string* public_key) {
  HERD_RETURN_IF_ERROR(EnsureNodeFiles(n.dir, n.name, public_key));
  // Written in place (not renamed) when it changes: a running node has it bind-mounted.
  std::string hosts = HostsFile(r);
  auto old = ReadIfAny(n.dir + "/hosts");
  if (!old || *old != hosts) {
    std::ofstream out(n.dir + "/hosts", std::ios::trunc);
    out << hosts;
    if (!out) return IoError("write " + n.dir + "/hosts");
  }
  return WriteIfChanged(n.dir + "/sshd_config", SshdConfig(n.name), 0600);
}

// Starts the node's sshd unless it runs, and waits until it listens.
Status EnsureSshd(const NodeSpec& n) {
  std::string pidfile = n.dir + "/sshd.pid";
  if (auto text = ReadIfAny(pidfile)) {
    pid_t pid = static_cast<pid_t>(std::atol(text->c_str()));
    if (IsNodeSshd(pid, n.ns)) return Status::Ok();
  }
  // A listener whose pid file was lost would hold port 22: stop it (sessions stay).
  std::vector<pid_t> stray;
  for (pid_t p : netns::ProcessesIn(n.ns)) {
    if (IsNodeSshd(p, n.ns)) stray.push_back(p);
  }
  for (pid_t p : stray) ::kill(p, SIGKILL);
  for (auto until = Clock::now() + limits::kKillSweepTimeout;
       Clock::now() < until &&
       std::any_of(stray.begin(), stray.end(), [](pid_t p) { return netns::IsAlive(p); });) {
    std::this_thread::sleep_for(limits::kKillSweepInterval);
  }
  const NodeSshd sshd(n.ns, n.name, n.dir);
  const std::string listening = n.dir + "/" + kSshdListeningFile;
  std::error_code ec;
  fs::remove(listening, ec);  // one left by an earlier sshd must not pass for this one's
  HERD_ASSIGN_OR_RETURN(pid_t pid, SpawnDetached(sshd.argv, n.dir + "/sshd.out", {},
                                                 [&sshd] { return sshd.Enter(); }));
  HERD_RETURN_IF_ERROR(WriteFileAtomic(pidfile, std::to_string(pid) + "\n", 0600));

  // sshd writes its PidFile after its listening socket is bound (sshd.c: "Write out the pid file
  // after the sigterm handler is setup and the listen sockets are bound"): once the file holds
  // this pid, a connection is accepted.
  const std::string want = std::to_string(pid) + "\n";
  auto deadline = Clock::now() + limits::kLocalNodeStartTimeout;
  while (Clock::now() < deadline) {
    if (auto text = ReadIfAny(listening); text && *text == want) return Status::Ok();
    if (!netns::IsAlive(pid)) {
      return Unavailable(n.name + " (" + n.ip + "): sshd exited at start; " + n.dir +
                         "/sshd.out: " + Tail(n.dir + "/sshd.out", 1000) +
                         "; sshd.log: " + Tail(n.dir + "/sshd.log", 1000));
    }
    std::this_thread::sleep_for(limits::kLocalSshdListenPoll);
  }
  return DeadlineExceeded(n.name + " (" + n.ip + "): sshd did not start listening within " +
                          std::to_string(std::chrono::duration_cast<std::chrono::seconds>(
                                             limits::kLocalNodeStartTimeout)
                                             .count()) +
                          " s (no " + listening +
                          "); sshd.log: " + Tail(n.dir + "/sshd.log", 1000));
}

std::vector<NodeHandle> Handles(const Record& r, const std::string& state_dir) {
  std::vector<NodeHandle> out;
  for (int i = 0; i < r.num_nodes; ++i) {
    NodeSpec n = Spec(r, state_dir, i);
    out.push_back({n.name, n.ip, 22, "root", n.ns, n.dir + "/home"});
  }
  return out;
}

Result<std::vector<NodeHandle>> BringUp(const Record& r, const std::string& state_dir,
                                        const std::string* public_key, const LocalConfig& config) {
  {
    HostLock lock;
    HERD_RETURN_IF_ERROR(lock.Acquire());
    HERD_RETURN_IF_ERROR(EnsureNetwork(r, config.host_routes)
                             .WithContext("local cluster " + r.cluster + " network"));
  }
  HERD_RETURN_IF_ERROR(MakeDir(state_dir + "/nodes", 0700));
  HERD_RETURN_IF_ERROR(ForEachParallel(
      static_cast<size_t>(r.num_nodes),
      [&](size_t i) -> Status {
        NodeSpec n = Spec(r, state_dir, static_cast<int>(i));
        HERD_RETURN_IF_ERROR(EnsureNetnsNodeFiles(r, n, public_key));
        return EnsureSshd(n);
      },
      [&](size_t i) { return LocalProvider::NodeName(r.cluster, static_cast<int>(i)); }));
  return Handles(r, state_dir);
}

Result<Record> LoadExisting(const std::string& cluster, const std::string& state_dir) {
  HERD_ASSIGN_OR_RETURN(std::optional<Record> r, ReadRecord(state_dir));
  if (!r)
    return NotFound("local cluster " + cluster + " has no nodes (no record in " + state_dir + ")");
  if (r->cluster != cluster) {
    return FailedPrecondition(state_dir + " records local cluster " + r->cluster + ", not " +
                              cluster);
  }
  return *r;
}

// Clusters of a normal user run in user mode (UserNodes); so does one that recorded it.
bool UserMode(const std::string& state_dir) {
  return ::geteuid() != 0 || UserNodes::HasRecord(state_dir);
}

// A namespace cluster cannot be managed without root.
Status RefuseNamespaceCluster(const std::string& cluster, const std::string& state_dir) {
  if (::geteuid() != 0 && ::access((state_dir + "/" + kRecordFile).c_str(), F_OK) == 0) {
    return FailedPrecondition("local cluster " + cluster +
                              " was made by root with network namespaces; manage it as root");
  }
  return Status::Ok();
}

}  // namespace

Result<LocalConfig> LoadLocalConfig(const std::string& file) {
  LocalConfig c;
  HERD_ASSIGN_OR_RETURN(YAML::Node root, LoadHerdConfigYaml(file));
  auto where = [&](const YAML::Node& n, const std::string& path) {
    return file + ":" + std::to_string(n.Mark().line + 1) + ":" +
           std::to_string(n.Mark().column + 1) + ": " + path;
  };
  if (!root || root.IsNull()) return c;
  if (!root.IsMap()) return InvalidArgument(where(root, "") + "expected a mapping");
  YAML::Node local = root["local"];
  if (!local || local.IsNull()) return c;
  if (!local.IsMap()) return InvalidArgument(where(local, "local") + ": expected a mapping");
  for (const auto& kv : local) {
    const std::string key = kv.first.as<std::string>();
    if (key != "host_routes") {
      return InvalidArgument(where(kv.first, "local." + key) +
                             ": unknown field (known: host_routes)");
    }
    const YAML::Node& v = kv.second;
    if (v.IsNull()) continue;
    if (!v.IsSequence()) {
      return InvalidArgument(where(v, "local.host_routes") + ": expected a list of IPv4 prefixes");
    }
    for (std::size_t i = 0; i < v.size(); ++i) {
      const YAML::Node& item = v[i];
      const std::string path = "local.host_routes[" + std::to_string(i) + "]";
      const std::string text = item.IsScalar() ? item.Scalar() : std::string();
      const auto slash = text.find('/');
      const bool len_ok = slash == std::string::npos ||
                          (text.size() - slash - 1 >= 1 && text.size() - slash - 1 <= 2 &&
                           std::all_of(text.begin() + static_cast<std::ptrdiff_t>(slash) + 1,
                                       text.end(), ::isdigit));
      auto parsed = len_ok ? ParsePrefix(text) : std::nullopt;
      if (!parsed) {
        return InvalidArgument(where(item, path) +
                               ": expected an IPv4 address or prefix (a.b.c.d or a.b.c.d/len)");
      }
      const auto [addr, len] = *parsed;
      const uint32_t mask = len == 0 ? 0 : ~((len == 32 ? 0u : (1u << (32 - len)) - 1));
      const uint32_t net = addr & mask;
      const uint32_t clusters = (10u << 24) | (213u << 16);                // 10.213.0.0/16
      const bool in_free_24 = len >= 24 && (net >> 8) == (clusters >> 8);  // inside 10.213.0.0/24
      if (Overlaps(net, len, 127u << 24, 8)) {
        return InvalidArgument(
            where(item, path) + ": " + text +
            " is or covers loopback (127.0.0.0/8), which every node has of its own");
      }
      if (Overlaps(net, len, clusters, 16) && !in_free_24) {
        return InvalidArgument(
            where(item, path) + ": " + text +
            " overlaps the local clusters' subnets (10.213.1.0 to "
            "10.213.255.255); 10.213.0.0/24 is free for this machine's services");
      }
      c.host_routes.push_back(std::to_string(net >> 24) + "." + std::to_string((net >> 16) & 255) +
                              "." + std::to_string((net >> 8) & 255) + "." +
                              std::to_string(net & 255) + "/" + std::to_string(len));
    }
  }
  return c;
}

Result<LocalConfig> LocalProvider::Config() const {
  return LoadLocalConfig(config_file_.empty() ? DefaultHerdConfigFile() : config_file_);
}

std::string LocalProvider::NodeName(const std::string& cluster, int index) {
  return index == 0 ? cluster + "-head" : cluster + "-worker" + std::to_string(index);
}

std::string LocalProvider::NodeNetns(const std::string& cluster, int index) {
  return "herd-" + cluster + "-" + std::to_string(index);
}

std::string LocalProvider::BridgeNetns(const std::string& cluster) {
  return "herd-" + cluster + "-br";
}

std::vector<std::string> LocalProvider::ExistingNamespaces(const std::string& cluster) {
  std::string prefix = "herd-" + cluster + "-";
  std::vector<std::string> out;
  for (auto& n : netns::ListWithPrefix(prefix)) {
    std::string rest = n.substr(prefix.size());
    // "herd-a-1" is node 1 of cluster a; "herd-a-1-0" belongs to cluster a-1.
    bool ours = rest == "br" || (!rest.empty() && std::all_of(rest.begin(), rest.end(), ::isdigit));
    if (ours) out.push_back(n);
  }
  return out;
}

Result<std::vector<NodeHandle>> LocalProvider::Provision(const ProvisionRequest& req) {
  HERD_RETURN_IF_ERROR(ValidateCluster(req.cluster));
  if (req.num_nodes < 1 || req.num_nodes > limits::kLocalMaxNodes) {
    return InvalidArgument("num_nodes must be 1.." + std::to_string(limits::kLocalMaxNodes) +
                           " for the local provider, not " + std::to_string(req.num_nodes));
  }
  if (req.ssh_public_key.find("ssh-") == std::string::npos &&
      req.ssh_public_key.find("ecdsa-") == std::string::npos) {
    return InvalidArgument("ssh_public_key does not look like an OpenSSH public key");
  }
  if (req.state_dir.empty()) return InvalidArgument("state_dir is empty");
  if (UserMode(req.state_dir)) {
    HERD_RETURN_IF_ERROR(RefuseNamespaceCluster(req.cluster, req.state_dir));
    return UserNodes::Provision(req);
  }
  HERD_RETURN_IF_ERROR(CheckTools());
  HERD_ASSIGN_OR_RETURN(LocalConfig config, Config());
  HERD_RETURN_IF_ERROR(MakeDir(req.state_dir, 0700));

  Record record;
  {
    HostLock lock;
    HERD_RETURN_IF_ERROR(lock.Acquire());
    HERD_ASSIGN_OR_RETURN(std::optional<Record> existing, ReadRecord(req.state_dir));
    if (existing) {
      if (existing->cluster != req.cluster) {
        return FailedPrecondition(req.state_dir + " records local cluster " + existing->cluster +
                                  ", not " + req.cluster);
      }
      if (existing->num_nodes != req.num_nodes) {
        return FailedPrecondition("local cluster " + req.cluster + " has " +
                                  std::to_string(existing->num_nodes) + " node(s), not " +
                                  std::to_string(req.num_nodes) + "; tear it down first");
      }
      record = *existing;
    } else {
      record.cluster = req.cluster;
      record.num_nodes = req.num_nodes;
      HERD_ASSIGN_OR_RETURN(record.subnet, ChooseSubnet(req.cluster, req.state_dir));
      // Recorded before anything is made, so that Teardown after a crash knows the subnet.
      HERD_RETURN_IF_ERROR(WriteRecord(req.state_dir, record));
      HERD_LOG(kInfo) << "local cluster " << req.cluster << ": subnet 10.213." << record.subnet
                      << ".0/24, " << record.num_nodes << " node(s)";
    }
  }
  return BringUp(record, req.state_dir, &req.ssh_public_key, config);
}

Result<std::vector<NodeHandle>> LocalProvider::Start(const std::string& cluster,
                                                     const std::string& state_dir) {
  HERD_RETURN_IF_ERROR(ValidateCluster(cluster));
  if (UserMode(state_dir)) {
    HERD_RETURN_IF_ERROR(RefuseNamespaceCluster(cluster, state_dir));
    return UserNodes::Start(cluster, state_dir);
  }
  HERD_RETURN_IF_ERROR(CheckTools());
  HERD_ASSIGN_OR_RETURN(LocalConfig config, Config());
  HERD_ASSIGN_OR_RETURN(Record record, LoadExisting(cluster, state_dir));
  return BringUp(record, state_dir, nullptr, config);
}

Status LocalProvider::Stop(const std::string& cluster, const std::string& state_dir) {
  HERD_RETURN_IF_ERROR(ValidateCluster(cluster));
  if (UserMode(state_dir)) {
    HERD_RETURN_IF_ERROR(RefuseNamespaceCluster(cluster, state_dir));
    return UserNodes::Stop(cluster, state_dir);
  }
  HERD_ASSIGN_OR_RETURN(Record record, LoadExisting(cluster, state_dir));
  return ForEachParallel(
      static_cast<size_t>(record.num_nodes),
      [&](size_t i) -> Status {
        NodeSpec n = Spec(record, state_dir, static_cast<int>(i));
        HERD_RETURN_IF_ERROR(
            netns::KillAll(n.ns, limits::kKillGracePeriod, limits::kKillSweepTimeout));
        RemoveAgentCgroups(n.dir);
        std::error_code ec;
        fs::remove(n.dir + "/sshd.pid", ec);
        return Status::Ok();
      },
      [&](size_t i) { return NodeName(cluster, static_cast<int>(i)); });
}

Result<MachinesView> LocalProvider::Machines(const std::string& cluster,
                                             const std::string& state_dir) {
  HERD_RETURN_IF_ERROR(ValidateCluster(cluster));
  if (UserMode(state_dir)) return MachinesView{};
  HERD_ASSIGN_OR_RETURN(std::optional<Record> record, ReadRecord(state_dir));
  if (!record) return MachinesView{MachinesState::kGone, "no nodes"};
  int running = 0, stopped = 0, gone = 0;
  MachinesView v;
  for (int i = 0; i < record->num_nodes; ++i) {
    const std::string ns = NodeNetns(cluster, i);
    std::string word;
    if (!netns::Exists(ns)) {
      ++gone;
      word = "gone";
    } else if (netns::ProcessesIn(ns).empty()) {
      ++stopped;
      word = "stopped";
    } else {
      ++running;
      word = "running";
    }
    v.detail += (v.detail.empty() ? "" : ", ") + NodeName(cluster, i) + " " + word;
  }
  const int n = record->num_nodes;
  v.state = running == n   ? MachinesState::kRunning
            : stopped == n ? MachinesState::kStopped
            : gone == n    ? MachinesState::kGone
                           : MachinesState::kMixed;
  return v;
}

Status LocalProvider::Teardown(const std::string& cluster, const std::string& state_dir) {
  HERD_RETURN_IF_ERROR(ValidateCluster(cluster));
  // As a normal user always: it also finds nodes whose record was lost.
  if (UserMode(state_dir)) HERD_RETURN_IF_ERROR(UserNodes::Teardown(cluster, state_dir));
  auto record = ReadRecord(state_dir);
  std::vector<std::string> namespaces = ExistingNamespaces(cluster);
  if (::geteuid() != 0) {
    if (namespaces.empty() && record.ok() && !record->has_value()) return Status::Ok();
    return NeedRoot();
  }
  {
    HostLock lock;
    HERD_RETURN_IF_ERROR(lock.Acquire());
    namespaces = ExistingNamespaces(cluster);
    HERD_RETURN_IF_ERROR(ForEachParallel(
        namespaces.size(),
        [&](size_t i) {
          return netns::KillAll(namespaces[i], limits::kKillGracePeriod, limits::kKillSweepTimeout);
        },
        [&](size_t i) { return namespaces[i]; }));
    std::error_code ec;
    for (const auto& node : fs::directory_iterator(state_dir + "/nodes", ec)) {
      RemoveAgentCgroups(node.path().string());
    }
    // The root namespace's end of the uplink, found by its peer (works without a record, too).
    // Deleting it now matters: a namespace is destroyed asynchronously, and its links with it.
    const std::string br = BridgeNetns(cluster);
    if (netns::Exists(br)) {
      auto links = netns::IpOutput("", {"-o", "link", "show", "type", "veth"});
      if (links.ok()) {
        std::istringstream lines(*links);
        std::string line;
        while (std::getline(lines, line)) {
          if (line.find(" link-netns " + br + " ") == std::string::npos &&
              !line.ends_with(" link-netns " + br)) {
            continue;
          }
          std::istringstream tok(line);
          std::string idx, dev;
          tok >> idx >> dev;  // "7: herdl17@if2:"
          dev = dev.substr(0, dev.find_first_of("@:"));
          HERD_RETURN_IF_ERROR(netns::Ip("", {"link", "del", dev}));
        }
      }
    }
    if (record.ok() && record->has_value() && LinkExists("", HostVeth((*record)->subnet))) {
      HERD_RETURN_IF_ERROR(netns::Ip("", {"link", "del", HostVeth((*record)->subnet)}));
    }
    for (const auto& ns : namespaces) HERD_RETURN_IF_ERROR(netns::Delete(ns));
  }
  std::error_code ec;
  fs::remove_all(state_dir + "/nodes", ec);
  if (ec) return IoError("remove " + state_dir + "/nodes: " + ec.message());
  fs::remove(state_dir + "/" + kRecordFile, ec);
  fs::remove(state_dir + "/" + kRecordFile + ".tmp", ec);
  fs::remove(state_dir, ec);  // only when nothing else (the controller's own files) is left
  auto left = ExistingNamespaces(cluster);
  if (!left.empty()) {
    return Internal("network namespaces left after teardown of " + cluster + ": " + left.front());
  }
  return Status::Ok();
}

}  // namespace herd::controller
