#include "controller/provider/provider.hpp"

namespace herd::controller {

Provider::~Provider() = default;

Status Provider::CheckStoppable(const std::string&, const std::string&) { return Status::Ok(); }

}  // namespace herd::controller
