#include "controller/bootstrap/remote_scripts.hpp"

#include "controller/ssh/ssh_command.hpp"

#include <chrono>
#include <sstream>

#include "shared/common/limits.hpp"

namespace herd::controller {
namespace {

using std::chrono::milliseconds;

constexpr milliseconds kPollTick{50};

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
std::string Prelude(const std::string& remote_dir) {
  std::ostringstream s;
  s << "set -u\n"
    << "D=" << ShellQuote(remote_dir) << "\n"
    << R"sh(cd "$HOME" 2>/dev/null || cd ~ || { echo "cannot enter the home directory" >&2; exit 90; }
enter() {
  cd "$D" 2>/dev/null || return 1
  DIR=$(pwd -P)
  NEEDLE="$DIR/bin/herdlet --config"
}
# A live process (zombies are dead: PID 1 may reap them late).
alive() {
  case "$1" in ''|0|*[!0-9]*) return 1 ;; esac
  st=$(sed 's/^.*) //' "/proc/$1/stat" 2>/dev/null) || return 1
  case "$st" in ''|Z*|X*) return 1 ;; esac
}
is_proc() { alive "$1" && tr '\0' ' ' <"/proc/$1/cmdline" 2>/dev/null | grep -qF -- "$2"; }
pid_in() {
  p=$(cat "$1" 2>/dev/null) || p=0
  case "$p" in ''|*[!0-9]*) p=0 ;; esac
  echo "$p"
}
systemd_pid1() { [ "$(ps -p 1 -o comm= 2>/dev/null)" = systemd ] || [ -d /run/systemd/system ]; }
if [ "$(id -u)" = 0 ]; then
  UNIT=/etc/systemd/system/herdlet.service
  sctl() { systemctl "$@"; }
  jctl() { journalctl -u herdlet.service "$@"; }
else
  UNIT="$HOME/.config/systemd/user/herdlet.service"
  sctl() { systemctl --user "$@"; }
  jctl() { journalctl --user-unit herdlet.service "$@"; }
fi
unit_mode() { [ -f "$UNIT" ] && systemd_pid1; }
unit_pid() {
  p=$(sctl show -p MainPID --value herdlet.service 2>/dev/null) || p=0
  case "$p" in ''|*[!0-9]*) p=0 ;; esac
  echo "$p"
}
# HP: herdlet's pid (0 when it does not run); UP=1 when it runs under its supervisor or unit.
state() {
  HP=0
  UP=0
  if unit_mode; then
    p=$(unit_pid)
    if is_proc "$p" "$NEEDLE"; then HP=$p; UP=1; fi
    return 0
  fi
  p=$(pid_in herdlet.pid)
  s=$(pid_in supervise.pid)
  if is_proc "$p" "$NEEDLE"; then HP=$p; fi
  if [ "$HP" != 0 ] && is_proc "$s" herdlet-supervise; then UP=1; fi
  return 0
}
)sh";
  const long stop_ticks = limits::kAgentStopTimeout / milliseconds(100);
  s << "stop_all() {\n"
    << R"sh(  if unit_mode; then sctl stop herdlet.service >/dev/null 2>&1 || true; fi
  s=$(pid_in supervise.pid)
  p=$(pid_in herdlet.pid)
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
  rm -f supervise.pid herdlet.pid
}
)sh";
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

std::string ProbeScript(const std::string& remote_dir) {
  std::ostringstream s;
  s << Prelude(remote_dir) << R"sh(mkdir -p "$D/bin" "$D/certs" "$D/state" || exit 91
chmod 700 "$D" "$D/certs" || exit 91
enter || { echo "cannot enter $D" >&2; exit 92; }
echo "dir $DIR"
echo "home $HOME"
if systemd_pid1 && { [ "$(id -u)" = 0 ] || sctl show-environment >/dev/null 2>&1; }; then
  if [ "$(id -u)" = 0 ]; then echo "mode system"; else echo "mode user"; fi
else
  echo "mode supervise"
fi
echo "unit $UNIT"
if command -v gzip >/dev/null 2>&1; then echo "gzip 1"; else echo "gzip 0"; fi
hash_of() {
  if [ -f "$1" ]; then h=$(sha256sum <"$1") || exit 93; echo "${h%% *}"; else echo "-"; fi
}
)sh";
  for (const auto& f : RemoteHashedFiles()) {
    if (f == kRemoteUnitKey) {
      s << "echo \"sha unit $(hash_of \"$UNIT\")\"\n";
    } else {
      s << "echo \"sha " << f << " $(hash_of " << ShellQuote(f) << ")\"\n";
    }
  }
  s << "state\necho \"pid $HP\"\necho \"up $UP\"\n";
  return s.str();
}

Result<NodeProbe> ParseProbe(const std::string& out) {
  NodeProbe p;
  bool have_mode = false, have_pid = false;
  std::istringstream in(out);
  std::string line;
  while (std::getline(in, line)) {
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
    } else if (key == "sha") {
      auto sp2 = value.rfind(' ');
      if (sp2 == std::string::npos) return Internal("probe: bad line '" + line + "'");
      std::string hex = value.substr(sp2 + 1);
      p.sha[value.substr(0, sp2)] = hex == "-" ? "" : hex;
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
  if (p.dir.empty() || p.home.empty() || !have_mode || !have_pid) {
    return Internal("unexpected probe output: '" + out + "'");
  }
  for (const auto& f : RemoteHashedFiles()) {
    if (!p.sha.count(f)) return Internal("probe output lacks the hash of " + f);
  }
  return p;
}

std::string UploadScript(const std::string& remote_dir, const std::string& path,
                         std::string_view mode) {
  std::string q = ShellQuote(path);
  std::ostringstream s;
  s << "set -u\nD=" << ShellQuote(remote_dir) << "\n"
    << "cd \"$HOME\" 2>/dev/null || cd ~ || exit 90\n"
    << "cd \"$D\" || exit 92\n"
    << "umask 077\n"
    << "t=" << q << ".tmp.$$\n"
    << "mkdir -p \"$(dirname " << q << ")\" && cat >\"$t\" && chmod " << mode
    << " \"$t\" && mv -f \"$t\" " << q << " || { rm -f \"$t\"; exit 1; }\n";
  return s.str();
}

std::string UploadManyScript(const std::string& remote_dir, const std::vector<UploadItem>& items) {
  std::ostringstream s;
  s << "set -u\nD=" << ShellQuote(remote_dir) << "\n"
    << "cd \"$HOME\" 2>/dev/null || cd ~ || exit 90\n"
    << "cd \"$D\" || exit 92\n"
    << "umask 077\n"
    // put PATH MODE [SHA256]: stdin into PATH; with SHA256, stdin is gzip data that must unpack
    // to a file with that hash.
    << R"sh(put() {
  t="$1.tmp.$$"
  mkdir -p "$(dirname "$1")" &&
    if [ -z "${3:-}" ]; then cat >"$t"; else
      gzip -dc >"$t" && h=$(sha256sum <"$t") && [ "${h%% *}" = "$3" ]; fi &&
    chmod "$2" "$t" && mv -f "$t" "$1" ||
    { rm -f "$t"; echo "cannot write $1${3:+ (unpacking its gzip data failed or did not give sha256 $3)}" >&2
      exit 1; }
}
)sh";
  for (const auto& f : items) {
    if (f.from_stdin) {
      s << "put " << ShellQuote(f.path) << " " << f.mode;
      if (!f.gunzip_sha256.empty()) s << " " << ShellQuote(f.gunzip_sha256);
      s << "\n";
    } else {
      s << "printf '%s' " << ShellQuote(std::string(f.data)) << " | put " << ShellQuote(f.path)
        << " " << f.mode << "\n";
    }
  }
  return s.str();
}

std::string StartScript(const std::string& remote_dir, AgentMode mode) {
  const long start_ticks = limits::kAgentStartTimeout / kPollTick;
  std::ostringstream s;
  s << Prelude(remote_dir) << "enter || { echo \"no agent directory $D\" >&2; exit 92; }\n"
    << "MODE=" << ModeWord(mode) << "\n"
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
current_pid() { if [ "$MODE" = supervise ]; then pid_in herdlet.pid; else unit_pid; fi; }
stop_all
if [ "$MODE" = supervise ]; then
)sh"
    << "  nohup setsid /bin/sh \"$DIR/bin/herdlet-supervise\" --backoff-initial "
    << WholeSeconds(limits::kAgentRestartBackoffInitial) << " --backoff-max "
    << WholeSeconds(limits::kAgentRestartBackoffMax) << " --stable-after "
    << WholeSeconds(limits::kAgentStableAfter)
    << " \"$DIR/bin/herdlet\" \"$DIR/herdlet.yaml\" </dev/null >>herdlet.log 2>&1 &\n"
    << R"sh(else
  # A user unit must run without a login session.
  if [ "$MODE" = user ]; then loginctl enable-linger "$(id -un)" >/dev/null 2>&1 || true; fi
  sctl daemon-reload || fail_start "systemctl daemon-reload failed"
  sctl enable herdlet.service >/dev/null 2>&1 || fail_start "systemctl enable herdlet.service failed"
  sctl restart herdlet.service || fail_start "systemctl restart herdlet.service failed"
fi
n=0
while :; do
  HP=$(current_pid)
  if [ "$HP" != 0 ]; then break; fi
  n=$((n + 1))
)sh"
    << "  if [ \"$n\" -gt " << start_ticks << " ]; then fail_start \"herdlet did not start within "
    << Seconds(limits::kAgentStartTimeout) << " s\"; fi\n"
    << "  sleep " << Seconds(kPollTick) << "\n"
    << "done\n"
    << "sleep " << Seconds(limits::kAgentStartSettle) << "\n"
    << R"sh(if ! is_proc "$HP" "$NEEDLE"; then fail_start "herdlet exited right after it started"; fi
echo "pid $HP"
)sh";
  return s.str();
}

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
  std::istringstream in(out);
  std::string line;
  while (std::getline(in, line)) {
    if (!line.starts_with("pid ")) continue;
    try {
      return std::stoi(line.substr(4));
    } catch (const std::exception&) {
      break;
    }
  }
  return Internal("no pid in the output: '" + out + "'");
}

}  // namespace herd::controller
