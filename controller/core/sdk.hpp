// The C++ SDK: clusters by name. The CLI (cli.cpp) is a thin layer over these calls, and the
// Python SDK (python/herd) drives the CLI's JSON output.
//
//   herd::task::Task t = ...;                      // controller/task/task.hpp
//   auto r = herd::sdk::Launch(t, {.cluster = "demo"});
//   int code = herd::sdk::TailLogs("demo", r->job_id, {.follow = true});
//   herd::sdk::Down("demo");
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "controller/core/head_client.hpp"
#include "controller/state/cluster_record.hpp"
#include "controller/task/task.hpp"
#include "herd/v1/common.pb.h"
#include "shared/common/status.hpp"

namespace herd::sdk {

using controller::ClusterRecord;
using Task = task::Task;
using Resources = task::Resources;

// Stage reports of long operations ("Provisioning 3 node(s)", "Agents 2/3 ready").
using ProgressFn = std::function<void(const std::string& stage, int done, int total)>;

struct LaunchOptions {
  std::string cluster;
  std::string infra;  // "" (the task's resources.infra, else "local"), "local", "ssh/<pool>"
  int num_nodes = 0;  // 0: the task's num_nodes
  bool no_setup = false;
  ProgressFn progress;
  // A managed job's (herd jobs) SKYPILOT_TASK_ID, the same for every attempt, and this attempt's
  // number; ""/0 for an ordinary launch (the head makes the id, attempt 1).
  std::string task_id;
  int attempt = 0;
};

struct LaunchResult {
  int64_t job_id = 0;  // 0 when the task has nothing to run
  ClusterRecord cluster;
  int agents_uploaded = 0;   // nodes whose herdlet binary was (re)uploaded
  int agents_restarted = 0;  // nodes whose agent was (re)started
  // The connection the job was submitted through, still open: following the job on it saves a
  // second connection. Null when nothing was submitted.
  std::shared_ptr<controller::HeadClient> head;
};

// Provisions (or reuses) the cluster, bootstraps the agents over SSH, syncs workdir and
// file_mounts, runs setup and submits the task. Returns once the job is submitted.
Result<LaunchResult> Launch(const Task& task, const LaunchOptions& options);

struct ExecOptions {
  ProgressFn progress;
};
// Syncs workdir and submits the task's run on an UP cluster (no provisioning, setup or mounts).
Result<LaunchResult> Exec(const std::string& cluster, const Task& task, const ExecOptions& options);

struct TailOptions {
  bool follow = true;
  uint64_t offset = 0;
  controller::HeadClient::StreamCallbacks callbacks;  // on_data defaults to stdout
};
// Streams the job's merged log; returns the last JobInfo seen (ExitCodeForJob gives the code).
Result<herd::v1::JobInfo> TailLogs(const std::string& cluster, int64_t job_id,
                                   const TailOptions& options);

Result<std::vector<herd::v1::JobInfo>> Queue(const std::string& cluster, bool skip_finished);
Result<std::vector<int64_t>> Cancel(const std::string& cluster, const std::vector<int64_t>& jobs,
                                    bool all);
Result<herd::v1::NodesReply> Nodes(const std::string& cluster);

Status Stop(const std::string& cluster, ProgressFn progress = {});
Result<ClusterRecord> Start(const std::string& cluster, ProgressFn progress = {});
Status Down(const std::string& cluster, ProgressFn progress = {});
// After idle_minutes without an active job the head stops (or, with down, tears down) the cluster
// by itself; idle_minutes < 0 cancels. Needs a provider the head node can drive: `local`.
Status SetAutostop(const std::string& cluster, int idle_minutes, bool down);

Result<std::vector<ClusterRecord>> Status();

// What `herd status` shows of an UP cluster besides its record: the nodes its head is without.
struct ClusterHealth {
  bool answered = false;  // the head answered within limits::kStatusHeadTimeout
  std::string error;      // when it did not: why
  // The cluster's nodes that its head reports LOST or STOPPED, or does not know at all, in
  // cluster order, with the word for each ("lost", "stopped", "not registered").
  std::vector<std::pair<std::string, std::string>> down;
};
// Asks the head of every UP cluster of `clusters` at once which nodes it is without, through the
// mux and the kept forward as the other commands do. Each question runs in a process of its own,
// killed at limits::kStatusHeadTimeout: status never waits longer, whatever a head, a mux or an
// ssh renewal of the forward does. Keyed by cluster name; clusters not UP are not asked.
std::map<std::string, ClusterHealth> Health(const std::vector<ClusterRecord>& clusters);
Result<ClusterRecord> GetCluster(const std::string& cluster);

// A client connected to the cluster's head through an SSH port-forward (the ControlMaster of the
// head node), mutual TLS inside it; through the cluster's mux when one runs (mux.hpp), else a
// dial of its own after which it starts a mux (unless start_mux is false: a cluster going away).
Result<std::unique_ptr<controller::HeadClient>> ConnectHead(const ClusterRecord& cluster,
                                                            bool start_mux = true);

// Where the herdlet binary to install comes from: $HERDLET_BINARY, else next to this executable
// (installed layout), else ../agent/herdlet (build tree).
Result<std::string> HerdletBinary();

}  // namespace herd::sdk
