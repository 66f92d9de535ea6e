// HeadApi fake: a head with the jobs and nodes a test gives it, recording what was asked of it.
// FakeHeadConnector hands out connections to one FakeHead per cluster name (shared state, as
// many connections to one real head share it).
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "controller/ops/cluster_ops.hpp"

namespace herd::testing {

struct FakeHeadState {
  std::mutex mu;
  // What the head knows: node ids with alive flags, and jobs (newest last).
  std::vector<std::pair<std::string, bool>> nodes;
  std::vector<herd::v1::JobInfo> jobs;
  // What was asked of it.
  std::vector<herd::v1::TaskSpec> submitted;
  std::vector<std::string> submitted_by;
  std::vector<std::vector<int64_t>> cancelled;  // ids per Cancel call; {} for --all
  std::vector<std::optional<std::chrono::milliseconds>> cancel_graces;  // per Cancel call
  int autostop_minutes = -2;                                            // -2: never set
  std::string autostop_command;
  herd::v1::SetAutostop autostop_setting;
  bool autostop_due = false;  // NodesReply.autostop_due
  int connections = 0;
  Status refuse = Status::Ok();  // non-ok: every call fails with it
};

class FakeHead final : public controller::HeadApi {
 public:
  explicit FakeHead(std::shared_ptr<FakeHeadState> s) : s_(std::move(s)) {}

  Result<int64_t> Submit(const herd::v1::TaskSpec& task, const std::string& user,
                         const std::string& = "", int = 0) override {
    std::lock_guard<std::mutex> l(s_->mu);
    HERD_RETURN_IF_ERROR(s_->refuse);
    s_->submitted.push_back(task);
    s_->submitted_by.push_back(user);
    herd::v1::JobInfo j;
    j.set_job_id(static_cast<int64_t>(s_->jobs.size()) + 1);
    j.set_name(task.name());
    j.set_user(user);
    j.set_state(herd::v1::JOB_STATE_PENDING);
    s_->jobs.push_back(j);
    return j.job_id();
  }
  Result<std::vector<herd::v1::JobInfo>> Queue(bool, int64_t* older_left_out) override {
    std::lock_guard<std::mutex> l(s_->mu);
    HERD_RETURN_IF_ERROR(s_->refuse);
    if (older_left_out) *older_left_out = 0;
    return std::vector<herd::v1::JobInfo>(s_->jobs.rbegin(), s_->jobs.rend());
  }
  Result<std::vector<int64_t>> Cancel(
      const std::vector<int64_t>& ids, bool all,
      std::optional<std::chrono::milliseconds> grace = std::nullopt) override {
    std::lock_guard<std::mutex> l(s_->mu);
    HERD_RETURN_IF_ERROR(s_->refuse);
    s_->cancelled.push_back(all ? std::vector<int64_t>{} : ids);
    s_->cancel_graces.push_back(grace);
    return ids;
  }
  Result<herd::v1::StackReply> Stacks(int64_t job_id) override {
    std::lock_guard<std::mutex> l(s_->mu);
    HERD_RETURN_IF_ERROR(s_->refuse);
    herd::v1::StackReply r;
    r.set_job_id(job_id);
    return r;
  }
  Result<herd::v1::NodesReply> Nodes() override {
    std::lock_guard<std::mutex> l(s_->mu);
    HERD_RETURN_IF_ERROR(s_->refuse);
    herd::v1::NodesReply r;
    for (const auto& [id, alive] : s_->nodes) {
      r.add_nodes()->set_node_id(id);
      r.add_alive(alive);
    }
    r.set_autostop_due(s_->autostop_due);
    return r;
  }
  Status SetAutostop(const herd::v1::SetAutostop& setting) override {
    std::lock_guard<std::mutex> l(s_->mu);
    HERD_RETURN_IF_ERROR(s_->refuse);
    s_->autostop_minutes = setting.idle_minutes();
    s_->autostop_command = setting.command();
    s_->autostop_setting = setting;
    return Status::Ok();
  }
  Result<herd::v1::JobInfo> Stream(int64_t job_id, uint64_t, bool, const StreamCallbacks& cb,
                                   int = 0) override {
    std::lock_guard<std::mutex> l(s_->mu);
    HERD_RETURN_IF_ERROR(s_->refuse);
    for (const auto& j : s_->jobs) {
      if (j.job_id() != job_id) continue;
      if (cb.on_data) cb.on_data("log of job " + std::to_string(job_id) + "\n");
      return j;
    }
    return NotFound("job " + std::to_string(job_id) + " not found");
  }

 private:
  std::shared_ptr<FakeHeadState> s_;
};

class FakeHeadConnector final : public ops::HeadConnector {
 public:
  // The head of `cluster`, made on first use.
  std::shared_ptr<FakeHeadState> Head(const std::string& cluster) {
    std::lock_guard<std::mutex> l(mu_);
    auto& h = heads_[cluster];
    if (!h) h = std::make_shared<FakeHeadState>();
    return h;
  }
  Result<std::unique_ptr<controller::HeadApi>> Connect(const controller::ClusterRecord& c,
                                                       bool) override {
    auto h = Head(c.name);
    std::lock_guard<std::mutex> l(h->mu);
    HERD_RETURN_IF_ERROR(h->refuse);
    ++h->connections;
    return std::unique_ptr<controller::HeadApi>(new FakeHead(h));
  }

 private:
  std::mutex mu_;
  std::map<std::string, std::shared_ptr<FakeHeadState>> heads_;
};

}  // namespace herd::testing
