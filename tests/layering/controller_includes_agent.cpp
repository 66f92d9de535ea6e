#include "agent/core/head.hpp"  // must not be found: the controller does not see agent/
