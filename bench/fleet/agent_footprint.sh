#!/usr/bin/env bash
# issue 8 P6: footprint of an idle, registered herdlet worker. Starts a head and one worker from the
# real binaries on loopback (127.0.60.1 and .2, real certificates), waits until the worker
# registered, then reads /proc/<worker>/status and runs `strace -f` on it for SECONDS (default 20).
# Prints RSS, threads, syscalls and wakeups per second; PASS/FAIL against RSS < 10 MB and no wakeups
# beyond the heartbeat (kHeartbeatInterval 2 s; the websocket keep-alive ping every 6 s is counted
# separately). Usage: bench/fleet/agent_footprint.sh [BUILD_DIR] [SECONDS]
# HERDLET=PATH measures another agent binary (e.g. BUILD_DIR/agent/herdlet.upload, the shipped
# one); HERD_FP_NET=A.B.C moves the two loopback addresses off 127.0.60.
set -euo pipefail
build=${1:-$(cd "$(dirname "$0")/../.." && pwd)/build}
secs=${2:-20}
herd=$build/controller/herd
herdlet=${HERDLET:-$build/agent/herdlet}
net=${HERD_FP_NET:-127.0.60}
dir=$(mktemp -d /tmp/hflt-footprint-XXXXXX)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$dir"; }
trap cleanup EXIT
[ -n "${HERD_FP_KEEP_STRACE:-}" ] && trap 'cp "$dir/strace.txt" "$HERD_FP_KEEP_STRACE"; cleanup' EXIT
"$herd" certs init "$dir/certs" --cluster hflt-fp >/dev/null
for n in head worker1; do
  ip=$net.1; [ $n = worker1 ] && ip=$net.2
  "$herd" certs issue "$dir/certs" --node hflt-fp-$n --ip $ip --out "$dir/$n/certs" >/dev/null
  mkdir -p "$dir/$n/home"
done
cat > "$dir/head/herdlet.yaml" <<J
{"role": "head", "cluster": "hflt-fp", "node_id": "hflt-fp-head", "address": "$net.1",
 "listen": "$net.1:0", "port_file": "$dir/head/port", "certs": "$dir/head/certs",
 "state_dir": "$dir/head/state", "cpus": 2}
J
# The head runs from its own copy of the binary, as on a cluster, where it is another machine: pages
# of one file that two processes map are shared, so the worker could not page out (P6, third round)
# the ones the head also maps.
cp "$herdlet" "$dir/herdlet-head"
HOME=$dir/head/home "$dir/herdlet-head" --config "$dir/head/herdlet.yaml" >"$dir/head.log" 2>&1 &
pids+=($!)
for _ in $(seq 200); do [ -s "$dir/head/port" ] && break; sleep 0.05; done
port=$(cat "$dir/head/port")
cat > "$dir/worker1/herdlet.yaml" <<J
{"role": "worker", "cluster": "hflt-fp", "node_id": "hflt-fp-worker1", "address": "$net.2",
 "head": "$net.1:$port", "certs": "$dir/worker1/certs", "state_dir": "$dir/worker1/state",
 "cpus": 2}
J
HOME=$dir/worker1/home "$herdlet" --config "$dir/worker1/herdlet.yaml" >"$dir/worker.log" 2>&1 &
worker=$!
pids+=($worker)
for _ in $(seq 200); do grep -q "registered with head" "$dir/worker.log" && break; sleep 0.05; done
grep -q "registered with head" "$dir/worker.log" || { echo "FAIL worker did not register"; cat "$dir/worker.log"; exit 1; }
sleep 3
rss_kb=$(awk '/^VmRSS/ {print $2}' /proc/$worker/status)
threads=$(awk '/^Threads/ {print $2}' /proc/$worker/status)
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "idle worker: VmRSS $((rss_kb / 1024)).$(( (rss_kb % 1024) * 10 / 1024 )) MB ($rss_kb kB), threads $threads"
grep -E '^(VmRSS|RssAnon|RssFile|VmHWM|Threads)' /proc/$worker/status | tr '\n' ' '; echo
# Of the worker's file-backed pages, those of its own executable, and how much of that file the page
# cache holds at all (fincore; the head runs its own copy, so this is the worker's file alone).
image_kb=$(awk -v exe="$(readlink /proc/$worker/exe)" '/^[0-9a-f]+-/ {m = ($6 == exe)} m && /^Rss:/ {s += $2} END {print s}' /proc/$worker/smaps)
echo "agent executable: $image_kb kB mapped; in the page cache: $(( $(fincore -n -b -o RES "$herdlet") / 1024 )) kB of $(( $(stat -c %s "$herdlet") / 1024 )) kB"
timeout -s INT "$secs" strace -f -tt -p "$worker" -o "$dir/strace.txt" 2>/dev/null || true
# A wakeup = a return from a wait that can sleep (epoll_wait/poll with a timeout other than 0, a
# futex wait, nanosleep), counted once (strace -f splits a wait into "unfinished" and "resumed").
# Asio polls epoll with timeout 0 after running handlers: those return at once and are counted
# apart ("polls"); the first version of this script counted them as wakeups too.
total=$(grep -cvE 'resumed>|unfinished|exited|detached' "$dir/strace.txt" || true)
read -r waits polls < <(perl -ne '
  next if /unfinished/;
  if (/epoll_p?wait|(^|[ >])poll\(|poll resumed/) {
    if (/, (-?\d+)\) += /) { $1 == 0 ? $p++ : $w++; }
  } elsif (/FUTEX_WAIT|futex resumed|nanosleep/) { $w++; }
  END { printf "%d %d\n", $w, $p }' "$dir/strace.txt")
writes=$(grep -cE '(^| )(sendmsg|write|writev|sendto)\(' "$dir/strace.txt" || true)
echo "strace over $secs s: $total syscalls ($(awk "BEGIN{printf \"%.1f\", $total/$secs}")/s), $waits wakeups ($(awk "BEGIN{printf \"%.2f\", $waits/$secs}")/s), $polls non-blocking epoll polls, $writes writes"
echo "syscalls by name:"; sed -E 's/^[0-9]+ +[0-9:.]+ +//; s/\(.*//' "$dir/strace.txt" | grep -vE '^<|^\+\+\+|^---' | sort | uniq -c | sort -rn | head -12
# Per heartbeat: one timer expiry (the send follows without sleeping); per 6 s websocket ping at
# most one more (the pong's arrival, when it does not come with a heartbeat's wakeup).
hb=$(awk "BEGIN{print $secs/2}")
expected=$(awk "BEGIN{print int($secs/2 + $secs/6 + 1)}")
echo "expected at most ~$expected wakeups: heartbeat every 2 s ($hb), websocket keep-alive pong every 6 s"
rc=0
if [ "$rss_kb" -lt 10240 ]; then echo "PASS idle RSS < 10 MB ($rss_kb kB)"; else echo "FAIL idle RSS < 10 MB ($rss_kb kB)"; rc=1; fi
if [ "$waits" -le "$expected" ]; then echo "PASS no wakeups beyond heartbeat + keep-alive ($waits <= $expected)"; else echo "FAIL wakeups beyond heartbeat + keep-alive ($waits > $expected)"; rc=1; fi
exit $rc
