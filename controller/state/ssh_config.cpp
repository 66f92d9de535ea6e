#include "controller/state/ssh_config.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <sstream>

#include "controller/ssh/ssh_command.hpp"
#include "controller/state/herd_home.hpp"
#include "shared/common/file_util.hpp"
#include "shared/common/limits.hpp"
#include "shared/common/log.hpp"

namespace herd::controller {
namespace {

// ssh_config splits arguments on whitespace and honours double quotes with \" and \\ escapes.
std::string Quote(const std::string& v) {
  if (!v.empty() && v.find_first_of(" \t\"\\'#") == std::string::npos) return v;
  std::string out = "\"";
  for (char ch : v) {
    if (ch == '"' || ch == '\\') out += '\\';
    out += ch;
  }
  return out + "\"";
}

// HostName, IdentityFile, UserKnownHostsFile and ControlPath expand %-tokens; a literal % is %%.
std::string EscapePercent(const std::string& v) {
  std::string out;
  for (char ch : v) {
    if (ch == '%') out += '%';
    out += ch;
  }
  return out;
}

void HostBlock(std::ostringstream& out, const ClusterRecord& c, const std::string& alias,
               const NodeRecord& n) {
  out << "Host " << alias << "\n";
  out << "  HostName " << Quote(EscapePercent(n.ip)) << "\n";
  out << "  Port " << n.ssh_port << "\n";
  if (!n.ssh_user.empty()) out << "  User " << Quote(n.ssh_user) << "\n";
  const std::string& key = n.identity_file.empty() ? c.ssh_key_path : n.identity_file;
  if (!key.empty()) out << "  IdentityFile " << Quote(EscapePercent(key)) << "\n";
  out << "  IdentitiesOnly yes\n";
  if (!c.known_hosts_path.empty()) {
    out << "  UserKnownHostsFile " << Quote(EscapePercent(c.known_hosts_path)) << "\n";
  }
  out << "  StrictHostKeyChecking accept-new\n";
  if (!n.jump.empty()) {
    out << "  ProxyCommand " << JumpProxyCommand(n.jump, c.known_hosts_path) << "\n";
  }
  out << "  ConnectTimeout "
      << std::chrono::duration_cast<std::chrono::seconds>(limits::kSshConnectTimeout).count()
      << "\n";
  out << "  ServerAliveInterval " << limits::kSshServerAliveInterval << "\n";
  out << "  ServerAliveCountMax " << limits::kSshServerAliveCountMax << "\n";
  if (!c.control_dir.empty()) {
    out << "  ControlMaster auto\n";
    out << "  ControlPath " << Quote(EscapePercent(c.control_dir) + "/%C") << "\n";
    out << "  ControlPersist " << limits::kSshControlPersistSeconds << "s\n";
  }
}

// Serialises edits of ~/.ssh/config between herd commands on different clusters (they hold
// different cluster locks). Held only for one read-modify-write, so a plain blocking flock.
class SshConfigEditLock {
 public:
  static Result<SshConfigEditLock> Acquire() {
    const std::string dir = HerdHome() + "/locks";
    HERD_RETURN_IF_ERROR(EnsureDir(dir, 0700));
    // Cluster names start with a letter, so this name never collides with a cluster's lock.
    const std::string path = dir + "/_ssh_config.lock";
    const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) return ErrnoError("open " + path, errno);
    while (flock(fd, LOCK_EX) != 0) {
      if (errno != EINTR) {
        const int err = errno;
        close(fd);
        return ErrnoError("lock " + path, err);
      }
    }
    return SshConfigEditLock(fd);
  }
  SshConfigEditLock(SshConfigEditLock&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  SshConfigEditLock& operator=(SshConfigEditLock&&) = delete;
  ~SshConfigEditLock() {
    if (fd_ >= 0) close(fd_);  // closing the last descriptor drops the flock
  }

 private:
  explicit SshConfigEditLock(int fd) : fd_(fd) {}
  int fd_;
};

bool HasLine(const std::string& text, const std::string& line) {
  std::istringstream in(text);
  std::string l;
  while (std::getline(in, l)) {
    const auto b = l.find_first_not_of(" \t\r");
    const auto e = l.find_last_not_of(" \t\r");
    if (b != std::string::npos && l.substr(b, e - b + 1) == line) return true;
  }
  return false;
}

Status EnsureUserSshInclude() {
  const std::string ssh_dir = UserHome() + "/.ssh";
  HERD_RETURN_IF_ERROR(EnsureDir(ssh_dir, 0700));
  std::string path = ssh_dir + "/config";
  // A dotfile manager may keep ~/.ssh/config as a symlink: edit its target, keep the link.
  std::error_code ec;
  if (std::filesystem::is_symlink(path, ec)) {
    auto target = std::filesystem::canonical(path, ec);
    if (!ec) path = target.string();
  }
  HERD_ASSIGN_OR_RETURN(SshConfigEditLock edit_lock, SshConfigEditLock::Acquire());
  HERD_ASSIGN_OR_RETURN(std::optional<std::string> old, ReadFileIfExists(path));
  const std::string include = SshIncludeLine();
  if (old && HasLine(*old, include)) return Status::Ok();
  unsigned mode = 0600;
  if (struct stat st{}; old && stat(path.c_str(), &st) == 0) mode = st.st_mode & 07777;
  std::string text =
      "# Added by herd: `ssh <cluster>` and `ssh <cluster>-worker<i>` for herd clusters.\n" +
      include + "\n";
  if (old && !old->empty()) text += "\n" + *old;
  HERD_RETURN_IF_ERROR(WriteFileAtomic(path, text, mode));
  HERD_LOG(kInfo) << "added '" << include << "' to " << path;
  return Status::Ok();
}

}  // namespace

std::string WorkerAlias(const std::string& cluster, int i) {
  return cluster + "-worker" + std::to_string(i);
}

std::string RenderSshConfig(const ClusterRecord& c) {
  std::ostringstream out;
  out << "# Generated by herd for cluster " << c.name << ": `ssh " << c.name
      << "` is the head, `ssh " << WorkerAlias(c.name, 1) << "` the first worker.\n"
      << "# Rewritten by herd launch/start, removed by herd down; edits are lost.\n";
  if (const NodeRecord* head = HeadNode(c); head != nullptr) {
    out << "\n";
    HostBlock(out, c, c.name, *head);
  }
  int i = 0;
  for (const NodeRecord* w : WorkerNodes(c)) {
    out << "\n";
    HostBlock(out, c, WorkerAlias(c.name, ++i), *w);
  }
  return out.str();
}

std::string SshConfigPath(const std::string& cluster) {
  return HerdHome() + "/ssh/" + cluster + ".config";
}

std::string SshIncludeLine() { return "Include " + Quote(HerdHome() + "/ssh/*.config"); }

Status WriteSshConfig(const ClusterRecord& c) {
  HERD_RETURN_IF_ERROR(ValidateClusterName(c.name));
  auto context = [&](const Status& s) { return s.WithContext("ssh config of cluster " + c.name); };
  if (!c.control_dir.empty()) {
    if (Status s = EnsureDir(c.control_dir, 0700); !s.ok()) return context(s);
    // A unix socket path holds at most 107 bytes; %C is 40 hex digits.
    if (c.control_dir.size() + 1 + 40 > 107) {
      HERD_LOG(kWarn) << "cluster " << c.name << ": control dir " << c.control_dir
                      << " is too long for an ssh ControlPath socket; ssh will not multiplex";
    }
  }
  const std::string dir = HerdHome() + "/ssh";
  if (Status s = EnsureDir(dir, 0700); !s.ok()) return context(s);
  // ssh refuses an included file that others can write; 0600 like ~/.ssh/config.
  if (Status s = WriteFileAtomic(SshConfigPath(c.name), RenderSshConfig(c), 0600); !s.ok()) {
    return context(s);
  }
  if (Status s = EnsureUserSshInclude(); !s.ok()) return context(s);
  return Status::Ok();
}

Status RemoveSshConfig(const std::string& cluster) {
  HERD_RETURN_IF_ERROR(ValidateClusterName(cluster));
  const std::string path = SshConfigPath(cluster);
  if (unlink(path.c_str()) != 0 && errno != ENOENT) return ErrnoError("remove " + path, errno);
  return Status::Ok();
}

}  // namespace herd::controller
