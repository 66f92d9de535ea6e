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

}  // namespace herd::controller
