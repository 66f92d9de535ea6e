// The task spec: SkyPilot task YAML parsed into a typed, validated Task, plus the logic of
// `herd check`. Every user error names its place ("file:line:col: field.path: what to change").
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "controller/task/run_limits.hpp"
#include "herd/v1/common.pb.h"
#include "shared/common/status.hpp"

namespace herd::task {

// resources.job_recovery: what a managed job (`herd jobs launch`) does after a failure. Plain
// `herd launch` does not act on it. SkyPilot's forms: `job_recovery: FAILOVER`,
// `job_recovery: none` or `job_recovery: {strategy: FAILOVER, max_restarts_on_errors: 3,
// recover_on_exit_codes: [33, 34]}` (a single code may be given without the list).
struct JobRecovery {
  // "FAILOVER", "EAGER_NEXT_REGION" or "NONE" (upper case after parsing). The local and ssh
  // providers have one region, so the first two mean: relaunch on replacement nodes of the same
  // provider. NONE: a lost node or a preemption ends the job (FAILED), nothing is relaunched.
  std::string strategy = "FAILOVER";
  // Relaunches after a user error (a rank exited non-zero on healthy nodes); node loss and
  // preemption are recovered unless the strategy is NONE.
  int max_restarts_on_errors = 0;
  // Exit codes (0-255, each once, in the file's order) after which the job is always relaunched,
  // whatever max_restarts_on_errors says; such relaunches do not count against it.
  std::vector<int> recover_on_exit_codes;
};

// What a task asks of each node. Counts are per node, as in SkyPilot.
struct Resources {
  std::optional<double> cpus;  // "4+" -> 4 with cpus_at_least
  bool cpus_at_least = false;
  std::optional<double> memory_gb;
  bool memory_at_least = false;
  std::string accelerator;         // "L4" ("" = none)
  double accelerator_count = 0;    // "L4:4" -> 4, "H100" -> 1, "T4:0.5" -> 0.5
  std::string infra;               // "aws", "aws/us-east-1", "k8s/ctx", "ssh/<pool>", "local"
  std::vector<std::string> ports;  // each "8080" or "10000-10100"
  std::optional<int> disk_size;    // GB
  bool use_spot = false;
  std::string instance_type;  // a cloud's instance type, used as is ("" = chosen from the rest)
  std::optional<JobRecovery> job_recovery;  // absent: FAILOVER with 0 restarts on errors
  // image_id: docker:IMAGE: the container image that setup and run use on every node, without
  // "docker:" ("" = none: on the host). Other image_ids (a cloud's machine image) are noted.
  std::string container_image;
  // Candidates, each already merged with the fields around it (SkyPilot: the fields next to
  // any_of/ordered are defaults that every candidate inherits). At most one of them is non-empty.
  std::vector<Resources> any_of, ordered;
};

// workdir: {url, ref}: a git repository the controller clones (ResolveGitWorkdir) and then syncs
// as the workdir.
struct GitWorkdir {
  std::string url;  // as written, after ${VAR} substitution
  std::string ref;  // a branch, tag or commit; "" = the repository's default branch
};

// A bucket in file_mounts (SkyPilot's storage forms): `/path: s3://bucket/prefix` (COPY of what
// is there) or `/path: {name, source, store, mode, persistent}`.
struct StorageMount {
  std::string bucket;  // the bucket's name (from `name`, or from a bucket URI in `source`)
  std::string prefix;  // a folder inside the bucket ("" = the whole bucket), from s3://b/prefix
  // A local directory (after ${VAR} and ~) whose contents are uploaded into the bucket before the
  // nodes see it; "" = none.
  std::string source;
  std::string store = "s3";    // the only store herd has; the field leaves room for others
  std::string mode = "MOUNT";  // "MOUNT", "COPY" or "MOUNT_CACHED"
  bool persistent = true;      // false: a bucket herd made is deleted when the cluster goes down
  // Given by `name` (not a bucket URI): herd makes the bucket when it does not exist.
  bool create = false;
  bool operator==(const StorageMount&) const = default;
};

struct Task {
  std::string name;
  // Local directory, after ${VAR} substitution and ~ expansion; "" = none. With git_workdir set,
  // empty until ResolveGitWorkdir cloned it.
  std::string workdir;
  std::optional<GitWorkdir> git_workdir;
  int num_nodes = 1;
  Resources resources;
  std::map<std::string, std::string> envs;     // after overrides; all required ones filled
  std::map<std::string, std::string> secrets;  // same, never printed
  // remote -> local, after ${VAR} substitution and ~ expansion
  std::map<std::string, std::string> file_mounts;
  // remote -> bucket, for file_mounts given as buckets; no remote path is in both maps.
  std::map<std::string, StorageMount> storage_mounts;
  std::string setup, run;  // lists joined with "\n"
  // config.herd (hang_timeout, time_limit, signal, grace), then --hang-timeout, --time-limit,
  // --signal, --grace.
  RunLimits run_limits;
  // Fields accepted for SkyPilot compatibility that herd does not act on, and choices herd made
  // for the user (e.g. the first of several accelerators), each "file:line:col: path: note".
  std::vector<std::string> notes;
};

struct ParseOptions {
  std::vector<std::string> env_overrides;     // each "K=V" or "K" (then value from getenv)
  std::vector<std::string> env_files;         // dotenv files: K=V lines, # comments
  std::vector<std::string> secret_overrides;  // same forms as env_overrides, for secrets
  // Local environment lookup; empty means ::getenv. Used for "--env K" and for ${VAR} in
  // file_mounts/workdir when the task's envs do not define VAR.
  std::function<std::optional<std::string>(const std::string&)> getenv;
  // Whether this CLI talks to a team server (`herd api login`): decides how `secrets:` given as a
  // list of references (`- secrets:HF_TOKEN`) is refused when --secret does not give them.
  bool team_server = false;
};

// A file of several YAML documents: SkyPilot's pipeline. An optional first document that holds
// only a header (name, and a job group's placement/execution) names it; every other document is
// a task, run in file order, each after the previous one succeeded.
struct Pipeline {
  std::string name;                // the header's name ("" without one)
  std::string execution;           // the header's execution ("" = one after another)
  std::vector<Task> tasks;         // at least one
  std::vector<std::string> notes;  // the header's notes; each task keeps its own
};

// Every document of the file: a pipeline of one task for an ordinary task file.
Result<Pipeline> ParsePipelineFile(const std::string& path, const ParseOptions& options = {});
Result<Pipeline> ParsePipelineYaml(std::string_view yaml, std::string_view source_name,
                                   const ParseOptions& options = {});

// Clones task.git_workdir (if set) with the system git into a new directory under parent_dir
// (created 0700 when missing) and sets task.workdir to it; the caller removes it when done
// (RemoveGitWorkdir). git runs without a shell, without prompts, its URL and ref after "--" or
// checked not to start with '-'. A clone or checkout that fails is an error naming the URL, the
// ref and git's last line.
Status ResolveGitWorkdir(Task& task, const std::string& parent_dir);
// Removes a directory ResolveGitWorkdir made (nothing when the task has no git workdir).
void RemoveGitWorkdir(const Task& task);

// One task; a file of several tasks (a pipeline) is refused with a message that says so.
Result<Task> ParseTaskFile(const std::string& path, const ParseOptions& options = {});
// source_name is what error messages call the text (usually the file name).
Result<Task> ParseTaskYaml(std::string_view yaml, std::string_view source_name,
                           const ParseOptions& options = {});

// Flag parsers used by the CLI for --gpus L4:4, --cpus 8+, --memory 32+; errors name the flag.
// They set the top-level resources and every any_of/ordered candidate (a flag overrides all).
Status ApplyAcceleratorFlag(std::string_view value, Resources& r);
Status ApplyCpusFlag(std::string_view value, Resources& r);
Status ApplyMemoryFlag(std::string_view value, Resources& r);
// -n/--name NAME: the job's name instead of the task's; a name over the limit names the flag.
Status ApplyNameFlag(std::string_view value, Task& task);
// SkyPilot's launch flags, each overriding the task (and every candidate):
// --use-spot; --instance-type TYPE; --disk-size 256 | 1TB; --ports 8080 (repeatable, replaces
// the task's ports); --region R / --zone Z (AWS: infra becomes aws/R[/Z]; a zone alone names its
// region; a task on another infra is refused); --workdir DIR (an existing local directory).
void ApplyUseSpotFlag(Resources& r);
Status ApplyInstanceTypeFlag(std::string_view value, Resources& r);
// --image-id docker:IMAGE: container_image, for the task and every candidate.
Status ApplyImageIdFlag(std::string_view value, Resources& r);
Status ApplyDiskSizeFlag(std::string_view value, Resources& r);
Status ApplyPortsFlag(const std::vector<std::string>& values, Resources& r);
Status ApplyRegionZoneFlags(std::string_view region, std::string_view zone, Resources& r);
Status ApplyWorkdirFlag(std::string_view value, Task& task);

// The resources herd schedules with: the first ordered/any_of candidate if there are any, else
// the top-level resources.
const Resources& PrimaryResources(const Task& task);

// Bucket mounts as JSON text ({remote: {bucket, prefix, source, store, mode, persistent,
// create}}) and back: the form ToJson and the managed-job store use.
std::string StorageMountsToJson(const std::map<std::string, StorageMount>& mounts);
Result<std::map<std::string, StorageMount>> StorageMountsFromJson(std::string_view text);

// Normalised JSON (boost::json), secrets' values replaced by "<redacted>".
std::string ToJson(const Task& task);
// proto::ResourcesSummary of the task's first resources choice: "2x(gpus=L4:4, cpus=4+)",
// "1x(cpus=0.5)", the text the head shows for it in `herd queue`.
std::string ResourcesSummary(const Task& task);
// Conversion to the wire form. workdir on the node is "~/sky_workdir" when the task has a
// workdir, else "".
herd::v1::TaskSpec ToSpec(const Task& task);

// OK when the task's spec (ToSpec: setup, run, envs and secrets as sent, after --env, --env-file
// and --secret) is within limits::kMaxTaskSpecBytes, so that its submit fits a frame; else an
// error naming source and both sizes. ParseTaskYaml checks it; a caller that changes the task
// afterwards (a command instead of a file) checks again before submitting.
Status CheckSpecSize(const Task& task, std::string_view source);
// OK when `name` is a bucket name S3 accepts (3-63 characters of a-z, 0-9, '.', '-', starting
// and ending with a letter or digit, no "..", not an IPv4 address, no "xn--" prefix nor
// "-s3alias"/"--ol-s3" suffix); else what is wrong, without the place.
Status CheckBucketName(std::string_view name);
// OK when a task's name is within limits::kMaxTaskNameBytes; else "at most N bytes, got M" (the
// parser puts the place before it, ApplyNameFlag the flag).
Status CheckNameSize(std::string_view name);

// `herd check FILE [--env K=V]... [--env-file F]... [-o json]`: prints the normalised task (JSON
// when json=true, else a readable summary) to out; errors and notes to err (a task with neither
// setup nor run is valid, as in SkyPilot, with a note that nothing will run). Returns 0 valid, 2
// not.
// A pipeline is checked task by task, each printed after a "task N of M" line.
int RunCheck(const std::string& path, const ParseOptions& options, bool json, std::ostream& out,
             std::ostream& err);

}  // namespace herd::task
