// Every timeout and limit of herd, in one place. The comments say how they must relate; the
// static_asserts at the bottom check the relations that the code depends on.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>

namespace herd::limits {

using namespace std::chrono_literals;
using Duration = std::chrono::milliseconds;

// ---- Protocol framing -------------------------------------------------------------------------
// Largest protobuf envelope accepted on any websocket (Beast's read_message_max). A bigger frame is
// a protocol error: the peer is dropped.
inline constexpr std::size_t kMaxFrameBytes = 4u << 20;
// Output is sent to the head in chunks of at most this many bytes, so a chunk plus its envelope
// always fits in a frame.
inline constexpr std::size_t kMaxOutputChunkBytes = 256u << 10;
// Log bytes sent to a client per LogData message when replaying run.log from an offset.
inline constexpr std::size_t kLogReplayChunkBytes = 256u << 10;
// A websocket client (an agent, the CLI) masks what it sends through a buffer of this size (Beast's
// write_buffer_bytes, 4 KiB by default): each fill is one TLS write, i.e. a 4 KiB record and a
// socket send for 4 KiB of output, and a record the head must decrypt and handle on its own.
inline constexpr std::size_t kWebsocketWriteBufferBytes = 64u << 10;
// The head's line prefixer (agent/logs/log_merger) holds at most this many bytes of one
// unterminated output line per process; a longer line is cut with a '\n' added. Independent of
// the chunk sizes above: a line may span many output chunks.
inline constexpr std::size_t kMaxLogLineBytes = 1u << 20;
// Bytes queued for one peer before the connection is considered stuck and dropped. A client that
// does not read is dropped; it resubscribes from its offset and loses nothing.
inline constexpr std::size_t kMaxQueuedBytesPerPeer = 256u << 20;
// A client following a job's log with more than this queued gets no more live output; the head
// serves it from run.log (kLogReplayChunkBytes at a time) once its queue is down to a quarter of
// this, checking every kSubscriberCatchUpInterval. Far below kMaxQueuedBytesPerPeer, so that a
// terminal slower than the job's output is not dropped (a few ranks flooding tens of MiB each
// would fill a peer's whole queue).
inline constexpr std::size_t kSubscriberLagBytes = 16u << 20;
inline constexpr Duration kSubscriberCatchUpInterval = 10ms;
// An agent reads its processes' node-local logs further only while less than this is on its way
// to the head (posted to its connection and not yet written): the logs are the buffer, so a job
// printing faster than the head takes output in costs the agent bounded memory, and a heartbeat
// waits behind at most this much output (UvProcessLauncher::SetOutputBacklog).
inline constexpr std::size_t kAgentOutputBacklogBytes = 8u << 20;
// glibc malloc (shared/common/heap.hpp): blocks up to this come from the heap, not a fresh mmap
// each; above every message the agent, the head, the mux and the CLI handle (kMaxFrameBytes).
inline constexpr std::size_t kHeapMmapThreshold = 8u << 20;
// Free memory at the top of the heap kept for reuse, not given back to the kernel. A log flood
// keeps about kSubscriberLagBytes in flight per client; an idle agent's heap stays far below it,
// so keeping this much costs an idle agent nothing.
inline constexpr std::size_t kHeapTrimThreshold = 32u << 20;

// ---- The API server's commands (controller/server: `herd api`) ---------------------------------
// The server runs each command of a remote CLI as a `herd` child process and streams its output
// back in frames (stream_frames.hpp) of at most this many bytes of output each.
inline constexpr std::size_t kApiMaxFrameBytes = 256u << 10;
// A workdir or file mount a remote CLI uploads (a tar archive), each; the listener's body limit
// for upload requests. JSON requests stay within the HTTP layer's own body limit.
inline constexpr std::size_t kApiMaxUploadBytes = 256u << 20;
// A cancelled command (`herd api cancel`, or a client that went away while following) gets
// SIGINT, as Ctrl-C would give it; still running after this, SIGKILL.
inline constexpr Duration kApiCommandCancelGrace = 10s;
// `herd api start` waits this long for the server it started to answer its health check.
inline constexpr Duration kApiServerStartTimeout = 20s;
// `herd api stop` waits this long for the server to exit after SIGTERM, then SIGKILLs it.
inline constexpr Duration kApiServerStopTimeout = 15s;
// A command's stream carries an empty frame when it has printed nothing for this long, so that a
// remote CLI blocked on its stream notices Ctrl-C (and the server a client gone) within it.
inline constexpr Duration kApiStreamHeartbeat = 1s;
// How often `herd api logs --follow` reads a running request's log again.
inline constexpr Duration kApiRequestLogPoll = 200ms;
// Read commands (status, queue, nodes, jobs queue) run in warm workers instead: `herd _serve`
// processes, at most this many per user and kApiWarmWorkersMax in all, each running one command
// at a time and exiting after kApiWarmWorkerIdle without one. A read that finds every worker it
// may use busy waits up to kApiWarmQueueWait for one to be free, then runs as a child after all.
inline constexpr std::size_t kApiWarmWorkersPerUser = 4;
inline constexpr std::size_t kApiWarmWorkersMax = 32;
inline constexpr Duration kApiWarmWorkerIdle = 60s;
inline constexpr Duration kApiWarmQueueWait = 250ms;

// ---- Connections ------------------------------------------------------------------------------
// TCP connect + TLS handshake + websocket upgrade must finish within this.
inline constexpr Duration kHandshakeTimeout = 10s;
// A listener whose accept fails (e.g. out of file descriptors) retries after this, instead of
// spinning; short against kHandshakeTimeout so dialers waiting in the backlog still get in.
inline constexpr Duration kAcceptRetryDelay = 100ms;
// Beast idle timeout with keep-alive pings: a ping goes out after half of it; a peer silent for
// the whole of it is dropped.
inline constexpr Duration kWebsocketIdleTimeout = 12s;
// Agents send a heartbeat this often ...
inline constexpr Duration kHeartbeatInterval = 2s;
// ... and the head marks a node lost after this many missed heartbeats.
inline constexpr int kHeartbeatMissesBeforeLost = 4;
inline constexpr Duration kNodeLostAfter = kHeartbeatInterval * kHeartbeatMissesBeforeLost;
// The head looks for lost nodes this often, so a node is declared lost at most this late.
inline constexpr Duration kNodeCheckInterval = 500ms;
// A user sees the job of a lost node (agent killed with its processes, link down, machine
// stopped) FAILED, naming the node and rank, within this of the node's last message. A mere agent
// restart (its supervisor restarts it after kAgentRestartBackoffInitial) re-registers and adopts
// its processes well before kNodeLostAfter, so it fails nothing.
inline constexpr Duration kNodeLossReportedWithin = 10s;
// A node check that runs this much later than kNodeCheckInterval means the head itself did not
// run (SIGSTOP, a frozen VM, a suspended laptop holding the head): the agents' silence was the
// head's, so every connected node gets a fresh kNodeLostAfter to be heard again instead of being
// declared lost at once. Above any scheduling delay of a loaded machine, under kNodeLostAfter.
inline constexpr Duration kHeadStallAfter = 3s;
// Re-registration after a drop: capped exponential backoff.
inline constexpr Duration kReconnectBackoffInitial = 100ms;
inline constexpr Duration kReconnectBackoffMax = 3s;
// A worker that has not registered yet since it started redials every kReconnectBackoffInitial for
// this long before backing off: a launch starts all agents at once and a worker that came up
// before its head waited up to twice the head's lag (0.1, 0.3, 0.7 s...). At most 30 dials.
inline constexpr Duration kFirstRegisterFastRedialFor = 3s;
// A client (herd logs / exec) that loses its connection while following retries for this long,
// resubscribing from the last offset it printed.
inline constexpr Duration kClientReconnectWindow = 30s;
// A managed job's controller (herd jobs) that has not reached the head for kNodeLostAfter probes
// the head node's sshd, each probe bounded by this. A node whose sshd does not answer either is
// lost (a preempted or dead head machine, a link down as long as a worker's that fails its job):
// the job is recovered then, not after the whole kClientReconnectWindow. A restarting agent
// leaves sshd answering, so it still gets the whole window.
inline constexpr Duration kHeadNodeProbeTimeout = 2s;
static_assert(kNodeLostAfter + kHeadNodeProbeTimeout + kReconnectBackoffMax <
                  kClientReconnectWindow,
              "the head node probe decides before the reconnect window would");
// A client request (submit, queue, cancel) must be answered within this.
inline constexpr Duration kClientRequestTimeout = 30s;
// `herd status` asks the head of every UP cluster, all at once, which of its nodes are lost: a
// head that has not answered within this (connection included) is shown as not answering; status
// never waits longer for it. A warm mux answers in milliseconds and a dial without one in tens of
// them: only a head that is really away (or a forward that needs ssh to renew) misses it.
inline constexpr Duration kStatusHeadTimeout = 3s;
// The per-cluster mux (controller/core/mux.hpp; ssh's ControlPersist for the head connection)
// exits after this long with no command connected.
inline constexpr Duration kMuxIdleExit = 10min;
// A command waits this long for the mux's MuxReady (a spare connection is handed out at once; a
// mux with none dials one first) before dialling the head itself: a hung mux costs less than a
// dial may take (kHandshakeTimeout).
inline constexpr Duration kMuxReadyTimeout = 2s;
// After its last command is gone the mux lingers this long for the websocket closes to go out;
// `herd down` / `herd stop` wait kMuxStopWait for it to exit after SIGTERM, then SIGKILL it.
inline constexpr Duration kMuxCloseLinger = 200ms;
inline constexpr Duration kMuxStopWait = 1s;

// ---- Processes ----------------------------------------------------------------------------------
// Fail fast and cancel: SIGTERM to every process of the job, then SIGKILL after this grace period.
// Must stay well under the 2 s a user waits for the other ranks to die after a failure.
inline constexpr Duration kKillGracePeriod = 1s;
// After SIGKILL, the sweep of escaped processes (setsid children) is repeated this often until
// none is left or kKillSweepTimeout passes.
inline constexpr Duration kKillSweepInterval = 100ms;
inline constexpr Duration kKillSweepTimeout = 5s;
// After a job process exits, its output pipes are read until EOF for at most this long: a daemon it
// left behind with stdout still open must not keep the job running.
inline constexpr Duration kProcessOutputDrainAfterExit = 2s;
// A job process's supervisor (herd-step) reports the job's pid, or why it could not exec it,
// within this; Spawn fails otherwise. Starting one program: far below any client timeout.
inline constexpr Duration kStepStartTimeout = 10s;
// A supervisor reserves this many bytes next to the log at start (written, so the filesystem has
// allocated them) and writes its exit record over them: a full disk never loses the record (and
// with it the reason the job was stopped). A record is a few lines, with one error line that names
// the log's path (up to PATH_MAX).
inline constexpr std::size_t kExitRecordReserveBytes = 8 * 1024;
// A restarted agent that finds the supervisor of a process its predecessor was starting (table
// entry "starting", no registration file yet) waits this long for the supervisor to register
// (write <log>.pid, which it does right after the exec, before it reports "ok"); longer, it is
// killed as unprovable. Short: the agent waits before registering (see the relations below).
inline constexpr Duration kStepRegisterWait = 2s;
// Where the kernel offers no pidfd or inotify (gVisor), the agent checks its supervisors'
// liveness and follows their logs this often (else only on events).
inline constexpr Duration kSupervisorPollInterval = 100ms;
// A worker reads a process's log at most this often while output keeps coming (a line after a
// pause is read at once): a flood is sent in chunks of this much output, not one 4 KiB pty read
// per message. Adds at most this much to a line's latency.
inline constexpr Duration kOutputCoalesce = 5ms;
// Exited processes a worker remembers (persisted with its process table) so that the head can
// still fetch their exit after a reconnect; the oldest jobs' entries are dropped beyond this.
inline constexpr int kMaxExitedProcessesKept = 1000;
// Exit code recorded for a rank that herd killed because another rank failed (as SkyPilot).
inline constexpr int kKilledRankExitCode = 137;
// GPU detection runs `nvidia-smi` when NVML cannot be loaded; a hung driver must not stall the
// agent's start for longer than this (well under kAgentRegisterTimeout).
inline constexpr Duration kGpuProbeCommandTimeout = 5s;

// ---- Scheduling ---------------------------------------------------------------------------------
// CPUs a job takes on each node when its task names none (SkyPilot's default demand).
inline constexpr double kDefaultTaskCpus = 0.5;
// Jobs one queue reply lists at most, the newest; older ones stay in SQLite. The reply holds as
// many of them as fit kMaxQueueReplyBytes and counts the rest (QueueReply.older_left_out): a job's
// record has no static bound (its per-rank lists grow with num_nodes, a store written by an
// older herd may hold any name), so the runtime cut, not a product of limits, keeps the reply
// within a frame. The head reads the records one at a time and stops at the first that does not
// fit: it never holds more than one reply's worth.
inline constexpr int kMaxJobsListed = 1000;
// What a reply's records may take of a frame: the rest is the envelope (version, request_id, the
// reply's tag and length, the left-out count: under 40 bytes).
inline constexpr std::size_t kMaxQueueReplyBytes = kMaxFrameBytes - 4096;
// One job's record as the head sends it (queue, log follow). A record over this (one written by
// an older herd, which bounded no name) has each of its strings cut to kMaxJobRecordTextBytes,
// and, if still over, its per-rank lists (ranks' exits, nodes and GPUs) left out; a record of
// this herd is sent whole unless it is a gang of thousands of nodes (a 10000-node gang with node
// names of 20-odd bytes lists about 1 MB).
inline constexpr std::size_t kMaxJobRecordBytes = 2u << 20;
inline constexpr std::size_t kMaxJobRecordTextBytes = 4096;
// An error message the head sends a client is cut to this (it may quote what a client sent).
inline constexpr std::size_t kMaxErrorMessageBytes = 64u << 10;

// ---- Task files (controller/task: `herd check`, `launch`, `exec`, `jobs launch` alike)
// ------------ A task file (or an --env-file) larger than this is refused before it is read. Real
// task files are a few KB; data belongs in the files a task mounts (file_mounts, workdir). yaml-cpp
// holds about 500 bytes per node written (its node graph; a flow collection's tokens until it
// closes): a file of this size takes at most about 70 MB and 0.4 s to parse, whatever its shape.
inline constexpr std::size_t kMaxTaskFileBytes = 256u << 10;
// What a task file may expand to: the bytes of its scalars plus one per node, each alias counted
// as the whole node it names (anchors inside that node included). yaml-cpp shares an aliased node,
// but everything built from the task (scripts joined from lists, the submitted spec, JSON) copies
// it: a few KB of anchors and aliases would otherwise take gigabytes. Refused at the alias that
// crosses it, during an event walk that holds no node. At least twice the file limit: a node takes
// about a byte of the file at least and a scalar no more bytes than it is written with, so a file
// without aliases is not refused for its expansion.
inline constexpr std::size_t kMaxTaskExpandedBytes = 2 * kMaxTaskFileBytes;
// Alias uses (*name) in one task file: far more than a hand-written task has.
inline constexpr std::size_t kMaxTaskAliasUses = 10000;
// Collections (mappings and lists) open inside one another. A task nests a dozen deep at most
// (any_of candidates, a Kubernetes pod spec under config). Below yaml-cpp 0.7's own guard (a few
// hundred levels, which it reports as "bad file").
inline constexpr int kMaxTaskNestingDepth = 100;
// A task's name (`name:`, --name), in bytes. SkyPilot checks a name's form, not its length; herd
// lists names in every queue reply and names each job's directory on the head "<job id>-<name>",
// one path component of at most NAME_MAX (255) bytes with a job id of up to 19 digits. Far
// above what people name a run (a Kubernetes object name is at most 253, a label 63).
inline constexpr std::size_t kMaxTaskNameBytes = 200;
// num_nodes (and --num-nodes): far above the clusters herd is built for (bench/fleet drives a
// head with a thousand agents).
inline constexpr int kMaxTaskNodes = 10000;
// What a submit leaves of a frame for the rest of its envelope (user, task id), and what the head
// adds when it turns the spec into each node's StartProcess: SKYPILOT_NODE_IPS (an address and a
// newline, at most 40 bytes, per node) and the other SKYPILOT_* variables.
inline constexpr std::size_t kSubmitEnvelopeHeadroom = 512u << 10;
// The largest task spec (setup, run, envs, secrets, name as sent) the CLI submits, measured after
// --env, --env-file and --secret were applied: refused before anything is sent, by `check` too.
inline constexpr std::size_t kMaxTaskSpecBytes = kMaxFrameBytes - kSubmitEnvelopeHeadroom;

// ---- SQLite -------------------------------------------------------------------------------------
// Wait for another process's write lock (two herd commands on one cluster) before failing.
inline constexpr Duration kSqliteBusyTimeout = 5s;
// A `herd` command holds its cluster's lock (controller/state/cluster_lock) for the whole command;
// a second command on the same cluster waits this long, then fails naming the holder. Long enough
// to sit out a status/exec/queue of another terminal, short enough that a launch stuck behind a
// launch that is provisioning gives an answer. Far above kSqliteBusyTimeout: the store's writes are
// single statements, the lock covers whole commands.
inline constexpr Duration kClusterLockWait = 120s;
// flock(2) has no timed wait: the waiter retries this often.
inline constexpr Duration kClusterLockPollInterval = 50ms;

// ---- SSH and bootstrap (controller) -------------------------------------------------------------
inline constexpr Duration kSshConnectTimeout = 10s;
inline constexpr int kSshServerAliveInterval = 5;  // seconds, ssh -o ServerAliveInterval
inline constexpr int kSshServerAliveCountMax = 3;
inline constexpr int kSshControlPersistSeconds = 300;
// Waiting for a new machine: probe the SSH banner, then `ssh true`, with backoff, for at most this.
inline constexpr Duration kSshWaitTotal = 120s;
inline constexpr Duration kSshProbeBackoffInitial = 200ms;
inline constexpr Duration kSshProbeBackoffMax = 5s;
// Parallel SSH fan-out: at most this many nodes at once, and never more than a quarter of the
// process's file-descriptor limit divided by the descriptors one ssh child uses.
inline constexpr int kSshMaxParallel = 32;
inline constexpr int kFdsPerSshChild = 8;
// The agent must register with the head within this after it was (re)started.
inline constexpr Duration kAgentRegisterTimeout = 60s;
// How often a launch asks the head how many agents registered while it waits for them.
inline constexpr Duration kAgentRegisterPoll = 200ms;
// One `ssh true` readiness probe (or `ssh -O` control command): TCP connect (kSshConnectTimeout)
// plus key exchange and authentication, so a little more than the connect timeout.
inline constexpr Duration kSshProbeCommandTimeout = kSshConnectTimeout + 10s;
// The head's port-forward is kept across commands (controller/ssh/kept_forward); renewing it takes
// at most one `ssh true`, one `ssh -O cancel` and three `ssh -O forward` tries, each bounded by
// kSshProbeCommandTimeout. A second command waits for a renewal in progress at most this long.
inline constexpr Duration kKeptForwardLockWait = 5 * kSshProbeCommandTimeout + 5s;
static_assert(kKeptForwardLockWait > 5 * kSshProbeCommandTimeout);
// A subprocess (ssh, rsync, ip) keeps at most this much of stdout and of stderr in memory; the rest
// is dropped and the cut is marked. Large outputs (logs) travel through files, never this way.
inline constexpr std::size_t kMaxProcessOutputBytes = 64u << 20;
// After a subprocess exited, its pipes are drained for at most this long: a background child that
// inherited them (a process started with `&` over ssh) must not hold the caller.
inline constexpr Duration kProcessOutputDrainGrace = 500ms;

// ---- Agent install and supervision (controller/bootstrap, packaging/herdlet-supervise) ---------
// One remote bootstrap step over ssh (probe, start, stop) must finish within this.
inline constexpr Duration kBootstrapCommandTimeout = 60s;
// Uploading one file to a node (the agent binary is ~20 MB stripped) must finish within this.
inline constexpr Duration kBootstrapUploadTimeout = 300s;
// Stopping an agent: SIGTERM to the supervisor (or herdlet), SIGKILL after this.
inline constexpr Duration kAgentStopTimeout = 10s;
// An agent stopping on SIGTERM tells its head it is leaving (agent.proto Leaving) and waits at most
// this for the message and the websocket close to go out: a head that is going away too (herd
// stop / down stop every agent at once) or a dead link costs a stop no more than this.
inline constexpr Duration kAgentLeaveTimeout = 1s;
// The reason an agent gives for leaving is kept (and shown by `herd nodes`) up to this many bytes:
// a few words, never a node's share of a NodesReply frame.
inline constexpr std::size_t kMaxLeaveReasonBytes = 256;
// A (re)started herdlet must report itself running (its pid in its ready file, written once its
// config, certificates and listener are in place) within this; one that exits before is reported
// with the tail of its log instead of being left to the supervisor's backoff ...
inline constexpr Duration kAgentStartTimeout = 20s;
// ... for which the start script looks this often where systemd started it: shorter than the
// first restart delay, so the dead process is seen before it is replaced. Under herdlet-supervise
// nothing is polled: herdlet reports through `--ready-fd` and exits by itself (SIGALRM) if not
// running within kAgentStartTimeout.
inline constexpr Duration kAgentStartPoll = 50ms;
// The supervisor (and systemd's RestartSec) restarts a herdlet that exited non-zero after a delay
// that starts here and doubles up to the max; it is reset once herdlet ran for kAgentStableAfter.
inline constexpr Duration kAgentRestartBackoffInitial = 1s;
inline constexpr Duration kAgentRestartBackoffMax = 30s;
inline constexpr Duration kAgentStableAfter = 60s;

// ---- Local provider (network namespaces as nodes) ----------------------------------------------
// A local helper command (`ip`) must finish within this.
inline constexpr Duration kLocalCommandTimeout = 30s;
// A node's freshly started sshd must be listening within this (well under kSshWaitTotal) ...
inline constexpr Duration kLocalNodeStartTimeout = 15s;
// ... which the provider checks this often (sshd's PidFile appearing: a stat and a read, no
// connection, so polling often is cheap and a ready sshd is seen at once).
inline constexpr Duration kLocalSshdListenPoll = 5ms;
// Nodes in one local cluster: one /24 per cluster, .254 is the controller's side.
inline constexpr int kLocalMaxNodes = 200;

// ---- AWS provider (controller/provider/aws_provider, ec2_client) -----------------------------
// One EC2 API call (connect + TLS + answer) must finish within this; connecting alone within the
// second. The whole provision is bounded by the waits below, not by a sum of calls.
inline constexpr Duration kAwsHttpTimeout = 30s;
inline constexpr Duration kAwsHttpConnectTimeout = 10s;
// DescribeInstances is polled this often while instances start, stop or terminate ...
inline constexpr Duration kAwsPollInterval = 2s;
// ... until they are running (RunInstances/StartInstances: EC2 takes ~10-60 s) ...
inline constexpr Duration kAwsWaitRunning = 300s;
// ... stopped (a GPU instance may take minutes to stop) or terminated (down waits for it, since
// the security group cannot be deleted while an instance uses it).
inline constexpr Duration kAwsWaitStopped = 600s;
// After running, sshd on a fresh instance answers its banner within this (cloud-init on a GPU
// AMI can take a few minutes); kSshWaitTotal then covers the login itself.
inline constexpr Duration kAwsWaitSsh = 300s;

// ---- Managed jobs (controller/jobs, controller/core/managed_controller; `herd jobs`) ----------
// The largest resources.job_recovery.max_restarts_on_errors a task may ask for.
inline constexpr int kMaxRestartsOnErrors = 1000;
// A managed job's controller provisions its cluster up to this many times in a row before the
// job ends FAILED_NO_RESOURCE ...
inline constexpr int kManagedLaunchAttempts = 3;
// ... waiting this long between two tries (capacity may come back; a local node's namespace is
// gone by then).
inline constexpr Duration kManagedLaunchRetryWait = 5s;
// While the controller follows its cluster job it looks at the job table for a cancel request
// this often (besides the SIGTERM `herd jobs cancel` sends it).
inline constexpr Duration kManagedCancelPoll = 1s;
// `herd jobs logs` re-reads the attempt's local log copy and the job's row this often.
inline constexpr Duration kManagedLogsPoll = 300ms;
// A job whose controller has not recorded its pid this long after the job was made is judged
// FAILED_CONTROLLER by `herd jobs queue` (the CLI spawns it and records the pid at once).
inline constexpr Duration kManagedControllerStartGrace = 30s;
// `herd jobs cancel` waits this long for the controller to reach CANCELLED (it cancels the cluster
// job and tears the cluster down: a few seconds locally, minutes on a cloud); past it, the
// command returns and the controller carries on.
inline constexpr Duration kManagedCancelWait = 180s;

// ---- API server (controller/server: `herd api`; its database, controller/server/store) ---------
// Connecting to a PostgreSQL database gives up after this (libpq's connect_timeout, whole seconds).
inline constexpr Duration kApiDbConnectTimeout = 10s;
// One statement on PostgreSQL (statement_timeout of each connection), waits for row locks and the
// schema migration lock included; past it the statement fails instead of hanging a request.
inline constexpr Duration kApiDbStatementTimeout = 15s;
// A serializable transaction that lost a conflict to another server's is run again up to this
// many times in all before its request fails as Unavailable.
inline constexpr int kApiDbTransactionAttempts = 20;
// An API token's explicit expiry lies at most this far ahead (0 means never expires); further is
// refused as a mistake of units (seconds or microseconds given for milliseconds).
inline constexpr Duration kApiTokenMaxLifetime = std::chrono::hours(24 * 366 * 5);
// Rows a request or audit listing returns when its caller names no limit, and at most.
inline constexpr int kApiListDefaultLimit = 100;
inline constexpr int kApiListMaxLimit = 10000;
// User, cluster and managed-job names of the API store and its requests: at most this many
// characters (a DNS label's length).
inline constexpr std::size_t kApiMaxNameBytes = 63;
// A request's verb, target and message, an audit entry's fields: longer text is cut to this.
inline constexpr std::size_t kApiMaxTextBytes = 4096;
// One sealed secret's plaintext (an API key, a token): larger is refused.
inline constexpr std::size_t kApiMaxSecretBytes = 64u << 10;
// A managed job's controller lease (two servers on one database: exactly one runs each job's
// controller) lasts this long unless renewed; its holder renews it every kApiLeaseRenewInterval.
// A holder that cannot renew for a whole TTL (crashed, cut off) loses it to another server.
inline constexpr Duration kApiLeaseTtl = 30s;
inline constexpr Duration kApiLeaseRenewInterval = 10s;
// The longest TTL a caller may ask for: a dead holder's jobs wait at most this for a new one.
inline constexpr Duration kApiLeaseMaxTtl = 600s;

// ---- API server (controller/server/http: the HTTPS listener of `herd api` and its client) ------
// The request line and headers of one request; more is refused with 431.
inline constexpr std::size_t kApiMaxHeaderBytes = 16u << 10;
// The body of one request (JSON); a larger Content-Length is refused with 413 before the body is
// read, a chunked body when it passes this. Requests carry names and small task specs, never files.
inline constexpr std::size_t kApiMaxBodyBytes = 1u << 20;
// TCP accept to the end of the TLS handshake.
inline constexpr Duration kApiHandshakeTimeout = 10s;
// The first byte of a request to its last: a slow sender is dropped.
inline constexpr Duration kApiRequestReadTimeout = 30s;
// A kept-alive connection with no request in progress is closed after this. Longer than a CLI
// command's pause between two calls, short enough that idle CLIs do not pile up connections.
inline constexpr Duration kApiIdleTimeout = 60s;
// One write of a response (or of a piece of a stream) to a client that stopped reading.
inline constexpr Duration kApiWriteTimeout = 30s;
// After the last response of a connection (an error such as 413, or "Connection: close") the
// server stops sending and reads, discarding, for up to this long before it closes the socket: a
// close with unread data resets the connection, and the client could lose the response.
inline constexpr Duration kApiCloseLinger = 1s;
// Open connections at once; more get 503 and are closed. Up to as many again are answered so;
// past that a connection is closed at once.
inline constexpr std::size_t kApiMaxConnections = 1024;
// Bytes of a streamed response (log following) queued and not yet written: past this the client
// is not reading and is dropped.
inline constexpr std::size_t kApiMaxStreamQueuedBytes = 8u << 20;
// A response the client reads whole (everything but a stream).
inline constexpr std::size_t kApiMaxResponseBytes = 64u << 20;
// The client's default bound on one call: connect, TLS, request and the whole response (a stream:
// until its headers).
inline constexpr Duration kApiClientTimeout = 60s;
// Once no request has come for this long, the server gives the memory its allocator keeps free
// back to the system (malloc_trim; controller/server/idle_trim.hpp): after a busy period each of
// its threads' arenas holds what it used at the peak, ~20 MB more than an idle server needs. Never
// while requests keep coming (a trim walks every arena under its lock); a client polling less often
// than this costs one trim (milliseconds) per poll.
inline constexpr Duration kApiIdleTrimAfter = 10s;
static_assert(kApiMaxHeaderBytes < kApiMaxBodyBytes && kApiMaxBodyBytes < kApiMaxResponseBytes,
              "a request's headers are small against its body, a body against any response");
static_assert(kApiHandshakeTimeout < kApiClientTimeout &&
                  kApiRequestReadTimeout < kApiClientTimeout,
              "the server gives up on a slow handshake or request before a waiting client does");
static_assert(kApiCloseLinger < kApiHandshakeTimeout && kApiCloseLinger < kApiWriteTimeout,
              "a closing connection lingers briefly against the other bounds");
static_assert(kApiRequestReadTimeout <= kApiIdleTimeout,
              "a connection between requests waits at least as long as one request may take");

// ---- Relations ----------------------------------------------------------------------------------
static_assert(kMaxOutputChunkBytes + 4096 < kMaxFrameBytes, "a chunk and its envelope fit a frame");
static_assert(kAgentOutputBacklogBytes >= 4 * kMaxOutputChunkBytes &&
                  kAgentOutputBacklogBytes * 8 <= kMaxQueuedBytesPerPeer,
              "an agent keeps several chunks in flight and far from being dropped as stuck");
static_assert(kHeapMmapThreshold > kMaxFrameBytes && kHeapTrimThreshold >= kSubscriberLagBytes,
              "every message buffer is reused from the heap");
static_assert(kLogReplayChunkBytes + 4096 < kMaxFrameBytes, "a replay chunk fits a frame");
static_assert(kMaxTaskSpecBytes + kSubmitEnvelopeHeadroom <= kMaxFrameBytes &&
                  kMaxTaskNodes * 40 + (64u << 10) <= kSubmitEnvelopeHeadroom,
              "an accepted task's submit, and each node's StartProcess of it, fit a frame");
static_assert(kMaxTaskFileBytes * 2 <= kMaxTaskExpandedBytes &&
                  kMaxTaskExpandedBytes <= kMaxTaskSpecBytes,
              "a task file without aliases is never refused for its expansion, and a task is "
              "not expanded much past what could be submitted");
static_assert(19 + 1 + kMaxTaskNameBytes <= 255,
              "a job's directory on the head, <job id>-<name>, is one path component (NAME_MAX)");
static_assert(kMaxJobRecordBytes <= kMaxQueueReplyBytes && kMaxQueueReplyBytes < kMaxFrameBytes,
              "a queue reply always lists the newest job, and a job status fits a frame");
static_assert(8 * (kMaxJobRecordTextBytes + 8) + 256 <= kMaxJobRecordBytes &&
                  kMaxJobRecordTextBytes >= 4096 && kMaxTaskNameBytes < kMaxJobRecordTextBytes,
              "a record's strings (seven), cut to their bound, fit a record; a log path "
              "(PATH_MAX) and a name of this herd are never cut");
static_assert(kMaxErrorMessageBytes + 4096 < kMaxFrameBytes, "an error reply fits a frame");
static_assert(kSubscriberLagBytes * 4 <= kMaxQueuedBytesPerPeer &&
                  kSubscriberLagBytes / 4 >= kLogReplayChunkBytes,
              "a lagging client is caught up long before it would be dropped, a chunk at a time");
static_assert(kHeartbeatInterval * 2 < kWebsocketIdleTimeout,
              "heartbeats keep the websocket busy long before its idle timeout");
static_assert(kNodeLostAfter < kWebsocketIdleTimeout + kHeartbeatInterval * 4,
              "a lost node is noticed on the order of the websocket timeout");
static_assert(kNodeLostAfter + kNodeCheckInterval < kNodeLossReportedWithin,
              "a lost node's job is failed within the promised time");
static_assert(kNodeCheckInterval < kHeadStallAfter && kHeadStallAfter < kNodeLostAfter,
              "a stall of the head is told apart from a late timer and from a lost node");
static_assert(kAgentRestartBackoffInitial + kHandshakeTimeout / 4 < kNodeLostAfter,
              "an agent restarted by its supervisor registers again before its node is lost");
static_assert(kAgentRestartBackoffInitial + kStepRegisterWait + kHandshakeTimeout / 4 <
                  kNodeLostAfter,
              "an agent that waits for a starting supervisor still registers before node loss");
static_assert(kFirstRegisterFastRedialFor / kReconnectBackoffInitial <= 30,
              "a worker waiting for its head dials it a bounded number of times");
static_assert(kReconnectBackoffMax < kNodeLostAfter,
              "an agent retries several times before the head gives up on it");
static_assert(kKillGracePeriod < 2s, "other ranks die within 2 s of the first failure");
static_assert(kExitRecordReserveBytes >= 4096 + 512,
              "an exit record whose error names a PATH_MAX path fits its reserve");
static_assert(kMuxReadyTimeout < kHandshakeTimeout, "a hung mux costs less than a dial may");
static_assert(kMuxCloseLinger < kMuxStopWait, "a mux told to stop exits before it is killed");
static_assert(kReconnectBackoffMax < kClientReconnectWindow, "a client retries more than once");
static_assert(kLocalNodeStartTimeout < kSshWaitTotal,
              "a local node starts long before ssh gives up");
static_assert(kSshProbeBackoffMax < kSshWaitTotal, "readiness is probed more than once");
static_assert(kAgentLeaveTimeout * 4 < kAgentStopTimeout,
              "an agent that says it is leaving stops long before it would be killed");
static_assert(kStatusHeadTimeout < kClientRequestTimeout && kStatusHeadTimeout < kHandshakeTimeout,
              "status gives up on a head long before a command would");
static_assert(kAgentStopTimeout + kAgentStartTimeout < kBootstrapCommandTimeout,
              "a restart (stop, start) fits in one bootstrap command");
static_assert(kAgentStartPoll * 4 < kAgentRestartBackoffInitial,
              "a herdlet that dies at start is seen dead before the supervisor replaces it");
static_assert(kAgentRestartBackoffMax < kAgentRegisterTimeout,
              "a crashed agent is back well within the time the head waits for it");
static_assert(kAgentRestartBackoffMax < kAgentStableAfter, "backoff resets only after a calm run");
static_assert(kClusterLockPollInterval * 10 < kClusterLockWait, "a lock waiter retries many times");
static_assert(kAwsHttpConnectTimeout < kAwsHttpTimeout, "connecting is part of one call");
static_assert(kAwsPollInterval * 10 < kAwsWaitRunning && kAwsHttpTimeout < kAwsWaitRunning,
              "instance states are polled many times, and a slow call does not use up the wait");
static_assert(kAwsWaitRunning <= kAwsWaitStopped, "stopping may take longer than starting");
static_assert(kManagedLogsPoll < kManagedCancelPoll && kManagedCancelPoll < kNodeLossReportedWithin,
              "a cancel is seen well before a node loss would be reported");
static_assert(kManagedCancelPoll * 10 < kManagedCancelWait && kClusterLockWait < kManagedCancelWait,
              "cancel waits for the controller's own checks and for a down that waits on the lock");
static_assert(kSqliteBusyTimeout < kClusterLockWait,
              "store writes are short against whole commands");

static_assert(kApiLeaseRenewInterval + kApiDbStatementTimeout < kApiLeaseTtl,
              "a holder whose renewal hung for a whole statement timeout renews again in time");
static_assert(kApiLeaseTtl <= kApiLeaseMaxTtl && kSqliteBusyTimeout < kApiDbStatementTimeout,
              "the default lease is allowed; SQLite's lock wait is shorter than a PG statement's");
static_assert(kApiWarmWorkersPerUser <= kApiWarmWorkersMax &&
                  kApiWarmQueueWait < kApiStreamHeartbeat,
              "a user's workers fit the total; a queued read starts before its stream's first "
              "heartbeat is due");
static_assert(kApiDbConnectTimeout >= 1s, "libpq's connect_timeout counts whole seconds");
static_assert(kApiListDefaultLimit <= kApiListMaxLimit, "the default listing is allowed");

// ---- SkyPilot YAML as written (controller/task: sizes, git workdirs) ---------------------------
// The largest resources.disk_size, in GB, after units (1PB is 1048576 GB): past any disk a cloud
// sells, small enough for an int.
inline constexpr int kMaxTaskDiskSizeGb = 1 << 21;
// A git workdir's clone and checkout (`workdir: {url, ref}`), each; the controller then syncs it
// as any workdir. A remote repository may be large, a local one takes well under a second.
inline constexpr std::chrono::seconds kGitWorkdirCloneTimeout{600};
// The last bytes of git's stderr kept for the error that names a failed clone.
inline constexpr std::size_t kGitWorkdirErrorBytes = 4096;
static_assert(kMaxTaskDiskSizeGb >= 1 << 20, "1PB, SkyPilot's largest unit, is a valid disk size");

// ---- Optimizer and catalogs (controller/optimizer; `herd launch` planning, `herd gpus list`) ---
// A catalog CSV (the built-in AWS one or $HERD_HOME/catalogs/aws.csv) larger than this, or with
// more rows, is refused with its size: the built-in one is ~56 KiB and ~1,300 rows, and a
// regenerated full AWS price list (every family, every region and zone) stays well under both.
inline constexpr std::size_t kMaxCatalogBytes = 16u << 20;
inline constexpr std::size_t kMaxCatalogRows = 200000;
// A catalog line longer than this is an error naming file:line (no real row is near it).
inline constexpr std::size_t kMaxCatalogLineBytes = 4096;
// The "Considered resources" table shows at most this many rows (the chosen one first); the rest
// are counted in a line under it. Planning itself considers every candidate.
inline constexpr std::size_t kMaxConsideredRows = 12;
// Accelerator alternatives of one task (`{A100:8, H100:8}`, lists, any_of/ordered): more is
// refused at parse time by the optimizer with the count.
inline constexpr std::size_t kMaxResourceAlternatives = 64;
// The largest root disk (disk_size, GB) an AWS candidate takes: EBS gp3's 16 TiB volume limit.
inline constexpr int kMaxAwsDiskGb = 16384;
// The target for planning one task over every AWS region and zone of the built-in catalog
// (bench/optimizer_bench checks it; SkyPilot's optimizer table takes seconds, skypilot#3159).
inline constexpr Duration kPlanBudget = 50ms;

static_assert(kMaxCatalogLineBytes * kMaxCatalogRows >= kMaxCatalogBytes,
              "a catalog within the byte limit is never refused for its line count alone");
static_assert(kMaxConsideredRows >= 4, "the table shows at least one row per kind of infra");

// ---- Supervised managed jobs (controller/server/job_keeper; a team server's keeper) -----------
// Each unfinished managed job's controller runs on exactly one server, the holder of the job's
// lease row ("managed/<user>/<id>") in the server database. The lease lasts this long unless
// renewed ...
inline constexpr Duration kManagedLeaseTtl = 8s;
// ... and the keeper renews the leases it holds, takes free or expired ones and (re)starts
// controllers once every this (sooner after a launch).
inline constexpr Duration kManagedKeeperTick = 2s;
// A keeper that could not renew a lease for kManagedLeaseTtl - this kills the job's controller
// (its lease may be gone soon, and another server may start one): two servers' clocks must agree
// within this margin.
inline constexpr Duration kManagedLeaseFenceMargin = 2s;
// A server killed with SIGKILL: another one runs its jobs' controllers within this (the issue's
// promise) — the lease expires, then the next tick of a keeper takes it and starts a controller.
inline constexpr Duration kManagedTakeoverWithin = 15s;
// What the takeover budget leaves a controller process to start and record itself.
inline constexpr Duration kManagedControllerStartBudget = 3s;
// A controller that exited while its job is unfinished is started again after this ...
inline constexpr Duration kManagedControllerRestartWait = 2s;
// ... and a job whose controller exited this many times in a row, each within
// kManagedControllerQuickExit of its start, is FAILED_CONTROLLER (a controller that cannot run).
inline constexpr int kManagedControllerMaxQuickExits = 5;
inline constexpr Duration kManagedControllerQuickExit = 30s;
// A resumed controller (its job had an attempt running) keeps trying to reach the attempt's head
// this long before the attempt is declared lost: a head that does not answer is probed (its
// sshd) and waited for, as a following controller waits for a head that dropped.
inline constexpr Duration kManagedResumeHeadWait = kClientReconnectWindow;
// ... trying again this often.
inline constexpr Duration kManagedResumeRetry = 2s;
static_assert(kManagedKeeperTick * 3 <= kManagedLeaseTtl,
              "a holder renews several times per lease: one slow renewal loses nothing");
static_assert(kManagedKeeperTick + kManagedLeaseFenceMargin < kManagedLeaseTtl,
              "a holder that cannot renew fences itself before its lease expires");
static_assert(kManagedLeaseTtl + kManagedKeeperTick + kManagedControllerStartBudget <=
                  kManagedTakeoverWithin,
              "takeover: the lease expires, the next keeper tick takes it, a controller starts");
static_assert(kManagedLeaseTtl <= kApiLeaseMaxTtl, "the store accepts the lease's TTL");
static_assert(kManagedControllerRestartWait < kManagedControllerQuickExit,
              "restarts are spaced, and a quick exit is longer than the wait");
static_assert(
    kManagedResumeRetry * 5 < kManagedResumeHeadWait && kNodeLostAfter < kManagedResumeHeadWait,
    "a resumed controller asks the head several times, and longer than a node loss takes");

// ---- Job arrays and dependencies (agent/sched/job_gate, `herd exec --array/--after`) ----------
// Jobs one array may hold (Slurm's default MaxArraySize is 1001): at most one queue reply's
// worth, so `herd queue` can always list a whole array.
inline constexpr int kMaxArrayJobs = 1000;
// The largest index an array may name (Slurm: MaxArraySize - 1 by default; herd's indices are
// not bounded by the array's size, so "0-999999:1000" is a 1000-job array).
inline constexpr int kMaxArrayIndex = 999999;
// Jobs one submit may name in --after / --after-ok.
inline constexpr int kMaxJobDependencies = 100;
static_assert(kMaxArrayJobs <= kMaxJobsListed, "a whole array fits one queue listing");
static_assert(kMaxArrayJobs <= kMaxArrayIndex + 1, "an array's indices are distinct");

// ---- Node health (agent/gpu/health_watch, `herd nodes --drain/--undrain`) -------------------
// How often an agent asks NVML about its GPUs' faults (XID events, uncorrectable ECC errors, a
// GPU fallen off the bus). Cheap calls; a fault drains the node within this (plus a message).
inline constexpr Duration kGpuHealthPollInterval = 5s;
// The agent config's health_check command (Slurm's HealthCheckProgram): run this often unless
// the config says otherwise (health_check.interval), never more often than the minimum ...
inline constexpr Duration kHealthCheckDefaultInterval = 60s;
inline constexpr Duration kHealthCheckMinInterval = 1s;
// ... and killed (and counted as failed) when it runs longer than this.
inline constexpr Duration kHealthCheckTimeout = 30s;
// What of a health check's output goes into the drain reason, and a drain reason at most.
inline constexpr std::size_t kMaxDrainReasonBytes = 512;
static_assert(kHealthCheckTimeout < kHealthCheckDefaultInterval,
              "a check ends before the next one is due");
static_assert(kGpuHealthPollInterval < kNodeLostAfter,
              "a faulty GPU drains its node before silence would call it lost");

// ---- Failover (controller/optimizer/failover; `herd launch`, `-r`, managed jobs) -------------
// One pass over a plan's candidates tries at most this many (a CPU task has a candidate per
// instance type and region; each attempt creates and removes a key pair and a security group).
inline constexpr int kMaxFailoverAttempts = 24;
// `-r/--retry-until-up`: once every candidate of a pass failed on capacity or quota, the next pass
// starts after this wait, doubled after each pass up to the maximum (SkyPilot's backoff).
inline constexpr Duration kRetryUntilUpBackoffInitial = 5s;
inline constexpr Duration kRetryUntilUpBackoffMax = 300s;
static_assert(kRetryUntilUpBackoffInitial * 4 <= kRetryUntilUpBackoffMax,
              "the backoff doubles a few times before it stays at its maximum");
static_assert(kManagedLaunchRetryWait <= kRetryUntilUpBackoffMax,
              "a managed job's retry waits no longer than a user's -r");

// ---- Slurm as infra (controller/provider/slurm_*) -----------------------------------------------
// Each command herd runs on a Slurm login node over SSH (sinfo, sbatch, squeue, sbcast, scancel):
// the SSH connect (kSshConnectTimeout) plus the Slurm command itself.
inline constexpr Duration kSlurmCommandTimeout = kSshConnectTimeout + 30s;
// A submitted allocation must be RUNNING on every node within this; one still PENDING then is
// cancelled (scancel) and the launch fails with squeue's reason.
inline constexpr Duration kSlurmAllocationWait = 300s;
// How often squeue is asked while waiting for the allocation to start, or to end after scancel.
inline constexpr Duration kSlurmPoll = 1s;
// The allocation's batch script waits this long on each node for the agent's files (sbcast by the
// controller once the allocation runs) and otherwise ends, releasing the nodes: a controller that
// died mid-launch leaves no allocation behind for longer.
inline constexpr Duration kSlurmAgentFilesWait = 600s;
// A launch onto an allocation kept from an earlier one sends the agent's files again (a new
// generation) and stops the earlier herdlets on every node (SIGTERM, jobs keep running): each must
// have exited within this, checked every kSlurmAgentStopPoll; the step then starts the new one.
inline constexpr Duration kSlurmAgentStopWait = 30s;
inline constexpr Duration kSlurmAgentStopPoll = 200ms;
// `herd down`: after scancel, the job must have left squeue within this.
inline constexpr Duration kSlurmCancelWait = 120s;
// `herd status`: the squeue of a Slurm cluster, leaving the rest of kStatusHeadTimeout to its head.
inline constexpr Duration kSlurmStatusQueryTimeout = 2s;
static_assert(kSlurmStatusQueryTimeout < kStatusHeadTimeout,
              "status asks squeue and the head within the head's budget");
static_assert(kSlurmAgentStopPoll * 10 <= kSlurmAgentStopWait,
              "an earlier herdlet is looked for several times before the launch gives up");
static_assert(kSlurmAllocationWait < kSlurmAgentFilesWait,
              "a batch script outlives the controller's wait for its start");
static_assert(kSlurmPoll * 10 <= kSlurmCancelWait && kSlurmPoll * 10 <= kSlurmAllocationWait,
              "several squeue polls fit in each wait");

// ---- Graceful stops and hung ranks (agent/head/job_limits, agent/job/hang_watch) ---------------
// `herd cancel` (and a managed job's recovery, a --time-limit's end) sends SIGTERM to every
// process of the job and SIGKILL to what is left after this grace period (`--grace`), as Slurm's
// KillWait (30 s). Fail fast between ranks keeps kKillGracePeriod: a failed gang needs no save.
inline constexpr Duration kDefaultStopGrace = 30s;
// The longest grace a command may ask for; more is refused at submit / cancel.
inline constexpr Duration kMaxStopGrace = 1h;
// `--signal SIG@SECONDS` without @SECONDS sends SIG this long before the time limit (Slurm's 60).
inline constexpr Duration kDefaultLimitSignalBefore = 60s;
// The longest --time-limit (and hang timeout) a task may set: 365 days.
inline constexpr Duration kMaxTimeLimit = std::chrono::hours(24 * 365);
// A rank with no output and no CPU time for its hang timeout is hung; each agent samples its
// ranks' progress (CPU time of the rank's processes, output bytes) every this.
inline constexpr Duration kHangSampleInterval = 1s;
// A sample counts as progress when the rank used at least this share of one CPU (in percent) over
// it: a launcher that wakes now and then to poll its workers (torchrun's agent, every 5 s, for a
// few ms) is not progress; a rank computing is.
inline constexpr int kHangBusyCpuPercent = 2;
// A capture of stacks (a hang, `herd stack`) waits this long per process for Python's
// faulthandler to write its dump after SIGUSR2 ...
inline constexpr Duration kPythonStackDumpWait = 2s;
// ... and for a native stack tool (eu-stack, gdb) on one process at most this long ...
inline constexpr Duration kNativeStackTimeout = 10s;
// ... and the head waits this long for every node's report before it writes what it has.
inline constexpr Duration kStackCaptureTimeout = 30s;
// At most this many bytes of stacks per rank (all its processes) go to the head in one report (a
// dump of thousands of threads is cut, with a line saying so).
inline constexpr std::size_t kMaxStackReportBytes = 1u << 20;
static_assert(kDefaultStopGrace <= kMaxStopGrace, "the default grace is one a user may ask for");
static_assert(kDefaultLimitSignalBefore < kMaxTimeLimit, "the default signal time is a valid one");
static_assert(kPythonStackDumpWait + kNativeStackTimeout < kStackCaptureTimeout,
              "an agent's report (dump wait, then one native tool) reaches the head in time");
static_assert(kMaxStackReportBytes + 4096 <= kMaxFrameBytes,
              "one rank's stacks fit a report frame");
static_assert(kHangSampleInterval * 10 <= 10s, "a hang is seen within a second of its timeout");

// ---- the web dashboard (controller/server/dashboard)
// A one-time login code from `herd dashboard` is for the browser opened right after: short, so a
// code left in a terminal's scroll-back or a browser's history is worthless soon.
inline constexpr Duration kDashboardLoginCodeTtl = 120s;
// A browser session (its HttpOnly cookie) lasts this long unless `herd dashboard --session`
// asks for less; never longer than the tokens the server hands out.
inline constexpr Duration kDashboardSessionTtl = std::chrono::hours(12);
inline constexpr Duration kDashboardSessionMaxTtl = std::chrono::hours(24 * 7);
// Sessions and unredeemed codes kept in memory (the oldest go first): a bound, not a quota.
inline constexpr std::size_t kDashboardMaxSessions = 10000;
inline constexpr std::size_t kDashboardMaxLoginCodes = 1000;
// One window of a job's log the page asks for: a 100 MB log is read a window at a time.
inline constexpr std::size_t kDashboardLogWindowBytes = 256u << 10;
// A live log stream (server-sent events) says it is alive this often when the job prints
// nothing, so proxies and the browser keep it open.
inline constexpr Duration kDashboardSsePing = 15s;
static_assert(kDashboardLoginCodeTtl < kDashboardSessionTtl,
              "a code is shorter-lived than its session");
static_assert(kDashboardSessionTtl <= kDashboardSessionMaxTtl, "the default session fits the cap");
static_assert(kDashboardSessionMaxTtl <= kApiTokenMaxLifetime,
              "a session never outlives what a token may");
static_assert(kDashboardLogWindowBytes <= kApiMaxFrameBytes * 4,
              "a window is a few of the frames the server streams a log in");
// GPUs in use over time per cluster (the cluster page's chart): the server's sampler
// (controller/server/gpu_sampler.hpp) records a sample of every user's clusters' GPUs (in use,
// total) every kDashboardGpuSampleInterval, whether or not a page shows them, and the store keeps
// at most one per cluster per interval (several servers on one database included).
inline constexpr Duration kDashboardGpuSampleInterval = 30s;
// What the store keeps: samples younger than kDashboardGpuSampleRetention (of every cluster, one
// that is gone too), and at most kDashboardGpuSamplesPerCluster of each cluster, the oldest
// dropped first; the page gets them all.
inline constexpr Duration kDashboardGpuSampleRetention = std::chrono::hours(24);
inline constexpr std::size_t kDashboardGpuSamplesPerCluster = 2880;
static_assert(kDashboardGpuSampleInterval *
                      static_cast<std::int64_t>(kDashboardGpuSamplesPerCluster) >=
                  kDashboardGpuSampleRetention,
              "the per-cluster cap holds a whole retention window of samples");
static_assert(kDashboardGpuSampleInterval > kStatusHeadTimeout,
              "one sample's question to the heads ends before the next is due");

// ---- the server's GPU sampler (controller/server/gpu_sampler.hpp)
// One pass asks each user with clusters for `herd infra -o json` in turn (each user's heads are
// asked at once, each within kStatusHeadTimeout); a pass ends within kGpuSamplePassTimeout: a user
// not reached by then (a slow head, many users) waits for the next pass, and a user's command
// still running then is interrupted. Passes never overlap.
inline constexpr Duration kGpuSamplePassTimeout = 20s;
static_assert(kGpuSamplePassTimeout > kStatusHeadTimeout * 2,
              "a pass waits for one user's slow heads and still reaches others");
static_assert(kGpuSamplePassTimeout < kDashboardGpuSampleInterval,
              "a pass ends before the next is due");

// ---- Autostop on clouds (agent/head/cloud_autostop, controller/provider/iam_client) -----------
// The head's EC2 call when an aws cluster has been idle long enough (curl --aws-sigv4 with the
// cluster's scoped key): each attempt within kCloudAutostopCallTimeout (connecting within
// kCloudAutostopConnectTimeout), retried kCloudAutostopRetries times kCloudAutostopRetryDelay
// apart on any error (curl --retry-all-errors) ...
inline constexpr Duration kCloudAutostopCallTimeout = 30s;
inline constexpr Duration kCloudAutostopConnectTimeout = 10s;
inline constexpr int kCloudAutostopRetries = 5;
inline constexpr Duration kCloudAutostopRetryDelay = 5s;
// ... and a head that still runs this long after it asked EC2 to stop its own instance (the call
// failed every time, the key was not yet usable, EC2 lost the request) asks again.
inline constexpr Duration kCloudAutostopRefire = 5min;
// IAM's limit on a user name; the per-cluster user is "herd-autostop-<cluster>" when it fits.
inline constexpr std::size_t kIamUserNameMax = 64;
static_assert(kCloudAutostopConnectTimeout < kCloudAutostopCallTimeout,
              "connecting is part of one call");
static_assert((kCloudAutostopCallTimeout + kCloudAutostopRetryDelay) * (kCloudAutostopRetries + 1) <
                  kCloudAutostopRefire,
              "one round of attempts ends before the head asks again");
static_assert(kCloudAutostopRefire > kNodeCheckInterval * 100, "the head's check sees it often");
// Under a team server no key goes to a head: the head only reports its autostop due (it checks
// every kNodeCheckInterval), and the server (controller/server/server_autostop.cpp) runs
// `herd _autostop-sweep` for each of its users this often, which asks their cloud clusters' heads
// (within kStatusHeadTimeout) and stops those that are due. A cluster is stopped at most this
// long (plus its stop) after its idle minutes, well within autostop's one-minute unit. A user's
// sweep still running when the next is due (a stop in progress) is not started again.
inline constexpr Duration kServerAutostopSweepInterval = 15s;
static_assert(kServerAutostopSweepInterval > kStatusHeadTimeout * 2,
              "a sweep's questions to the heads end well before the next sweep");
static_assert(kServerAutostopSweepInterval > kNodeCheckInterval * 10,
              "a head has checked its idle time many times between two sweeps");
static_assert(kServerAutostopSweepInterval < std::chrono::minutes(1),
              "a cluster is stopped within autostop's one-minute unit of being due");

// ---- Containers (agent/container; `image_id: docker:IMAGE`) ------------------------------------
// Checking a node's container runtime (`podman --version`) and each short podman command of the
// node's container (inspect, login, rm) must finish within this ...
inline constexpr Duration kContainerCommandTimeout = 60s;
// ... and starting the node's container for an image, its pull included (an NGC PyTorch image is
// ~10 GB), within this. Ranks of one node that need the same container wait for the one start.
inline constexpr Duration kContainerStartTimeout = std::chrono::minutes(30);
// Removing the node's containers when its agent stops for good (`herd down`): each one gets
// this long to go (`podman rm -f -t 0`: SIGKILL at once, everything in it was the jobs' and is
// already stopped).
inline constexpr Duration kContainerRemoveTimeout = 20s;
static_assert(kContainerCommandTimeout < kContainerStartTimeout,
              "a pull takes longer than a short command");

// ---- Bucket storage (controller/storage: S3 API on the user's side, rclone on the nodes)
// One S3 API request from the controller (HeadBucket, CreateBucket, a page of ListObjectsV2, one
// DeleteObject): an endpoint that does not answer within this is reported as unreachable, naming
// the mount, instead of hanging `launch`.
inline constexpr Duration kS3ConnectTimeout = 5s;
inline constexpr Duration kS3RequestTimeout = 30s;
// Objects deleted per listed page when a bucket is emptied before DeleteBucket (S3's page size).
inline constexpr int kS3ListPageKeys = 1000;
// At most this many bucket mounts per task (SkyPilot sets no bound; each is one rclone process
// per node).
inline constexpr int kMaxStorageMounts = 16;
// `rclone mount --daemon` waits at most this for the FUSE mount to be ready on a node; a mount
// that is not ready by then fails the launch (and is unmounted).
inline constexpr Duration kStorageMountReadyTimeout = 30s;
// MOUNT_CACHED: a file closed on the node is uploaded this long after its last write (rclone's
// --vfs-write-back): checkpoints reach the bucket in the background, at disk speed for the job.
inline constexpr Duration kStorageWriteBack = 1s;
// Before a run with a MOUNT_CACHED mount is reported done, each node waits at most this for
// rclone's write-back queue to drain, polling it every kStorageFlushPoll; past it the run fails
// (its checkpoint is not in the bucket).
inline constexpr Duration kStorageFlushTimeout = 30min;
inline constexpr Duration kStorageFlushPoll = 200ms;
// An upload of `source:` (from the user's machine) or a COPY download on a node: large data, so
// bounded only against a transfer that stalls for good.
inline constexpr Duration kStorageTransferTimeout = 2h;
static_assert(kS3ConnectTimeout < kS3RequestTimeout, "connecting is part of a request");
static_assert(kStorageWriteBack + kStorageFlushPoll < kStorageFlushTimeout,
              "a flush sees at least one upload start");
static_assert(kStorageMountReadyTimeout < kSshWaitTotal,
              "a mount is ready well within one SSH command's wait");
// A cluster's bucket key (controller/storage/node_keys.hpp) that IAM just made or widened is not
// used by S3 at once (IAM is eventually consistent: seconds on AWS): before the nodes mount with
// it, the controller asks for each of the cluster's buckets with it every kNodeKeyPoll until all
// answer, for at most kNodeKeyUsableWait; then the launch fails naming the bucket.
inline constexpr Duration kNodeKeyUsableWait = 60s;
inline constexpr Duration kNodeKeyPoll = 1s;
static_assert(kNodeKeyPoll + kS3RequestTimeout < kNodeKeyUsableWait,
              "a slow answer still leaves room for another ask");

// ---- Spot interruption notices (agent/cloud/spot_notice, tests/integration/fake_ec2.py) --------
// EC2 posts a spot instance's interruption on its instance metadata
// (/latest/meta-data/spot/instance-action) this long before it takes the instance back.
inline constexpr Duration kSpotNoticeLead = 2min;
// A spot node's agent asks the metadata service this often (AWS advises every 5 s) ...
inline constexpr Duration kSpotNoticePoll = 5s;
// ... each ask (an IMDSv2 token when needed, then the GET) bounded by this: the service is on
// the instance's own link and answers in milliseconds, or not at all.
inline constexpr Duration kSpotMetadataTimeout = 2s;
// The IMDSv2 session token is asked for with this lifetime (AWS's longest, 6 h) and asked for
// again a minute before it runs out (or at once when the service refuses it).
inline constexpr Duration kSpotMetadataTokenTtl = std::chrono::hours(6);
inline constexpr Duration kSpotMetadataTokenRenew = kSpotMetadataTokenTtl - 1min;
static_assert(kSpotMetadataTimeout < kSpotNoticePoll, "one ask ends before the next is due");
static_assert(kSpotNoticePoll + kSpotMetadataTimeout + kDefaultStopGrace < kSpotNoticeLead,
              "a notice is seen and the default grace runs out before EC2 takes the node");
static_assert(kSpotMetadataTokenRenew > kSpotNoticePoll * 100, "a token serves many asks");

// ---- Fast node loss (agent/head/node_registry) ---------------------------------------------
// A node whose agent's connection was closed by the other end (its process died: the kernel sent
// FIN or RST) and that has not registered again within this is lost, without waiting out
// kNodeLostAfter: a killed node's job is recovered about three times as soon. A silent link (no
// bytes, the connection still open) keeps the kNodeLostAfter rule, and so does a node whose agent
// said it was stopping (Leaving: a planned restart gets the whole window) and every node after the
// head itself did not run for a while (kHeadStallAfter: agents that dropped the connection then
// redial at their longest backoff). The grace covers an agent started again by its supervisor
// (its first restart delay) and one that redials at once after a dropped connection, each with a
// handshake.
inline constexpr Duration kNodeClosedGrace = 2500ms;
static_assert(kAgentRestartBackoffInitial + kHandshakeTimeout / 8 < kNodeClosedGrace,
              "an agent its supervisor starts again registers within the grace");
static_assert(kReconnectBackoffInitial * 3 + kHandshakeTimeout / 8 + kNodeCheckInterval <
                  kNodeClosedGrace,
              "an agent whose connection dropped while the head runs is back within the grace");
static_assert(kNodeClosedGrace + kNodeCheckInterval < kNodeLostAfter,
              "a closed connection is declared lost before silence would");

}  // namespace herd::limits
