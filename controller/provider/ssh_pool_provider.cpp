#include "controller/provider/ssh_pool_provider.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <pwd.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <thread>

#include <yaml-cpp/yaml.h>

#include "controller/provider/local_provider.hpp"
#include "controller/ssh/subprocess.hpp"
#include "shared/common/file_util.hpp"
#include "shared/common/limits.hpp"
#include "shared/common/log.hpp"

namespace herd::controller {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr const char* kRecordFile = "ssh_pool.state";
constexpr const char* kPoolFields = "user, identity_file, hosts";
constexpr const char* kHostFields = "ip, user, identity_file, port";
constexpr const char* kNoPasswords =
    "password authentication is not supported; herd only uses SSH keys (set identity_file)";
constexpr const char* kBadHost = "expected an IP, an ssh-config alias or a map with ip";

std::string HomeDir() {
  if (const char* h = std::getenv("HOME"); h != nullptr && *h != '\0') return h;
  if (const passwd* pw = ::getpwuid(::geteuid()); pw != nullptr && pw->pw_dir != nullptr) {
    return pw->pw_dir;
  }
  return "/";
}

// "~" and "~/x" become the home directory; other paths stay as written.
std::string ExpandTilde(const std::string& path) {
  if (path == "~") return HomeDir();
  if (path.starts_with("~/")) return HomeDir() + path.substr(1);
  return path;
}

// ---- Parsing
// -------------------------------------------------------------------------------------

class PoolParser {
 public:
  explicit PoolParser(const std::string& file) : file_(file) {}

  Result<std::vector<SshPool>> Parse(std::string_view text) {
    YAML::Node root;
    try {
      root = YAML::Load(std::string(text));
    } catch (const YAML::Exception& e) {
      return InvalidArgument(Loc(e.mark) + ": " + e.msg);
    }
    std::vector<SshPool> pools;
    if (root.IsNull()) return pools;  // an empty file defines no pools
    if (!root.IsMap()) return Error(root, "", "expected a map of pool names to pools");
    std::map<std::string, std::string> seen;  // pool name -> its location
    for (auto it = root.begin(); it != root.end(); ++it) {
      const YAML::Node& key = it->first;
      if (!key.IsScalar() || key.Scalar().empty()) {
        return Error(key, "", "expected a pool name");
      }
      std::string name = key.Scalar();
      if (auto dup = seen.find(name); dup != seen.end()) {
        return Error(key, name, "defined twice (first at " + dup->second + ")");
      }
      seen[name] = Loc(key.Mark());
      HERD_ASSIGN_OR_RETURN(SshPool pool, ParsePool(name, key, it->second));
      pools.push_back(std::move(pool));
    }
    return pools;
  }

 private:
  // "file:line:col" (1-based), or "file" when yaml-cpp has no position (a missing value).
  std::string Loc(const YAML::Mark& m) const {
    if (m.is_null() || m.line < 0) return file_;
    return file_ + ":" + std::to_string(m.line + 1) + ":" + std::to_string(m.column + 1);
  }

  Status Error(const YAML::Node& at, const std::string& field, const std::string& what) const {
    return InvalidArgument(Loc(at.Mark()) + ": " + (field.empty() ? "" : field + ": ") + what);
  }

  // A non-empty scalar, or an error at the value (or at the key when the value is missing).
  Result<std::string> Text(const YAML::Node& key, const YAML::Node& value, const std::string& field,
                           const std::string& expected) const {
    if (!value.IsScalar() || value.Scalar().empty()) {
      return Error(value.Mark().is_null() || value.IsNull() ? key : value, field, expected);
    }
    return value.Scalar();
  }

  Result<int> Port(const YAML::Node& key, const YAML::Node& value, const std::string& field) const {
    const std::string expected = "expected a port number 1-65535";
    HERD_ASSIGN_OR_RETURN(std::string s, Text(key, value, field, expected));
    int port = 0;
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), port);
    if (ec != std::errc() || end != s.data() + s.size() || port < 1 || port > 65535) {
      return Error(value, field, expected);
    }
    return port;
  }

  Result<SshPool> ParsePool(const std::string& name, const YAML::Node& key,
                            const YAML::Node& value) const {
    SshPool pool;
    pool.name = name;
    pool.location = Loc(key.Mark());
    if (!value.IsMap())
      return Error(value.IsNull() ? key : value, name, "expected a map with hosts");
    std::optional<YAML::Node> hosts_key, hosts;
    for (auto it = value.begin(); it != value.end(); ++it) {
      const std::string field = it->first.IsScalar() ? it->first.Scalar() : "";
      const std::string path = name + "." + field;
      if (field == "user") {
        HERD_ASSIGN_OR_RETURN(pool.user, Text(it->first, it->second, path, "expected a user name"));
      } else if (field == "identity_file") {
        HERD_ASSIGN_OR_RETURN(
            std::string f, Text(it->first, it->second, path, "expected a path to a private key"));
        pool.identity_file = ExpandTilde(f);
      } else if (field == "password") {
        return Error(it->first, path, kNoPasswords);
      } else if (field == "hosts") {
        hosts_key = it->first;
        hosts = it->second;
      } else {
        return Error(it->first, path, std::string("unknown field (known: ") + kPoolFields + ")");
      }
    }
    if (!hosts) return Error(key, name, "missing hosts");
    const std::string hosts_path = name + ".hosts";
    if (!hosts->IsSequence()) {
      return Error(hosts->IsNull() ? *hosts_key : *hosts, hosts_path, "expected a list of hosts");
    }
    if (hosts->size() == 0) return Error(*hosts, hosts_path, "the list is empty");
    std::map<std::pair<std::string, int>, size_t> seen;  // (address, port as written) -> index
    for (size_t i = 0; i < hosts->size(); ++i) {
      const YAML::Node entry = (*hosts)[i];
      const std::string path = hosts_path + "[" + std::to_string(i) + "]";
      HERD_ASSIGN_OR_RETURN(SshPoolHost host, ParseHost(entry, *hosts_key, path));
      auto [dup, fresh] = seen.emplace(std::make_pair(host.address, host.port), i);
      if (!fresh) {
        return Error(entry, path,
                     host.address + " is listed twice (first as hosts[" +
                         std::to_string(dup->second) + "])");
      }
      pool.hosts.push_back(std::move(host));
    }
    return pool;
  }

  // An address ssh can take: letters, digits and . - _ : % (IPv6 and its zone), not an option.
  static bool ValidAddress(const std::string& s) {
    return !s.empty() && s.front() != '-' && std::all_of(s.begin(), s.end(), [](char c) {
      return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_' ||
             c == ':' || c == '%';
    });
  }

  Result<SshPoolHost> ParseHost(const YAML::Node& entry, const YAML::Node& hosts_key,
                                const std::string& path) const {
    SshPoolHost host;
    // yaml-cpp places an empty entry ("-" alone) where the next token starts, which can be past
    // the end of the file: point at the list instead; the index says which entry.
    const YAML::Node& at = entry.IsNull() || entry.Mark().is_null() ? hosts_key : entry;
    host.location = Loc(at.Mark());
    if (entry.IsScalar()) {
      if (!ValidAddress(entry.Scalar())) return Error(at, path, kBadHost);
      host.address = entry.Scalar();
      return host;
    }
    if (!entry.IsMap()) return Error(at, path, kBadHost);
    bool has_ip = false;
    for (auto it = entry.begin(); it != entry.end(); ++it) {
      const std::string field = it->first.IsScalar() ? it->first.Scalar() : "";
      const std::string fpath = path + "." + field;
      if (field == "ip") {
        HERD_ASSIGN_OR_RETURN(host.address,
                              Text(it->first, it->second, fpath,
                                   "expected an IP, an ssh-config alias or a host name"));
        if (!ValidAddress(host.address)) {
          return Error(it->second, fpath, "expected an IP, an ssh-config alias or a host name");
        }
        has_ip = true;
      } else if (field == "user") {
        HERD_ASSIGN_OR_RETURN(host.user,
                              Text(it->first, it->second, fpath, "expected a user name"));
      } else if (field == "identity_file") {
        HERD_ASSIGN_OR_RETURN(
            std::string f, Text(it->first, it->second, fpath, "expected a path to a private key"));
        host.identity_file = ExpandTilde(f);
      } else if (field == "port") {
        HERD_ASSIGN_OR_RETURN(host.port, Port(it->first, it->second, fpath));
      } else if (field == "password") {
        return Error(it->first, fpath, kNoPasswords);
      } else {
        return Error(it->first, fpath, std::string("unknown field (known: ") + kHostFields + ")");
      }
    }
    if (!has_ip) return Error(entry, path, "missing ip");
    return host;
  }

  std::string file_;
};

// ---- Resolution
// ----------------------------------------------------------------------------------

bool IsIpLiteral(const std::string& s) {
  unsigned char buf[sizeof(in6_addr)];
  return ::inet_pton(AF_INET, s.c_str(), buf) == 1 || ::inet_pton(AF_INET6, s.c_str(), buf) == 1;
}

// The fields of `ssh -G` output that matter here (keys are lower case in its output).
struct SshG {
  std::string hostname, user;
  int port = 22;
  std::vector<std::string> identity_files;
};

Result<SshG> RunSshG(const std::string& address, const std::string& config,
                     const std::string& what) {
  std::vector<std::string> argv = {"ssh"};
  if (!config.empty()) argv.insert(argv.end(), {"-F", config});
  argv.insert(argv.end(), {"-G", "--", address});
  HERD_ASSIGN_OR_RETURN(ProcResult r, RunProcess(argv, {}, limits::kLocalCommandTimeout));
  if (r.exit_code != 0) {
    std::string err = r.err;
    while (!err.empty() && (err.back() == '\n' || err.back() == '\r')) err.pop_back();
    return InvalidArgument(what + ": `" + JoinArgv(argv) + "` failed: " + err);
  }
  SshG g;
  std::istringstream lines(r.out);
  std::string line;
  while (std::getline(lines, line)) {
    auto sp = line.find(' ');
    if (sp == std::string::npos) continue;
    std::string key = line.substr(0, sp), value = line.substr(sp + 1);
    std::transform(key.begin(), key.end(), key.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    if (key == "hostname") {
      g.hostname = value;
    } else if (key == "user") {
      g.user = value;
    } else if (key == "port") {
      g.port = std::atoi(value.c_str());
    } else if (key == "identityfile") {
      g.identity_files.push_back(value);
    }
  }
  if (g.hostname.empty() || g.port < 1 || g.port > 65535) {
    return Internal(what + ": unexpected output of `" + JoinArgv(argv) + "`: " + r.out);
  }
  return g;
}

// An IPv4 address of `name` if it has one, else an IPv6 one.
Result<std::string> ResolveName(const std::string& name, const std::string& what) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  int rc = ::getaddrinfo(name.c_str(), nullptr, &hints, &res);
  if (rc != 0) {
    return Unavailable(what + ": host name " + name + " does not resolve: " + ::gai_strerror(rc));
  }
  std::string v4, v6;
  for (addrinfo* a = res; a != nullptr; a = a->ai_next) {
    char buf[INET6_ADDRSTRLEN] = {};
    if (a->ai_family == AF_INET && v4.empty()) {
      ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(a->ai_addr)->sin_addr, buf, sizeof buf);
      v4 = buf;
    } else if (a->ai_family == AF_INET6 && v6.empty()) {
      ::inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(a->ai_addr)->sin6_addr, buf,
                  sizeof buf);
      v6 = buf;
    }
  }
  ::freeaddrinfo(res);
  if (!v4.empty()) return v4;
  if (!v6.empty()) return v6;
  return Unavailable(what + ": host name " + name + " has no IP address");
}

// ---- Record
// --------------------------------------------------------------------------------------

struct RecordedNode {
  std::string address;  // the pool entry as written
  NodeHandle handle;
};

struct Record {
  std::string cluster, pool;
  std::vector<RecordedNode> nodes;
};

std::string RecordPath(const std::string& state_dir) { return state_dir + "/" + kRecordFile; }

Result<std::optional<Record>> ReadRecord(const std::string& state_dir) {
  const std::string path = RecordPath(state_dir);
  HERD_ASSIGN_OR_RETURN(std::optional<std::string> file, ReadFileIfExists(path));
  if (!file) return std::optional<Record>();
  const std::string& text = *file;
  const std::string damaged = path + ": damaged ssh pool record; `herd down` forgets it";
  try {
    YAML::Node root = YAML::Load(text);
    Record r;
    r.cluster = root["cluster"].as<std::string>();
    r.pool = root["pool"].as<std::string>();
    for (const auto& n : root["nodes"]) {
      RecordedNode node;
      node.address = n["host"].as<std::string>();
      node.handle.name = n["name"].as<std::string>();
      node.handle.ip = n["ip"].as<std::string>();
      node.handle.ssh_port = n["port"].as<int>();
      node.handle.ssh_user = n["user"].as<std::string>("");
      node.handle.identity_file = n["identity_file"].as<std::string>("");
      r.nodes.push_back(std::move(node));
    }
    if (r.cluster.empty() || r.pool.empty() || r.nodes.empty()) return IoError(damaged);
    return std::optional<Record>(std::move(r));
  } catch (const YAML::Exception& e) {
    return IoError(damaged + " (" + e.what() + ")");
  }
}

Status WriteFileAtomic(const std::string& path, const std::string& content) {
  return herd::WriteFileAtomic(path, content, 0600);
}

Status WriteRecord(const std::string& state_dir, const Record& r) {
  YAML::Emitter out;
  out << YAML::Comment("herd ssh provider: the hosts of pool " + r.pool + " that cluster " +
                       r.cluster + " uses; the machines are not herd's");
  out << YAML::BeginMap << YAML::Key << "cluster" << YAML::Value << r.cluster << YAML::Key << "pool"
      << YAML::Value << r.pool << YAML::Key << "nodes" << YAML::Value << YAML::BeginSeq;
  for (const auto& n : r.nodes) {
    out << YAML::BeginMap << YAML::Key << "name" << YAML::Value << n.handle.name << YAML::Key
        << "host" << YAML::Value << n.address << YAML::Key << "ip" << YAML::Value << n.handle.ip
        << YAML::Key << "port" << YAML::Value << n.handle.ssh_port << YAML::Key << "user"
        << YAML::Value << n.handle.ssh_user << YAML::Key << "identity_file" << YAML::Value
        << n.handle.identity_file << YAML::EndMap;
  }
  out << YAML::EndSeq << YAML::EndMap;
  if (!out.good()) return Internal("ssh pool record: " + out.GetLastError());
  return WriteFileAtomic(RecordPath(state_dir), std::string(out.c_str()) + "\n");
}

std::vector<NodeHandle> Handles(const Record& r) {
  std::vector<NodeHandle> out;
  for (const auto& n : r.nodes) out.push_back(n.handle);
  return out;
}

std::string MachineKey(const std::string& ip, int port) { return ip + ":" + std::to_string(port); }

// Hosts of `pool` that clusters beside state_dir (its siblings) use: machine key -> cluster.
Result<std::map<std::string, std::string>> UsedByOthers(const std::string& pool,
                                                        const std::string& state_dir) {
  std::map<std::string, std::string> used;
  fs::path self = fs::path(state_dir).lexically_normal();
  if (!self.has_filename()) self = self.parent_path();
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(self.parent_path(), ec)) {
    if (!e.is_directory(ec) || e.path().lexically_normal() == self) continue;
    if (fs::equivalent(e.path(), self, ec)) continue;
    HERD_ASSIGN_OR_RETURN(std::optional<Record> other, ReadRecord(e.path().string()));
    if (!other || other->pool != pool) continue;
    for (const auto& n : other->nodes) {
      used.emplace(MachineKey(n.handle.ip, n.handle.ssh_port), other->cluster);
    }
  }
  return used;
}

// An exclusive flock on the pools file while hosts are picked and recorded, so two launches on
// one pool cannot take the same host.
class PoolLock {
 public:
  PoolLock() = default;
  PoolLock(const PoolLock&) = delete;
  PoolLock& operator=(const PoolLock&) = delete;
  ~PoolLock() {
    if (fd_ >= 0) ::close(fd_);  // releases the lock
  }
  Status Acquire(const std::string& path) {
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ < 0) return ErrnoError("open " + path, errno);
    auto deadline = Clock::now() + limits::kLocalCommandTimeout;
    while (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
      if (errno != EWOULDBLOCK && errno != EINTR) return ErrnoError("flock " + path, errno);
      if (Clock::now() >= deadline)
        return Unavailable("another herd command holds a lock on " + path);
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return Status::Ok();
  }

 private:
  int fd_ = -1;
};

Result<Record> LoadRecord(const std::string& cluster, const std::string& pool,
                          const std::string& state_dir) {
  HERD_ASSIGN_OR_RETURN(std::optional<Record> r, ReadRecord(state_dir));
  if (!r)
    return NotFound("ssh cluster " + cluster + " has no hosts (no record in " + state_dir + ")");
  if (r->cluster != cluster || r->pool != pool) {
    return FailedPrecondition(state_dir + " records cluster " + r->cluster + " on pool " + r->pool +
                              ", not " + cluster + " on pool " + pool);
  }
  return *r;
}

std::string Join(const std::set<std::string>& items) {
  std::string out;
  for (const auto& s : items) out += (out.empty() ? "" : ", ") + s;
  return out;
}

}  // namespace

std::string DefaultSshNodePoolsFile() {
  if (const char* h = std::getenv("HERD_HOME"); h != nullptr && *h != '\0') {
    std::error_code ec;  // made absolute like the rest of herd's HERD_HOME paths
    fs::path dir = fs::absolute(h, ec);
    return (ec ? fs::path(h) : dir).lexically_normal().string() + "/ssh_node_pools.yaml";
  }
  return HomeDir() + "/.herd/ssh_node_pools.yaml";
}

Result<std::vector<SshPool>> ParseSshNodePools(std::string_view text, const std::string& file) {
  try {
    return PoolParser(file).Parse(text);
  } catch (const YAML::Exception& e) {
    return InvalidArgument(file + ": " + e.what());
  }
}

Result<SshPool> LoadSshNodePool(const std::string& file, const std::string& pool) {
  auto text = ReadFile(file);
  if (!text.ok() && text.status().code() == Code::kNotFound) {
    return NotFound("no ssh node pools file at " + file +
                    " (write the pools there; HERD_HOME sets its directory)");
  }
  if (!text.ok()) return text.status();
  HERD_ASSIGN_OR_RETURN(std::vector<SshPool> pools, ParseSshNodePools(*text, file));
  std::string names;
  for (auto& p : pools) {
    if (p.name == pool) return std::move(p);
    names += (names.empty() ? "" : ", ") + p.name;
  }
  if (names.empty()) return NotFound("no pool " + pool + " in " + file + ": it defines no pools");
  return NotFound("no pool " + pool + " in " + file + "; its pools: " + names);
}

Result<ResolvedSshHost> ResolveSshPoolHost(const SshPool& pool, size_t index,
                                           const std::string& ssh_config_file) {
  if (index >= pool.hosts.size()) {
    return Internal("pool " + pool.name + " has no host " + std::to_string(index));
  }
  const SshPoolHost& h = pool.hosts[index];
  const std::string what =
      h.location + ": " + pool.name + ".hosts[" + std::to_string(index) + "] (" + h.address + ")";
  HERD_ASSIGN_OR_RETURN(SshG g, RunSshG(h.address, ssh_config_file, what));
  // What ssh would use with no config at all: a field that differs is one the config sets.
  HERD_ASSIGN_OR_RETURN(SshG d, RunSshG(h.address, "/dev/null", what));
  const bool alias = !IsIpLiteral(h.address);
  const bool config_user = g.user != d.user;
  const bool config_key = g.identity_files != d.identity_files && !g.identity_files.empty();

  ResolvedSshHost r;
  r.port = h.port != 0 ? h.port : g.port;
  if (!h.user.empty()) {
    r.user = h.user;
  } else if (alias && config_user) {
    r.user = g.user;
  } else if (!pool.user.empty()) {
    r.user = pool.user;
  } else {
    r.user = g.user;
  }
  if (!h.identity_file.empty()) {
    r.identity_file = h.identity_file;
  } else if (alias && config_key) {
    r.identity_file = ExpandTilde(g.identity_files.front());
  } else if (!pool.identity_file.empty()) {
    r.identity_file = pool.identity_file;
  } else if (config_key) {
    r.identity_file = ExpandTilde(g.identity_files.front());
  }
  if (IsIpLiteral(g.hostname)) {
    r.ip = g.hostname;
  } else {
    HERD_ASSIGN_OR_RETURN(r.ip, ResolveName(g.hostname, what));
  }
  return r;
}

SshPoolProvider::SshPoolProvider(std::string pool, std::string pools_file,
                                 std::string ssh_config_file)
    : pool_(std::move(pool)),
      pools_file_(std::move(pools_file)),
      ssh_config_file_(std::move(ssh_config_file)) {}

Result<std::vector<NodeHandle>> SshPoolProvider::Provision(const ProvisionRequest& req) {
  if (req.cluster.empty() || req.cluster.find('/') != std::string::npos) {
    return InvalidArgument("cluster name \"" + req.cluster + "\" is not valid");
  }
  if (req.num_nodes < 1) {
    return InvalidArgument("num_nodes must be at least 1, not " + std::to_string(req.num_nodes));
  }
  if (req.state_dir.empty()) return InvalidArgument("state_dir is empty");

  // A cluster that has its hosts keeps them, even if the pools file changed since.
  HERD_ASSIGN_OR_RETURN(std::optional<Record> existing, ReadRecord(req.state_dir));
  auto check_existing = [&](const Record& r) -> Result<std::vector<NodeHandle>> {
    if (r.cluster != req.cluster || r.pool != pool_) {
      return FailedPrecondition(req.state_dir + " records cluster " + r.cluster + " on pool " +
                                r.pool + ", not " + req.cluster + " on pool " + pool_);
    }
    if (static_cast<int>(r.nodes.size()) != req.num_nodes) {
      return FailedPrecondition("cluster " + req.cluster + " uses " +
                                std::to_string(r.nodes.size()) + " host(s) of pool " + pool_ +
                                ", not " + std::to_string(req.num_nodes) + "; tear it down first");
    }
    return Handles(r);
  };
  if (existing) return check_existing(*existing);

  HERD_ASSIGN_OR_RETURN(SshPool pool, LoadSshNodePool(pools_file_, pool_));
  if (static_cast<int>(pool.hosts.size()) < req.num_nodes) {
    return FailedPrecondition("pool " + pool_ + " has " + std::to_string(pool.hosts.size()) +
                              " host(s); the task needs " + std::to_string(req.num_nodes));
  }
  std::error_code ec;
  fs::create_directories(req.state_dir, ec);
  if (ec) return IoError("mkdir " + req.state_dir + ": " + ec.message());

  PoolLock lock;
  HERD_RETURN_IF_ERROR(lock.Acquire(pools_file_));
  // Again under the lock: a concurrent Provision of this same cluster may have won.
  HERD_ASSIGN_OR_RETURN(existing, ReadRecord(req.state_dir));
  if (existing) return check_existing(*existing);
  HERD_ASSIGN_OR_RETURN(auto used, UsedByOthers(pool_, req.state_dir));

  Record record{req.cluster, pool_, {}};
  std::map<std::string, size_t> chosen;  // machine key -> pool index
  std::set<std::string> blocking;        // clusters that hold hosts we skipped
  size_t skipped = 0;
  for (size_t i = 0; i < pool.hosts.size() && record.nodes.size() < size_t(req.num_nodes); ++i) {
    HERD_ASSIGN_OR_RETURN(ResolvedSshHost host, ResolveSshPoolHost(pool, i, ssh_config_file_));
    const std::string key = MachineKey(host.ip, host.port);
    if (auto u = used.find(key); u != used.end()) {
      ++skipped;
      blocking.insert(u->second);
      continue;
    }
    const std::string what = pool.hosts[i].location + ": " + pool_ + ".hosts[" + std::to_string(i) +
                             "] (" + pool.hosts[i].address + ")";
    if (auto c = chosen.find(key); c != chosen.end()) {
      return InvalidArgument(what + " is the same machine (" + key + ") as hosts[" +
                             std::to_string(c->second) + "]");
    }
    if (!host.identity_file.empty() && ::access(host.identity_file.c_str(), R_OK) != 0) {
      return FailedPrecondition(what + ": identity_file " + host.identity_file + ": " +
                                std::strerror(errno));
    }
    chosen[key] = i;
    int index = static_cast<int>(record.nodes.size());
    NodeHandle handle;
    handle.name = LocalProvider::NodeName(req.cluster, index);
    handle.ip = host.ip;
    handle.ssh_port = host.port;
    handle.ssh_user = host.user;
    handle.identity_file = host.identity_file;
    record.nodes.push_back({pool.hosts[i].address, std::move(handle)});
  }
  if (static_cast<int>(record.nodes.size()) < req.num_nodes) {
    return FailedPrecondition("pool " + pool_ + " has " + std::to_string(pool.hosts.size()) +
                              " host(s) and " + std::to_string(skipped) +
                              " of them are in use by cluster(s) " + Join(blocking) +
                              "; the task needs " + std::to_string(req.num_nodes));
  }
  HERD_RETURN_IF_ERROR(WriteRecord(req.state_dir, record));
  std::string names;
  for (const auto& n : record.nodes) {
    names += (names.empty() ? "" : ", ") + n.handle.name + "=" + n.address;
  }
  HERD_LOG(kInfo) << "ssh cluster " << req.cluster << " on pool " << pool_ << ": " << names;
  return Handles(record);
}

Status SshPoolProvider::Stop(const std::string& cluster, const std::string& state_dir) {
  HERD_ASSIGN_OR_RETURN(Record r, LoadRecord(cluster, pool_, state_dir));
  (void)r;
  return Status::Ok();
}

Result<std::vector<NodeHandle>> SshPoolProvider::Start(const std::string& cluster,
                                                       const std::string& state_dir) {
  HERD_ASSIGN_OR_RETURN(Record r, LoadRecord(cluster, pool_, state_dir));
  return Handles(r);
}

Status SshPoolProvider::Teardown(const std::string& cluster, const std::string& state_dir) {
  // A damaged record is removed all the same: forgetting it is all Teardown does.
  auto r = ReadRecord(state_dir);
  if (r.ok() && r->has_value() && (*r)->cluster != cluster) {
    return FailedPrecondition(state_dir + " records cluster " + (*r)->cluster + ", not " + cluster);
  }
  std::error_code ec;
  fs::remove(RecordPath(state_dir), ec);
  if (ec) return IoError("remove " + RecordPath(state_dir) + ": " + ec.message());
  fs::remove(RecordPath(state_dir) + ".tmp", ec);
  fs::remove(state_dir, ec);  // only when nothing else (the controller's own files) is left
  return Status::Ok();
}

}  // namespace herd::controller
