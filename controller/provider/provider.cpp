#include "controller/provider/provider.hpp"

namespace herd::controller {

Provider::~Provider() = default;

}  // namespace herd::controller
