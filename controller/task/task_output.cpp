// The forms a parsed Task is shown or sent in: JSON, the table summary, the wire TaskSpec, and
// `herd check`.
#include <boost/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "controller/task/env_vars.hpp"
#include "controller/task/resource_values.hpp"
#include "controller/task/task.hpp"
#include "shared/common/limits.hpp"
#include "shared/proto/resources_summary.hpp"

namespace herd::task {
namespace {

constexpr std::string_view kRedacted = "<redacted>";
// Where SkyPilot (and herd) put the synced workdir on every node.
constexpr std::string_view kRemoteWorkdir = "~/sky_workdir";

// Whole numbers as JSON integers ("4", not Boost's "4E0"), fractions as doubles.
boost::json::value Number(double v) {
  if (std::floor(v) == v && std::fabs(v) < 1e15) return static_cast<std::int64_t>(v);
  return v;
}

boost::json::value OptionalNumber(const std::optional<double>& v) {
  return v ? Number(*v) : boost::json::value(nullptr);
}

boost::json::object ResourcesJson(const Resources& r) {
  boost::json::object o;
  o["cpus"] = OptionalNumber(r.cpus);
  o["cpus_at_least"] = r.cpus_at_least;
  o["memory_gb"] = OptionalNumber(r.memory_gb);
  o["memory_at_least"] = r.memory_at_least;
  o["accelerator"] =
      r.accelerator.empty() ? boost::json::value(nullptr) : boost::json::value(r.accelerator);
  o["accelerator_count"] = Number(r.accelerator_count);
  o["infra"] = r.infra.empty() ? boost::json::value(nullptr) : boost::json::value(r.infra);
  boost::json::array ports;
  for (const std::string& p : r.ports) ports.emplace_back(p);
  o["ports"] = std::move(ports);
  o["disk_size"] = r.disk_size ? boost::json::value(*r.disk_size) : boost::json::value(nullptr);
  o["use_spot"] = r.use_spot;
  o["instance_type"] =
      r.instance_type.empty() ? boost::json::value(nullptr) : boost::json::value(r.instance_type);
  if (r.job_recovery) {
    boost::json::array codes;
    for (int c : r.job_recovery->recover_on_exit_codes) codes.emplace_back(c);
    o["job_recovery"] = {{"strategy", r.job_recovery->strategy},
                         {"max_restarts_on_errors", r.job_recovery->max_restarts_on_errors},
                         {"recover_on_exit_codes", std::move(codes)}};
  }
  boost::json::array any_of, ordered;
  for (const Resources& c : r.any_of) any_of.emplace_back(ResourcesJson(c));
  for (const Resources& c : r.ordered) ordered.emplace_back(ResourcesJson(c));
  o["any_of"] = std::move(any_of);
  o["ordered"] = std::move(ordered);
  return o;
}

boost::json::object StorageMountsJson(const std::map<std::string, StorageMount>& mounts) {
  boost::json::object o;
  for (const auto& [remote, m] : mounts) {
    o[remote] = {{"bucket", m.bucket}, {"prefix", m.prefix}, {"source", m.source},
                 {"store", m.store},   {"mode", m.mode},     {"persistent", m.persistent},
                 {"create", m.create}};
  }
  return o;
}

boost::json::object MapJson(const std::map<std::string, std::string>& m, bool redact) {
  boost::json::object o;
  for (const auto& [k, v] : m) o[k] = redact ? kRedacted : std::string_view(v);
  return o;
}

// The request the head schedules by; unset amounts are 0 (the head applies the default demand).
herd::v1::ResourceRequest ToRequest(const Resources& r) {
  herd::v1::ResourceRequest req;
  req.set_cpus(r.cpus.value_or(0));
  req.set_cpus_at_least(r.cpus_at_least);
  req.set_memory_gb(r.memory_gb.value_or(0));
  req.set_memory_at_least(r.memory_at_least);
  req.set_accelerator(r.accelerator);
  req.set_accelerator_count(r.accelerator_count);
  return req;
}

size_t LineCount(const std::string& script) {
  if (script.empty()) return 0;
  size_t n = static_cast<size_t>(std::count(script.begin(), script.end(), '\n'));
  return script.back() == '\n' ? n : n + 1;
}

void PrintScript(std::ostream& out, std::string_view label, const std::string& script) {
  if (script.empty()) {
    out << label << ":" << std::string(12 - label.size(), ' ') << "(none)\n";
    return;
  }
  size_t lines = LineCount(script);
  out << label << ": (" << lines << (lines == 1 ? " line" : " lines") << ")\n";
  size_t start = 0;
  while (start < script.size()) {
    size_t nl = script.find('\n', start);
    if (nl == std::string::npos) nl = script.size();
    std::string_view line = std::string_view(script).substr(start, nl - start);
    out << (line.empty() ? "" : "  ") << line << "\n";
    start = nl + 1;
  }
}

void PrintSummary(const std::string& path, const Task& task, std::ostream& out) {
  const Resources& r = PrimaryResources(task);
  out << path << ": valid task\n";
  out << "name:        " << (task.name.empty() ? "(none)" : task.name) << "\n";
  out << "num_nodes:   " << task.num_nodes << "\n";
  out << "resources:   " << ResourcesSummary(task) << "\n";
  out << "infra:       " << (r.infra.empty() ? "(any)" : r.infra) << "\n";
  if (r.use_spot) out << "use_spot:    true\n";
  if (!r.instance_type.empty()) out << "instance:    " << r.instance_type << "\n";
  if (!r.container_image.empty()) out << "image:       docker:" << r.container_image << "\n";
  if (r.disk_size) out << "disk_size:   " << *r.disk_size << " GB\n";
  if (!r.ports.empty()) {
    out << "ports:       ";
    for (size_t i = 0; i < r.ports.size(); ++i) out << (i ? ", " : "") << r.ports[i];
    out << "\n";
  }
  size_t candidates = task.resources.any_of.size() + task.resources.ordered.size();
  if (candidates > 1) {
    out << "candidates:  " << candidates << " ("
        << (task.resources.ordered.empty() ? "any_of" : "ordered") << "; the first is shown)\n";
  }
  out << "workdir:     ";
  if (task.git_workdir) {
    out << "git " << task.git_workdir->url
        << (task.git_workdir->ref.empty() ? "" : " at " + task.git_workdir->ref)
        << " (cloned by herd, synced to " << kRemoteWorkdir << ")\n";
  } else {
    out << (task.workdir.empty()
                ? "(none)"
                : task.workdir + " (synced to " + std::string(kRemoteWorkdir) + ")")
        << "\n";
  }
  if (const auto& jr = r.job_recovery) {
    out << "recovery:    " << jr->strategy << ", max_restarts_on_errors "
        << jr->max_restarts_on_errors;
    if (!jr->recover_on_exit_codes.empty()) {
      out << ", recover_on_exit_codes";
      for (size_t i = 0; i < jr->recover_on_exit_codes.size(); ++i) {
        out << (i ? ", " : " ") << jr->recover_on_exit_codes[i];
      }
    }
    out << " (managed jobs)\n";
  }
  auto print_map = [&](std::string_view label, const std::map<std::string, std::string>& m,
                       std::string_view sep, bool redact) {
    if (m.empty()) {
      out << label << ":" << std::string(12 - label.size(), ' ') << "(none)\n";
      return;
    }
    out << label << ":\n";
    for (const auto& [k, v] : m) out << "  " << k << sep << (redact ? kRedacted : v) << "\n";
  };
  print_map("envs", task.envs, "=", false);
  print_map("secrets", task.secrets, "=", true);
  print_map("file_mounts", task.file_mounts, " <- ", false);
  if (!task.storage_mounts.empty()) {
    out << "buckets:\n";
    for (const auto& [remote, m] : task.storage_mounts) {
      out << "  " << remote << " <- " << m.store << "://" << m.bucket
          << (m.prefix.empty() ? "" : "/" + m.prefix) << " (" << m.mode
          << (m.source.empty() ? "" : ", upload " + m.source)
          << (m.create ? ", made when missing" : "") << (m.persistent ? "" : ", not persistent")
          << ")\n";
    }
  }
  PrintScript(out, "setup", task.setup);
  PrintScript(out, "run", task.run);
}

}  // namespace

std::string StorageMountsToJson(const std::map<std::string, StorageMount>& mounts) {
  return boost::json::serialize(StorageMountsJson(mounts));
}

Result<std::map<std::string, StorageMount>> StorageMountsFromJson(std::string_view text) {
  std::map<std::string, StorageMount> out;
  try {
    const boost::json::value doc = boost::json::parse(text);
    for (const auto& [remote, v] : doc.as_object()) {
      const boost::json::object& o = v.as_object();
      StorageMount m;
      m.bucket = std::string(o.at("bucket").as_string());
      m.prefix = std::string(o.at("prefix").as_string());
      m.source = std::string(o.at("source").as_string());
      m.store = std::string(o.at("store").as_string());
      m.mode = std::string(o.at("mode").as_string());
      m.persistent = o.at("persistent").as_bool();
      m.create = o.at("create").as_bool();
      out.emplace(std::string(remote), std::move(m));
    }
  } catch (const std::exception& e) {
    return InvalidArgument(std::string("storage mounts: ") + e.what());
  }
  return out;
}

std::string ToJson(const Task& task) {
  boost::json::object o;
  o["name"] = task.name;
  o["workdir"] = task.workdir;
  if (task.git_workdir) {
    o["git_workdir"] = {{"url", task.git_workdir->url}, {"ref", task.git_workdir->ref}};
  }
  o["num_nodes"] = task.num_nodes;
  o["resources"] = ResourcesJson(task.resources);
  o["envs"] = MapJson(task.envs, false);
  o["secrets"] = MapJson(task.secrets, true);
  o["file_mounts"] = MapJson(task.file_mounts, false);
  if (!task.storage_mounts.empty()) o["storage_mounts"] = StorageMountsJson(task.storage_mounts);
  o["setup"] = task.setup;
  o["run"] = task.run;
  return boost::json::serialize(o);
}

std::string ResourcesSummary(const Task& task) {
  return proto::ResourcesSummary(ToRequest(PrimaryResources(task)), task.num_nodes);
}

herd::v1::TaskSpec ToSpec(const Task& task) {
  const Resources& r = PrimaryResources(task);
  herd::v1::TaskSpec spec;
  spec.set_name(task.name);
  spec.set_num_nodes(task.num_nodes);
  *spec.mutable_resources() = ToRequest(r);
  for (const auto& [k, v] : task.envs) (*spec.mutable_envs())[k] = v;
  for (const auto& [k, v] : task.secrets) (*spec.mutable_secrets())[k] = v;
  spec.set_setup(task.setup);
  spec.set_run(task.run);
  spec.set_workdir(task.workdir.empty() ? "" : std::string(kRemoteWorkdir));
  SetSpecLimits(task.run_limits, spec);
  if (!r.container_image.empty()) {
    herd::v1::ContainerSpec* c = spec.mutable_container();
    c->set_image(r.container_image);
    // The workdir always: `exec -- CMD` then runs in the container of the cluster's task.
    c->add_mounts(std::string(kRemoteWorkdir));
    for (const auto& [remote, local] : task.file_mounts) c->add_mounts(remote);
  }
  return spec;
}

Status CheckSpecSize(const Task& task, std::string_view source) {
  std::size_t size = ToSpec(task).ByteSizeLong();
  if (size <= limits::kMaxTaskSpecBytes) return Status::Ok();
  return InvalidArgument(std::string(source) + ": the task is " + std::to_string(size) +
                         " bytes as submitted (its setup, run, envs and secrets, with the values "
                         "of --env, --env-file and --secret), over the limit of " +
                         BytesText(limits::kMaxTaskSpecBytes) +
                         ": keep data in files (file_mounts, workdir) and pass their paths");
}

Status CheckNameSize(std::string_view name) {
  if (name.size() <= limits::kMaxTaskNameBytes) return Status::Ok();
  return InvalidArgument("at most " + std::to_string(limits::kMaxTaskNameBytes) + " bytes, got " +
                         std::to_string(name.size()));
}

int RunCheck(const std::string& path, const ParseOptions& options, bool json, std::ostream& out,
             std::ostream& err) {
  Result<Pipeline> pipeline = ParsePipelineFile(path, options);
  if (!pipeline.ok()) {
    err << pipeline.status().message() << "\n";
    return 2;
  }
  for (const std::string& note : pipeline->notes) err << "note: " << note << "\n";
  const std::size_t n = pipeline->tasks.size();
  if (n > 1 && !json) {
    out << path << ": a pipeline" << (pipeline->name.empty() ? "" : " '" + pipeline->name + "'")
        << " of " << n << " tasks, run one after another on one cluster (herd launch)\n";
  }
  for (std::size_t i = 0; i < n; ++i) {
    const Task& task = pipeline->tasks[i];
    for (const std::string& note : task.notes) err << "note: " << note << "\n";
    if (Trim(task.setup).empty() && Trim(task.run).empty()) {
      err << "note: " << path << (n > 1 ? " task " + std::to_string(i + 1) : "")
          << ": nothing will run: the task has no setup and no run, so its job does nothing\n";
    }
    if (json) {
      out << ToJson(task) << "\n";  // one line per task
    } else {
      if (n > 1) out << "\ntask " << i + 1 << " of " << n << "\n";
      PrintSummary(path, task, out);
    }
  }
  return 0;
}

}  // namespace herd::task
