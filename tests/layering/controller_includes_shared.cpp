// Allowed: the controller includes shared/ and its own side. Proves the probes compile at all.
#include "controller/ops/cluster_ops.hpp"
#include "shared/transport/transport.hpp"
