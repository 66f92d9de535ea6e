// Whole-file reads and crash-safe writes, for every component that keeps small files.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <limits>
#include <optional>
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
// WriteFileAtomic(kProcessCrash) for a file rewritten many times a second: the content goes into
// <path>.next, a file kept from one write to the next, which renameat2(RENAME_EXCHANGE) then swaps
// with path. Readers still see the old or the new file, never half, but no inode is allocated or
// freed per write: on ext4 without a journal every inode freed in the last minute (six while its
// block is dirty) is stepped over, one buffer lookup each, by every file creation on the disk, so
// a file replaced by rename a few times per job slows down every other file creation of a burst.
// Falls back to WriteFileAtomic where the exchange is refused.
Status WriteFileSwapped(const std::string& path, std::string_view data, mode_t mode);

// The whole file; NotFound when it does not exist. With max_bytes, a file larger than that is an
// error (kInvalidArgument, "the file is N bytes" or "more than N bytes" for a pipe or a file that
// grows while read) and no more than max_bytes and a buffer are ever held. The messages name the
// path: "cannot read PATH: <strerror>".
Result<std::string> ReadFile(const std::string& path,
                             std::size_t max_bytes = std::numeric_limits<std::size_t>::max());
// The whole file; nullopt when it does not exist.
Result<std::optional<std::string>> ReadFileIfExists(const std::string& path);

// The parts the writers above share, for writers with a rule of their own (a key linked into place
// so that the first creator wins, a record written over reserved blocks).
// Writes all of data at fd's offset, retrying on EINTR: 0, or the errno of the write that failed
// (ENOSPC, EDQUOT, EIO, ...).
int WriteAll(int fd, std::string_view data);
// fsyncs the directory that holds path, so that a rename or link into it survives a power failure.
// Best effort: a directory that cannot be opened is left as it is.
void SyncParentDir(const std::string& path);

}  // namespace herd
