#include "controller/ops/cluster_ops.hpp"  // must not be found: the agent does not see controller/
