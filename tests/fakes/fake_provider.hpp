// Provider fake: nodes that are records only (addresses on 127.0.50.x, never dialled), and the
// calls made of it.
#pragma once

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "controller/provider/provider.hpp"

namespace herd::testing {

struct FakeProviderState {
  std::mutex mu;
  std::vector<std::string> calls;  // "provision demo 2", "stop demo", "start demo", "teardown demo"
  Status fail_provision = Status::Ok();
  Status stoppable = Status::Ok();
  Status fail_stop = Status::Ok();  // Stop's answer (recorded either way)
  int nodes = 0;
  // GrantAutostop's answer when set (else the base class's refusal; CheckAutostop's too);
  // Machines' answer.
  std::optional<controller::AutostopGrant> grant;
  controller::MachinesView machines;
  // When set, each Machines call waits (at most 10 s) until this many calls have been inside it
  // at once; machines_max_inside says how many were (a serial caller reaches 1 only).
  int machines_together = 0;
  int machines_inside = 0;
  int machines_max_inside = 0;
  std::condition_variable machines_cv;
};

class FakeProvider final : public controller::Provider {
 public:
  explicit FakeProvider(std::shared_ptr<FakeProviderState> s, std::string name = "fake")
      : s_(std::move(s)), name_(std::move(name)) {}
  std::string name() const override { return name_; }
  Result<std::vector<controller::NodeHandle>> Provision(
      const controller::ProvisionRequest& r) override {
    std::lock_guard<std::mutex> l(s_->mu);
    s_->calls.push_back("provision " + r.cluster + " " + std::to_string(r.num_nodes));
    HERD_RETURN_IF_ERROR(s_->fail_provision);
    s_->nodes = r.num_nodes;
    return Handles(r.cluster);
  }
  Status CheckStoppable(const std::string&, const std::string&) override { return s_->stoppable; }
  Status Stop(const std::string& cluster, const std::string&) override {
    std::lock_guard<std::mutex> l(s_->mu);
    s_->calls.push_back("stop " + cluster);
    return s_->fail_stop;
  }
  Result<std::vector<controller::NodeHandle>> Start(const std::string& cluster,
                                                    const std::string&) override {
    std::lock_guard<std::mutex> l(s_->mu);
    s_->calls.push_back("start " + cluster);
    return Handles(cluster);
  }
  Status Teardown(const std::string& cluster, const std::string&) override {
    std::lock_guard<std::mutex> l(s_->mu);
    s_->calls.push_back("teardown " + cluster);
    return Status::Ok();
  }
  bool SshReadyOnReturn() const override { return true; }
  Result<controller::AutostopGrant> GrantAutostop(const std::string& cluster,
                                                  const std::string& dir) override {
    std::lock_guard<std::mutex> l(s_->mu);
    s_->calls.push_back("grant " + cluster);
    if (s_->grant) return *s_->grant;
    return Provider::GrantAutostop(cluster, dir);
  }
  // Autostop works where a grant was given (the base class's refusal otherwise).
  Status CheckAutostop(const std::string& cluster, const std::string& dir) override {
    std::lock_guard<std::mutex> l(s_->mu);
    s_->calls.push_back("check-autostop " + cluster);
    if (s_->grant) return Status::Ok();
    return Provider::CheckAutostop(cluster, dir);
  }
  Result<controller::MachinesView> Machines(const std::string& cluster,
                                            const std::string&) override {
    std::unique_lock<std::mutex> l(s_->mu);
    s_->calls.push_back("machines " + cluster);
    ++s_->machines_inside;
    s_->machines_max_inside = std::max(s_->machines_max_inside, s_->machines_inside);
    s_->machines_cv.notify_all();
    if (s_->machines_together > 0) {
      s_->machines_cv.wait_for(l, std::chrono::seconds(10),
                               [this] { return s_->machines_max_inside >= s_->machines_together; });
    }
    --s_->machines_inside;
    return s_->machines;
  }

 private:
  std::vector<controller::NodeHandle> Handles(const std::string& cluster) const {
    std::vector<controller::NodeHandle> out;
    for (int i = 0; i < s_->nodes; ++i) {
      controller::NodeHandle h;
      h.name = cluster + (i == 0 ? "-head" : "-worker" + std::to_string(i));
      h.ip = "127.0.50." + std::to_string(10 + i);
      h.ssh_user = "herd";
      out.push_back(h);
    }
    return out;
  }

  std::shared_ptr<FakeProviderState> s_;
  std::string name_;
};

}  // namespace herd::testing
