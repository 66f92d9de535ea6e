#include "controller/provider/provider.hpp"

namespace herd::controller {

Provider::~Provider() = default;

Status Provider::CheckStoppable(const std::string&, const std::string&) { return Status::Ok(); }

Status Provider::StartAgents(const std::string&, const std::string&, const std::string&,
                             const std::vector<AgentFiles>&) {
  return FailedPrecondition("the " + name() + " provider does not start agents itself");
}

Result<AllocationState> Provider::Allocation(const std::string&, const std::string&) {
  return AllocationState{};
}

Result<AutostopGrant> Provider::GrantAutostop(const std::string& cluster,
                                              const std::string& state_dir) {
  return Provider::CheckAutostop(cluster, state_dir);  // always an error
}

Status Provider::CheckAutostop(const std::string& cluster, const std::string&) {
  return FailedPrecondition("autostop needs machines the head can stop; cluster " + cluster +
                            " is on " + name() + " (existing machines are not stopped by herd)");
}

Status Provider::SpreadFiles(const std::string&, const std::string&,
                             const std::vector<std::string>&) {
  return Status::Ok();
}

Result<MachinesView> Provider::Machines(const std::string&, const std::string&) {
  return MachinesView{};
}

}  // namespace herd::controller
