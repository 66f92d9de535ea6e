// Pure argv builders for ssh and rsync, and the reading of ssh's own failures. No process is run
// here, so the exact command lines are unit-tested.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "controller/ssh/ssh_target.hpp"
#include "controller/ssh/subprocess.hpp"
#include "shared/common/status.hpp"

namespace herd::controller {

// The options every ssh invocation of herd uses (after "ssh", before the destination): multiplexed
// through a ControlMaster, bounded connect, keepalives, only the given key, never a prompt; and
// the target's jump host as a ProxyCommand.
std::vector<std::string> SshOptions(const SshTarget& target);

// ssh's -J form "[user@]host[:port]" (an IPv6 address in brackets when a port follows). One hop
// (a list "a,b" is split into hops by the caller, each parsed here): a ',' is refused, as are a
// host starting with '-', blanks and a bad port. The jump's key is not part of the form:
// `identity_file` is copied into the result.
Result<SshJump> ParseSshJump(std::string_view spec, const std::string& identity_file);

// The ProxyCommand that reaches the target through `jump` (`ssh -W %h:%p` on the jump host), with
// the same bounded, prompt-free options as SshOptions and the jump's own key, the jump host itself
// reached through `jump.before` (a ProxyCommand of its own, nested); host keys checked
// against `known_hosts_file` ("" the user's). For ssh's -o ProxyCommand= and for ssh_config;
// paths are shell-quoted and their '%' doubled.
std::string JumpProxyCommand(const SshJump& jump, const std::string& known_hosts_file);

// "user@host" ("host" without a user; IPv6 literals as they are, ssh takes them bare).
std::string SshDestination(const SshTarget& target);

// ssh <options> user@host -- remote_command
std::vector<std::string> BuildSshArgv(const SshTarget& target, const std::string& remote_command);

// ssh <options> -O <op> [extra...] user@host: talks to the ControlMaster ("exit", "check",
// "forward" with extra = {"-L", "127.0.0.1:P:host:port"}).
std::vector<std::string> BuildControlArgv(const SshTarget& target, std::string_view op,
                                          const std::vector<std::string>& extra = {});

// One argument for a POSIX shell: 'it'\''s' (remote commands, scripts run over ssh).
std::string ShellQuote(std::string_view s);

// The -e argument of rsync: "ssh <options>" quoted the way rsync splits it (spaces separate,
// single quotes protect). Fails on an option that rsync cannot quote (both quote kinds in it).
Result<std::string> RsyncRemoteShell(const SshTarget& target);

// rsync -a [--filter=':- .gitignore'] -e "<ssh>" local_src user@host:remote_dst. As with rsync, a
// local_src ending in '/' copies the directory's contents, otherwise the directory itself.
Result<std::vector<std::string>> BuildRsyncArgv(const SshTarget& target,
                                                const std::string& local_src,
                                                const std::string& remote_dst,
                                                bool filter_gitignore);

// "127.0.0.1:<local_port>:<remote_host>:<remote_port>" for -L (IPv6 hosts in brackets).
std::string LocalForwardSpec(int local_port, const std::string& remote_host, int remote_port);

// OK unless the result is ssh's own failure (exit 255 with one of ssh's messages), which becomes
// PermissionDenied for a refused key and Unavailable otherwise, the message naming the target.
// A remote command that itself exits 255 with other output stays OK.
Status ClassifySshResult(const SshTarget& target, const ProcResult& result);

}  // namespace herd::controller
