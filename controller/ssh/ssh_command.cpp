#include "controller/ssh/ssh_command.hpp"

#include <array>

#include "shared/common/limits.hpp"

namespace herd::controller {
namespace {

std::string LastLine(std::string_view text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.remove_suffix(1);
  auto nl = text.find_last_of('\n');
  if (nl != std::string_view::npos) text.remove_prefix(nl + 1);
  return std::string(text);
}

std::string OneLine(std::string_view text) {
  std::string out;
  for (char c : text) out += (c == '\n' || c == '\r') ? ' ' : c;
  while (!out.empty() && out.back() == ' ') out.pop_back();
  return out;
}

}  // namespace

std::string DescribeTarget(const SshTarget& target) {
  std::string addr = target.host + ":" + std::to_string(target.port);
  if (!target.jump.empty()) {
    addr += " via " + target.jump.host + ":" + std::to_string(target.jump.port);
    for (auto hop = target.jump.before.rbegin(); hop != target.jump.before.rend(); ++hop) {
      addr += " via " + hop->host + ":" + std::to_string(hop->port);
    }
  }
  if (target.name.empty()) return addr;
  return target.name + " (" + addr + ")";
}

std::vector<std::string> SshOptions(const SshTarget& target) {
  auto secs = [](auto d) {
    return std::to_string(std::chrono::duration_cast<std::chrono::seconds>(d).count());
  };
  std::vector<std::string> o = {"-T"};
  auto opt = [&o](const std::string& kv) {
    o.push_back("-o");
    o.push_back(kv);
  };
  if (!target.control_dir.empty()) {
    opt("ControlMaster=auto");
    opt("ControlPersist=" + std::to_string(limits::kSshControlPersistSeconds) + "s");
    // %C: a hash of local host, remote host, port and user: short, and one per machine.
    opt("ControlPath=" + target.control_dir + "/%C");
  } else {
    opt("ControlMaster=no");
    opt("ControlPath=none");
  }
  opt("ConnectTimeout=" + secs(limits::kSshConnectTimeout));
  opt("ServerAliveInterval=" + std::to_string(limits::kSshServerAliveInterval));
  opt("ServerAliveCountMax=" + std::to_string(limits::kSshServerAliveCountMax));
  opt("IdentitiesOnly=yes");
  opt("BatchMode=yes");
  opt("StrictHostKeyChecking=accept-new");
  if (!target.known_hosts_file.empty()) {
    opt("UserKnownHostsFile=" + target.known_hosts_file);
    opt("GlobalKnownHostsFile=/dev/null");
  }
  // Keeps "Warning: Permanently added ..." out of every command's stderr; errors still show.
  opt("LogLevel=ERROR");
  if (!target.identity_file.empty()) {
    o.push_back("-i");
    o.push_back(target.identity_file);
  }
  if (!target.jump.empty())
    opt("ProxyCommand=" + JumpProxyCommand(target.jump, target.known_hosts_file));
  o.push_back("-p");
  o.push_back(std::to_string(target.port));
  return o;
}

Result<SshJump> ParseSshJump(std::string_view spec, const std::string& identity_file) {
  auto bad = [&](const std::string& why) {
    return InvalidArgument("jump host '" + std::string(spec) + "': " + why);
  };
  if (spec.empty()) return bad("empty");
  if (spec.find(',') != std::string_view::npos) {
    return bad("one hop expected here (a list is split into hops first)");
  }
  if (spec.find_first_of(" \t\r\n'\"\\") != std::string_view::npos) {
    return bad("blanks, quotes and backslashes are not allowed");
  }
  SshJump jump;
  jump.identity_file = identity_file;
  std::string_view rest = spec;
  if (auto at = rest.rfind('@'); at != std::string_view::npos) {
    jump.user = std::string(rest.substr(0, at));
    rest.remove_prefix(at + 1);
    if (jump.user.empty()) return bad("no user before '@'");
  }
  std::string_view port;
  if (!rest.empty() && rest.front() == '[') {
    auto close = rest.find(']');
    if (close == std::string_view::npos) return bad("'[' without ']'");
    jump.host = std::string(rest.substr(1, close - 1));
    rest.remove_prefix(close + 1);
    if (!rest.empty()) {
      if (rest.front() != ':') return bad("expected ':PORT' after ']'");
      port = rest.substr(1);
      if (port.empty()) return bad("no port after ':'");
    }
  } else if (auto colon = rest.find(':'); colon != std::string_view::npos &&
                                          rest.find(':', colon + 1) == std::string_view::npos) {
    jump.host = std::string(rest.substr(0, colon));
    port = rest.substr(colon + 1);
    if (port.empty()) return bad("no port after ':'");
  } else {
    jump.host = std::string(rest);  // a name, an IPv4 address or a bare IPv6 address
  }
  if (jump.host.empty()) return bad("no host");
  if (jump.host.front() == '-' || (!jump.user.empty() && jump.user.front() == '-')) {
    return bad("a host or user may not start with '-'");
  }
  if (!port.empty()) {
    int value = 0;
    for (char c : port) {
      if (c < '0' || c > '9' || value > 65535) return bad("port: expected a number 1-65535");
      value = value * 10 + (c - '0');
    }
    if (value < 1 || value > 65535) return bad("port: expected a number 1-65535");
    jump.port = value;
  }
  return jump;
}

std::string JumpProxyCommand(const SshJump& jump, const std::string& known_hosts_file) {
  // ProxyCommand expands %-tokens and runs through the shell: '%' doubled, then quoted.
  auto arg = [](const std::string& v) {
    std::string escaped;
    for (char c : v) {
      if (c == '%') escaped += '%';
      escaped += c;
    }
    return ShellQuote(escaped);
  };
  auto secs = [](auto d) {
    return std::to_string(std::chrono::duration_cast<std::chrono::seconds>(d).count());
  };
  std::string cmd = "ssh -T -o ControlMaster=no -o ControlPath=none";
  cmd += " -o ConnectTimeout=" + secs(limits::kSshConnectTimeout);
  cmd += " -o ServerAliveInterval=" + std::to_string(limits::kSshServerAliveInterval);
  cmd += " -o ServerAliveCountMax=" + std::to_string(limits::kSshServerAliveCountMax);
  cmd += " -o IdentitiesOnly=yes -o BatchMode=yes -o StrictHostKeyChecking=accept-new";
  if (!known_hosts_file.empty()) {
    cmd += " -o " + arg("UserKnownHostsFile=" + known_hosts_file) +
           " -o GlobalKnownHostsFile=/dev/null";
  }
  cmd += " -o LogLevel=ERROR";
  if (!jump.identity_file.empty()) cmd += " -i " + arg(jump.identity_file);
  if (!jump.before.empty()) {
    // This hop is reached through the ones before it: the last of them with the rest before it.
    // Its command is this one's option, so its %-tokens are doubled once more by arg().
    SshJump previous = jump.before.back();
    previous.before.assign(jump.before.begin(), jump.before.end() - 1);
    cmd += " -o " + arg("ProxyCommand=" + JumpProxyCommand(previous, known_hosts_file));
  }
  cmd += " -p " + std::to_string(jump.port) + " -W %h:%p ";
  cmd += arg(jump.user.empty() ? jump.host : jump.user + "@" + jump.host);
  return cmd;
}

std::string SshDestination(const SshTarget& target) {
  return target.user.empty() ? target.host : target.user + "@" + target.host;
}

std::vector<std::string> BuildSshArgv(const SshTarget& target, const std::string& remote_command) {
  std::vector<std::string> argv = {"ssh"};
  for (auto& o : SshOptions(target)) argv.push_back(std::move(o));
  argv.push_back(SshDestination(target));
  // ssh parses options again after the destination; "--" keeps a command starting with '-' a
  // command.
  argv.push_back("--");
  argv.push_back(remote_command);
  return argv;
}

std::vector<std::string> BuildControlArgv(const SshTarget& target, std::string_view op,
                                          const std::vector<std::string>& extra) {
  std::vector<std::string> argv = {"ssh"};
  for (auto& o : SshOptions(target)) argv.push_back(std::move(o));
  argv.push_back("-O");
  argv.emplace_back(op);
  for (const auto& e : extra) argv.push_back(e);
  argv.push_back(SshDestination(target));
  return argv;
}

Result<std::string> RsyncRemoteShell(const SshTarget& target) {
  std::string cmd = "ssh";
  for (const auto& o : SshOptions(target)) {
    cmd += ' ';
    if (o.find_first_of(" '\"") == std::string::npos) {
      cmd += o;
    } else if (o.find('\'') == std::string::npos) {
      cmd += "'" + o + "'";
    } else if (o.find('"') == std::string::npos) {
      cmd += "\"" + o + "\"";
    } else {
      return InvalidArgument("ssh option cannot be passed to rsync (has both quote kinds): " + o);
    }
  }
  return cmd;
}

Result<std::vector<std::string>> BuildRsyncArgv(const SshTarget& target,
                                                const std::string& local_src,
                                                const std::string& remote_dst,
                                                bool filter_gitignore) {
  if (local_src.empty() || remote_dst.empty()) {
    return InvalidArgument("rsync needs a source and a destination");
  }
  HERD_ASSIGN_OR_RETURN(std::string shell, RsyncRemoteShell(target));
  std::vector<std::string> argv = {"rsync", "-a"};
  // Each directory's .gitignore excludes what it names, below that directory (as git does).
  if (filter_gitignore) argv.push_back("--filter=:- .gitignore");
  argv.push_back("-e");
  argv.push_back(shell);
  argv.push_back(local_src);
  std::string host =
      target.host.find(':') != std::string::npos ? "[" + target.host + "]" : target.host;
  argv.push_back((target.user.empty() ? "" : target.user + "@") + host + ":" + remote_dst);
  return argv;
}

std::string LocalForwardSpec(int local_port, const std::string& remote_host, int remote_port) {
  std::string host =
      remote_host.find(':') != std::string::npos ? "[" + remote_host + "]" : remote_host;
  return "127.0.0.1:" + std::to_string(local_port) + ":" + host + ":" + std::to_string(remote_port);
}

Status ClassifySshResult(const SshTarget& target, const ProcResult& result) {
  if (result.exit_code != 255) return Status::Ok();
  const std::string& err = result.err;
  std::string who = DescribeTarget(target);
  if (err.find("Permission denied") != std::string::npos) {
    return PermissionDenied(who + ": ssh authentication failed (" + LastLine(err) + "): the key " +
                            (target.identity_file.empty() ? "offered" : target.identity_file) +
                            " is not authorised for user " +
                            (target.user.empty() ? "(default)" : target.user));
  }
  if (err.find("Host key verification failed") != std::string::npos ||
      err.find("REMOTE HOST IDENTIFICATION HAS CHANGED") != std::string::npos) {
    return PermissionDenied(
        who +
        ": ssh host key verification failed: the host key differs from "
        "the one recorded in " +
        (target.known_hosts_file.empty() ? "known_hosts" : target.known_hosts_file));
  }
  static constexpr std::array<std::string_view, 11> kSshMessages = {
      "ssh: ",
      "Connection refused",
      "Connection timed out",
      "Connection closed by",
      "Connection reset by",
      "kex_exchange_identification",
      "Could not resolve hostname",
      "No route to host",
      "Control socket connect",
      "Timeout, server",
      "client_loop: ",
  };
  for (auto m : kSshMessages) {
    if (err.find(m) != std::string::npos) {
      return Unavailable(who + ": ssh failed: " + OneLine(LastLine(err)));
    }
  }
  return Status::Ok();
}

std::string ShellQuote(std::string_view s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  return out + "'";
}

}  // namespace herd::controller
