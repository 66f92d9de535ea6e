#include "controller/core/sdk.hpp"  // must not be found: the agent does not see controller/
