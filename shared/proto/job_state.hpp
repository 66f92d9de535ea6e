// Names and classes of job states, for every binary that prints or decides on them.
#pragma once

#include <string_view>

#include "herd/v1/common.pb.h"

namespace herd::proto {

// "SUCCEEDED", "FAILED_SETUP", ... (SkyPilot's names); "UNKNOWN" for anything else.
std::string_view JobStateName(herd::v1::JobState state);
// SUCCEEDED, FAILED, FAILED_SETUP, FAILED_DRIVER or CANCELLED.
bool IsTerminal(herd::v1::JobState state);

}  // namespace herd::proto
