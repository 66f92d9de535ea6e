// Durations as people read them in messages: "90m" -> "1h30m", 26 h -> "1d2h", 1500 ms -> "1500ms".
#pragma once

#include <chrono>
#include <string>

namespace herd {

// Whole days, hours, minutes and seconds ("1d2h", "1m30s", "0s"); a duration that is not a whole
// number of seconds in milliseconds ("1500ms").
std::string DurationText(std::chrono::milliseconds d);

}  // namespace herd
