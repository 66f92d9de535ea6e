// Whole-file reads and crash-safe writes, for every component that keeps small files.
#pragma once

#include <sys/types.h>

#include <string>
#include <string_view>

#include "shared/common/status.hpp"

namespace herd {

// Writes through a temporary file in the same directory (mode applied before any byte), fsyncs it,
// renames it over path and fsyncs the directory: readers see the old or the new file, never half.
// kProcessCrash skips both fsyncs: still never half a file, and the file survives a crash of the
// writer, but not a power failure or kernel crash (for state that such a crash makes void anyway).
enum class Durability { kPowerLoss, kProcessCrash };
Status WriteFileAtomic(const std::string& path, std::string_view data, mode_t mode,
                       Durability durability = Durability::kPowerLoss);
// WriteFileAtomic unless `path` already holds exactly `data` (then nothing is written, and a
// process executing the file keeps it). Returns whether it wrote.
Result<bool> WriteFileIfChanged(const std::string& path, std::string_view data, mode_t mode,
                                Durability durability = Durability::kPowerLoss);
// The whole file; NotFound when it does not exist.
Result<std::string> ReadFile(const std::string& path);

}  // namespace herd
