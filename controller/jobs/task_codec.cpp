#include "controller/jobs/task_codec.hpp"

#include <boost/json.hpp>
#include <exception>
#include <string>
#include <vector>

#include "controller/task/resource_values.hpp"

namespace herd::jobs {
namespace {

namespace json = boost::json;

json::object StringMap(const std::map<std::string, std::string>& m) {
  json::object o;
  for (const auto& [k, v] : m) o[k] = v;
  return o;
}

std::map<std::string, std::string> ToStringMap(const json::value& v) {
  std::map<std::string, std::string> out;
  for (const auto& [k, val] : v.as_object()) out[std::string(k)] = std::string(val.as_string());
  return out;
}

json::object EncodeResources(const task::Resources& r) {
  json::object o;
  if (r.cpus) o["cpus"] = *r.cpus;
  o["cpus_at_least"] = r.cpus_at_least;
  if (r.memory_gb) o["memory_gb"] = *r.memory_gb;
  o["memory_at_least"] = r.memory_at_least;
  o["accelerator"] = r.accelerator;
  o["accelerator_count"] = r.accelerator_count;
  o["infra"] = r.infra;
  json::array ports;
  for (const auto& p : r.ports) ports.push_back(json::string(p));
  o["ports"] = std::move(ports);
  if (r.disk_size) o["disk_size"] = *r.disk_size;
  o["use_spot"] = r.use_spot;
  o["instance_type"] = r.instance_type;
  if (!r.container_image.empty()) o["container_image"] = r.container_image;
  if (r.job_recovery) {
    json::array codes;
    for (int c : r.job_recovery->recover_on_exit_codes) codes.emplace_back(c);
    o["job_recovery"] = {{"strategy", r.job_recovery->strategy},
                         {"max_restarts_on_errors", r.job_recovery->max_restarts_on_errors},
                         {"recover_on_exit_codes", std::move(codes)}};
  }
  json::array any_of, ordered;
  for (const auto& c : r.any_of) any_of.push_back(EncodeResources(c));
  for (const auto& c : r.ordered) ordered.push_back(EncodeResources(c));
  o["any_of"] = std::move(any_of);
  o["ordered"] = std::move(ordered);
  return o;
}

task::Resources DecodeResources(const json::object& o) {
  task::Resources r;
  if (auto* v = o.if_contains("cpus")) r.cpus = v->to_number<double>();
  r.cpus_at_least = o.at("cpus_at_least").as_bool();
  if (auto* v = o.if_contains("memory_gb")) r.memory_gb = v->to_number<double>();
  r.memory_at_least = o.at("memory_at_least").as_bool();
  r.accelerator = std::string(o.at("accelerator").as_string());
  r.accelerator_count = o.at("accelerator_count").to_number<double>();
  r.infra = std::string(o.at("infra").as_string());
  for (const auto& p : o.at("ports").as_array()) r.ports.emplace_back(p.as_string());
  if (auto* v = o.if_contains("disk_size")) r.disk_size = v->to_number<int>();
  r.use_spot = o.at("use_spot").as_bool();
  r.instance_type = std::string(o.at("instance_type").as_string());
  if (auto* v = o.if_contains("container_image")) r.container_image = std::string(v->as_string());
  if (auto* v = o.if_contains("job_recovery")) {
    task::JobRecovery jr;
    jr.strategy = std::string(v->at("strategy").as_string());
    jr.max_restarts_on_errors = v->at("max_restarts_on_errors").to_number<int>();
    // Absent in the records of jobs launched before recover_on_exit_codes existed.
    if (auto* codes = v->as_object().if_contains("recover_on_exit_codes")) {
      for (const auto& c : codes->as_array())
        jr.recover_on_exit_codes.push_back(c.to_number<int>());
    }
    r.job_recovery = jr;
  }
  for (const auto& c : o.at("any_of").as_array())
    r.any_of.push_back(DecodeResources(c.as_object()));
  for (const auto& c : o.at("ordered").as_array()) {
    r.ordered.push_back(DecodeResources(c.as_object()));
  }
  return r;
}

}  // namespace

std::string EncodeTask(const task::Task& t) {
  json::object o;
  o["name"] = t.name;
  o["workdir"] = t.workdir;
  if (t.git_workdir) o["git_workdir"] = {{"url", t.git_workdir->url}, {"ref", t.git_workdir->ref}};
  o["num_nodes"] = t.num_nodes;
  o["resources"] = EncodeResources(t.resources);
  o["envs"] = StringMap(t.envs);
  o["file_mounts"] = StringMap(t.file_mounts);
  // Only a task with buckets carries them (the same JSON as the Python SDK's otherwise).
  if (!t.storage_mounts.empty()) {
    o["storage_mounts"] = json::parse(task::StorageMountsToJson(t.storage_mounts));
  }
  o["setup"] = t.setup;
  o["run"] = t.run;
  // Only a task with limits carries them, so a task without is the JSON the Python SDK builds
  // for it too (python/herd/_api.py).
  const task::RunLimits& l = t.run_limits;
  if (l.time_limit.count() > 0 || l.limit_signal != 0 || l.hang_timeout.count() > 0 || l.grace) {
    json::object limits{{"time_limit_ms", l.time_limit.count()},
                        {"limit_signal", l.limit_signal},
                        {"limit_signal_before_ms", l.limit_signal_before.count()},
                        {"hang_timeout_ms", l.hang_timeout.count()}};
    if (l.grace) limits["grace_ms"] = l.grace->count();
    o["run_limits"] = std::move(limits);
  }
  return json::serialize(o);
}

Result<task::Task> DecodeTask(const std::string& text) {
  try {
    json::object o = json::parse(text).as_object();
    task::Task t;
    t.name = std::string(o.at("name").as_string());
    t.workdir = std::string(o.at("workdir").as_string());
    if (auto* g = o.if_contains("git_workdir")) {
      t.git_workdir = task::GitWorkdir{std::string(g->at("url").as_string()),
                                       std::string(g->at("ref").as_string())};
    }
    t.num_nodes = o.at("num_nodes").to_number<int>();
    t.resources = DecodeResources(o.at("resources").as_object());
    t.envs = ToStringMap(o.at("envs"));
    t.file_mounts = ToStringMap(o.at("file_mounts"));
    if (auto* v = o.if_contains("storage_mounts")) {
      auto mounts = task::StorageMountsFromJson(json::serialize(*v));
      if (!mounts.ok()) return mounts.status();
      t.storage_mounts = std::move(mounts).value();
    }
    t.setup = std::string(o.at("setup").as_string());
    t.run = std::string(o.at("run").as_string());
    // Absent in the records of jobs launched before run limits existed.
    if (auto* v = o.if_contains("run_limits")) {
      const json::object& l = v->as_object();
      using std::chrono::milliseconds;
      t.run_limits.time_limit = milliseconds(l.at("time_limit_ms").to_number<int64_t>());
      t.run_limits.limit_signal = l.at("limit_signal").to_number<int>();
      t.run_limits.limit_signal_before =
          milliseconds(l.at("limit_signal_before_ms").to_number<int64_t>());
      t.run_limits.hang_timeout = milliseconds(l.at("hang_timeout_ms").to_number<int64_t>());
      if (auto* g = l.if_contains("grace_ms")) {
        t.run_limits.grace = milliseconds(g->to_number<int64_t>());
      }
    }
    // A task from a client (the SDK's, through the server) is checked as the parser checks a
    // YAML's: an image reaches podman's command line on the nodes.
    std::vector<const task::Resources*> all = {&t.resources};
    for (const auto& c : t.resources.any_of) all.push_back(&c);
    for (const auto& c : t.resources.ordered) all.push_back(&c);
    for (const task::Resources* r : all) {
      if (r->container_image.empty()) continue;
      if (auto image =
              task::ParseContainerImage(std::string(task::kDockerImagePrefix) + r->container_image);
          !image.ok()) {
        return InvalidArgument("task: resources.image_id: " + image.status().message());
      }
    }
    return t;
  } catch (const std::exception& e) {
    return InvalidArgument(std::string("damaged task record: ") + e.what());
  }
}

}  // namespace herd::jobs
