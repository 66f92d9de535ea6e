#include "controller/bootstrap/remote_scripts.hpp"

#include "controller/ssh/ssh_command.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <sstream>

#include "shared/common/limits.hpp"

namespace herd::controller {
namespace {

using std::chrono::milliseconds;

std::string Seconds(milliseconds d) {  // "0.5", "10" for sleep(1)
  std::string s = std::to_string(d.count() / 1000);
  if (long ms = d.count() % 1000; ms != 0) {
    std::string frac = std::to_string(1000 + ms).substr(1);
    while (frac.back() == '0') frac.pop_back();
    s += "." + frac;
  }
  return s;
}

long WholeSeconds(milliseconds d) { return std::max<long>(1, d.count() / 1000); }

// Shell functions every script shares. D is the agent directory as given (relative to $HOME or
// absolute). After `enter`, DIR is its absolute path and NEEDLE what herdlet's command line holds
// (a pid file may name a recycled pid: a process counts only when its command line matches).
// A cold launch runs these scripts on every node at once, and each program they start costs more
// CPU than the builtin doing its work, so they use builtins where one does: `read` instead of cat
// and sed, variables instead of $(...) (a fork each), `cd -P` instead of pwd -P, `id -u` once and
// only where systemd runs.
std::string Prelude(const std::string& remote_dir) {
  std::ostringstream s;
  s << "set -u\n"
    << "D=" << ShellQuote(remote_dir) << "\n"
    << R"sh(cd "$HOME" 2>/dev/null || cd ~ || { echo "cannot enter the home directory" >&2; exit 90; }
enter() {
  cd -P "$D" 2>/dev/null || return 1
  DIR=$PWD
  NEEDLE="$DIR/bin/herdlet --config"
}
# A live process (zombies are dead: PID 1 may reap them late).
alive() {
  case "$1" in ''|0|*[!0-9]*) return 1 ;; esac
  { read -r st <"/proc/$1/stat"; } 2>/dev/null || return 1
  st=${st##*) }
  case "$st" in ''|Z*|X*) return 1 ;; esac
}
is_proc() { alive "$1" && tr '\0' ' ' <"/proc/$1/cmdline" 2>/dev/null | grep -qF -- "$2"; }
# P: the number in the file $1, 0 when there is none.
pid_in() {
  P=0
  { read -r P <"$1"; } 2>/dev/null
  case "$P" in ''|*[!0-9]*) P=0 ;; esac
}
# systemd runs this machine and can be reached (sd_booted()'s test). Not "PID 1 is systemd": a
# local provider's node shares this machine's PID 1 but has a /run of its own.
systemd_booted() { [ -d /run/systemd/system ]; }
# The uid picks the unit (system or user); without systemd no unit is used, and `id` would be one
# more program start per node and script.
if systemd_booted; then ME=$(id -u); else ME=unused; fi
if [ "$ME" = 0 ]; then
  UNIT=/etc/systemd/system/herdlet.service
  sctl() { systemctl "$@"; }
  jctl() { journalctl -u herdlet.service "$@"; }
else
  UNIT="$HOME/.config/systemd/user/herdlet.service"
  sctl() { systemctl --user "$@"; }
  jctl() { journalctl --user-unit herdlet.service "$@"; }
fi
unit_mode() { [ -f "$UNIT" ] && systemd_booted; }
unit_pid() {
  P=$(sctl show -p MainPID --value herdlet.service 2>/dev/null) || P=0
  case "$P" in ''|*[!0-9]*) P=0 ;; esac
}
# HP: herdlet's pid (0 when it does not run); UP=1 when it runs under its supervisor or unit.
state() {
  HP=0
  UP=0
  if unit_mode; then
    unit_pid
    if is_proc "$P" "$NEEDLE"; then HP=$P; UP=1; fi
    return 0
  fi
  pid_in herdlet.pid
  p=$P
  pid_in supervise.pid
  s=$P
  if is_proc "$p" "$NEEDLE"; then HP=$p; fi
  if [ "$HP" != 0 ] && is_proc "$s" herdlet-supervise; then UP=1; fi
  return 0
}
)sh";
  const long stop_ticks = limits::kAgentStopTimeout / milliseconds(100);
  s << "stop_all() {\n"
    << R"sh(  if unit_mode; then sctl stop herdlet.service >/dev/null 2>&1 || true; fi
  pid_in supervise.pid
  s=$P
  pid_in herdlet.pid
  p=$P
  # The supervisor passes SIGTERM on to herdlet; a herdlet without one gets it directly.
  if is_proc "$s" herdlet-supervise; then
    kill -TERM "$s" 2>/dev/null
  elif is_proc "$p" "$NEEDLE"; then
    kill -TERM "$p" 2>/dev/null
  fi
  n=0
  while is_proc "$s" herdlet-supervise || is_proc "$p" "$NEEDLE"; do
    n=$((n + 1))
)sh"
    << "    if [ \"$n\" -gt " << stop_ticks << " ]; then\n"
    << R"sh(      if is_proc "$s" herdlet-supervise; then kill -KILL "$s" 2>/dev/null; fi
      if is_proc "$p" "$NEEDLE"; then kill -KILL "$p" 2>/dev/null; fi
      echo "herdlet did not stop on SIGTERM: killed" >&2
      break
    fi
    sleep 0.1
  done
)sh"
    << "  if [ -e supervise.pid ] || [ -e herdlet.pid ] || [ -e " << kRemoteReadyFile
    << " ]; then rm -f supervise.pid herdlet.pid " << kRemoteReadyFile << "; fi\n"
    << "}\n";
  return s.str();
}

std::string_view ModeWord(AgentMode m) {
  switch (m) {
    case AgentMode::kSystemdSystem:
      return "system";
    case AgentMode::kSystemdUser:
      return "user";
    case AgentMode::kSupervise:
      break;
  }
  return "supervise";
}

}  // namespace

std::vector<std::string> RemoteHashedFiles() {
  return {std::string(kRemoteHerdlet),
          std::string(kRemoteSupervise),
          "certs/ca.crt",
          "certs/agent.crt",
          "certs/agent.key",
          std::string(kRemoteConfig),
          std::string(kRemoteUnitKey)};
}

std::string ProbeScript(const std::string& remote_dir, const std::vector<std::string>& hashed,
                        bool dirs_made) {
  std::ostringstream s;
  s << Prelude(remote_dir);
  if (!dirs_made) {
    s << R"sh(for d in "$D/bin" "$D/certs" "$D/state"; do
  [ -d "$d" ] || { mkdir -p "$D/bin" "$D/certs" "$D/state" || exit 91; break; }
done
chmod 700 "$D" "$D/certs" || exit 91
)sh";
  }
  s << R"sh(enter || { echo "cannot enter $D" >&2; exit 92; }
echo "dir $DIR"
echo "home $HOME"
PMODE=supervise
if systemd_booted && { [ "$ME" = 0 ] || sctl show-environment >/dev/null 2>&1; }; then
  if [ "$ME" = 0 ]; then PMODE=system; else PMODE=user; fi
fi
echo "mode $PMODE"
echo "unit $UNIT"
if command -v gzip >/dev/null 2>&1; then echo "gzip 1"; else echo "gzip 0"; fi
# One sha256sum for the files that exist: "<hex>  <path>" each; a missing file has no line.
set --
for f in)sh";
  for (const auto& f : hashed) {
    s << " " << (f == kRemoteUnitKey ? std::string("\"$UNIT\"") : ShellQuote(f));
  }
  s << R"sh(; do
  if [ -f "$f" ]; then set -- "$@" "$f"; fi
done
if [ $# -gt 0 ]; then sha256sum -- "$@" || exit 93; fi
echo "hashed"
state
echo "pid $HP"
echo "up $UP"
)sh";
  return s.str();
}

namespace {
bool IsSha256Hex(std::string_view s) {
  return s.size() == 64 && s.find_first_not_of("0123456789abcdef") == std::string_view::npos;
}
}  // namespace

Result<NodeProbe> ParseProbe(const std::string& out) {
  NodeProbe p;
  bool have_mode = false, have_pid = false, hashed = false;
  std::map<std::string, std::string> by_path;  // sha256sum's lines
  std::istringstream in(out);
  std::string line;
  while (std::getline(in, line)) {
    if (line == "hashed") {
      hashed = true;
      continue;
    }
    // sha256sum: "<hex>  <path>" (a path with a backslash or newline comes escaped, after a
    // leading '\': not matched, so that file counts as missing and is sent again).
    if (line.size() > 66 && IsSha256Hex(std::string_view(line).substr(0, 64)) &&
        line.compare(64, 2, "  ") == 0) {
      by_path[line.substr(66)] = line.substr(0, 64);
      continue;
    }
    auto sp = line.find(' ');
    if (sp == std::string::npos) continue;
    std::string key = line.substr(0, sp), value = line.substr(sp + 1);
    if (key == "dir") {
      p.dir = value;
    } else if (key == "home") {
      p.home = value;
    } else if (key == "unit") {
      p.unit_path = value;
    } else if (key == "mode") {
      have_mode = true;
      if (value == "system") {
        p.mode = AgentMode::kSystemdSystem;
      } else if (value == "user") {
        p.mode = AgentMode::kSystemdUser;
      } else if (value == "supervise") {
        p.mode = AgentMode::kSupervise;
      } else {
        return Internal("probe: unknown mode '" + value + "'");
      }
    } else if (key == "pid") {
      have_pid = true;
      try {
        p.pid = std::stoi(value);
      } catch (const std::exception&) {
        return Internal("probe: bad pid '" + value + "'");
      }
    } else if (key == "up") {
      p.up = value == "1";
    } else if (key == "gzip") {
      p.gzip = value == "1";
    }
  }
  if (p.dir.empty() || p.home.empty() || !have_mode || !have_pid || !hashed) {
    return Internal("unexpected probe output: '" + out + "'");
  }
  for (const auto& f : RemoteHashedFiles()) {
    auto it = by_path.find(f == kRemoteUnitKey ? p.unit_path : f);
    p.sha[f] = it == by_path.end() ? "" : it->second;
  }
  return p;
}

std::string UploadManyScript(const std::string& remote_dir, const std::vector<UploadItem>& items) {
  std::ostringstream s;
  s << "set -u\nD=" << ShellQuote(remote_dir) << "\n"
    << "cd \"$HOME\" 2>/dev/null || cd ~ || exit 90\n"
    << "cd \"$D\" || exit 92\n"
    << R"sh(t=
# fail PATH [WHY]
fail() { rm -f "$t"; echo "cannot write $1${2:+ ($2)}" >&2; exit 1; }
)sh";
  // The directories first, in one mkdir (and none when they exist: the probe made D's own).
  std::vector<std::string> dirs;
  for (const auto& f : items) {
    auto slash = f.path.rfind('/');
    if (slash == std::string::npos || slash == 0) continue;
    std::string d = f.path.substr(0, slash);
    if (std::find(dirs.begin(), dirs.end(), d) == dirs.end()) dirs.push_back(d);
  }
  if (!dirs.empty()) {
    std::string test, args;
    for (const auto& d : dirs) {
      test += (test.empty() ? "" : " && ") + std::string("[ -d ") + ShellQuote(d) + " ]";
      args += " " + ShellQuote(d);
    }
    // The names stay single-quoted in the message: a unit path comes from the node's $HOME.
    s << "umask 077\n"
      << test << " || mkdir -p --" << args << " || { printf 'cannot create %s\\n'" << args
      << " >&2; exit 1; }\n";
  }
  // Each file through a temporary file and a rename. The umask gives the file its mode as the
  // shell creates it; only modes with an execute bit need a chmod.
  for (const auto& f : items) {
    const unsigned mode = std::stoul(f.mode, nullptr, 8) & 0777;
    const std::string q = ShellQuote(f.path);
    char umask[8];
    std::snprintf(umask, sizeof umask, "%03o", ~mode & 0777);
    s << "umask " << umask << "\nt=" << q << ".tmp.$$\n";
    if (!f.from_stdin) {
      s << "printf '%s' " << ShellQuote(std::string(f.data)) << " >\"$t\" || fail " << q << "\n";
    } else if (f.gunzip_sha256.empty()) {
      s << "cat >\"$t\" || fail " << q << "\n";
    } else {
      const std::string sha = ShellQuote(f.gunzip_sha256);
      s << "{ gzip -dc >\"$t\" && h=$(sha256sum <\"$t\") && [ \"${h%% *}\" = " << sha
        << " ]; } || fail " << q << " \"unpacking its gzip data failed or did not give sha256 \""
        << sha << "\n";
    }
    if (mode & 0111) s << "chmod " << f.mode << " \"$t\" || fail " << q << "\n";
    s << "mv -f \"$t\" " << q << " || fail " << q << "\n";
  }
  return s.str();
}

namespace {
// StartScript after the prelude and `enter`: ends printing "<report> <pid>".
std::string StartBody(AgentMode mode, std::string_view report) {
  const long start_ticks = limits::kAgentStartTimeout / limits::kAgentStartPoll;
  std::ostringstream s;
  s << "MODE=" << ModeWord(mode) << "\n"
    << R"sh(show_log() {
  if [ "$MODE" = supervise ]; then
    tail -n 20 herdlet.log 2>/dev/null
  else
    jctl -n 20 --no-pager 2>/dev/null
  fi
}
fail_start() {
  echo "$1; the end of its log:" >&2
  show_log >&2
  stop_all
  exit 3
}
stop_all
)sh";
  if (mode == AgentMode::kSupervise) {
    // herdlet writes its pid to descriptor 3 once its config, certificates and listener are in
    // place (agent/core/agentd.cpp) and closes it; the supervisor hands the descriptor to that
    // first herdlet only. The command substitution returns at that moment, or at end of file if
    // herdlet exited before (herdlet --ready-fd also exits if not running within the start
    // timeout): no polling, no sleep.
    s << "HP=$(setsid /bin/sh \"$DIR/bin/herdlet-supervise\" --ready-fd 3 --backoff-initial "
      << WholeSeconds(limits::kAgentRestartBackoffInitial) << " --backoff-max "
      << WholeSeconds(limits::kAgentRestartBackoffMax) << " --stable-after "
      << WholeSeconds(limits::kAgentStableAfter)
      << " \"$DIR/bin/herdlet\" \"$DIR/herdlet.yaml\" 3>&1 </dev/null >>herdlet.log 2>&1 &)\n"
      << "case \"$HP\" in ''|*[!0-9]*) fail_start \"herdlet exited right after it started (or was "
         "not running within "
      << Seconds(limits::kAgentStartTimeout) << " s)\" ;; esac\n";
  } else {
    s << R"sh(# A user unit must run without a login session.
if [ "$MODE" = user ]; then loginctl enable-linger "$(id -un)" >/dev/null 2>&1 || true; fi
sctl daemon-reload || fail_start "systemctl daemon-reload failed"
sctl enable herdlet.service >/dev/null 2>&1 || fail_start "systemctl enable herdlet.service failed"
sctl restart herdlet.service || fail_start "systemctl restart herdlet.service failed"
# herdlet writes its pid to its ready file once its config, certificates and listener are in
# place (agent/core/agentd.cpp); dead before that, it is reported here with its log rather than
# left to systemd's restart delay (longer than a tick).
HP=0
n=0
while :; do
  if [ "$HP" = 0 ]; then unit_pid; HP=$P; fi
  if [ "$HP" != 0 ]; then
)sh"
      << "    pid_in " << kRemoteReadyFile << "\n"
      << R"sh(    if [ "$P" = "$HP" ]; then break; fi
    alive "$HP" || fail_start "herdlet exited right after it started"
  fi
  n=$((n + 1))
)sh"
      << "  if [ \"$n\" -gt " << start_ticks
      << " ]; then fail_start \"herdlet did not start within "
      << Seconds(limits::kAgentStartTimeout) << " s\"; fi\n"
      << "  sleep " << Seconds(limits::kAgentStartPoll) << "\n"
      << "done\n";
  }
  s << "echo \"" << report << " $HP\"\n";
  return s.str();
}
}  // namespace

std::string StartScript(const std::string& remote_dir, AgentMode mode) {
  return Prelude(remote_dir) + "enter || { echo \"no agent directory $D\" >&2; exit 92; }\n" +
         StartBody(mode, "pid");
}

std::string ProbeAndStartScript(const std::string& remote_dir,
                                const std::vector<std::string>& hashed, bool restart) {
  // The probe leaves PMODE and UP set, and the working directory in D.
  return ProbeScript(remote_dir, hashed, /*dirs_made=*/true) +
         "if [ \"$PMODE\" = supervise ] && { [ " + (restart ? "1" : "0") +
         " = 1 ] || [ \"$UP\" = 0 ]; }; then\n" + StartBody(AgentMode::kSupervise, "started") +
         "fi\n";
}

namespace {
// N of the first "<key> N" line; none when there is none or N is not a number.
std::optional<int> NumberAfter(const std::string& out, std::string_view key) {
  std::istringstream in(out);
  std::string line;
  while (std::getline(in, line)) {
    if (!line.starts_with(key) || line.size() <= key.size() || line[key.size()] != ' ') continue;
    try {
      return std::stoi(line.substr(key.size() + 1));
    } catch (const std::exception&) {
      return std::nullopt;
    }
  }
  return std::nullopt;
}
}  // namespace

std::optional<int> ParseStarted(const std::string& out) { return NumberAfter(out, "started"); }

std::string UploadAndStartScript(const std::string& remote_dir,
                                 const std::vector<UploadItem>& items, AgentMode mode) {
  return "(\n" + UploadManyScript(remote_dir, items) + ") || exit $?\n" +
         StartScript(remote_dir, mode);
}

std::string StopScript(const std::string& remote_dir) {
  return Prelude(remote_dir) + "enter || exit 0\nstop_all\necho stopped\n";
}

std::string PidScript(const std::string& remote_dir) {
  return Prelude(remote_dir) + "enter || { echo \"pid 0\"; exit 0; }\nstate\necho \"pid $HP\"\n";
}

Result<int> ParsePid(const std::string& out) {
  if (std::optional<int> pid = NumberAfter(out, "pid")) return *pid;
  return Internal("no pid in the output: '" + out + "'");
}

}  // namespace herd::controller
