#include "agent/sched/scheduler.hpp"  // must not be found: shared/ sees only shared/
