// Gives back the memory that only the agent's start-up needed.
//
// An idle agent runs a small part of its code (the heartbeat: a timer, protobuf, a websocket write
// over TLS), but start-up runs much more once: OpenSSL's provider and certificate loading,
// protobuf's descriptor pool, the YAML config, the node probe. Each of those touches scatter over
// the 8 MB of text, and the kernel maps 64 KiB around every page fault, so after start-up most of
// the executable stays mapped (about 6 of its 12 MB) although the idle agent needs about a third
// of it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "shared/common/status.hpp"

namespace herd::agent {

struct PageRange {
  uintptr_t begin = 0;
  uintptr_t end = 0;  // exclusive, page-aligned like begin
};

// The page ranges of this executable's read-only segments (text, read-only data, the dynamic
// relocations), from its program headers: never written, so their pages are copies of the file.
// Pages shared with a writable segment (relocated data, .data, .bss) are left out.
std::vector<PageRange> ReadOnlyImageRanges();

// fdatasync of the executable (reclaim skips dirty pages of a binary written just before), then
// madvise(MADV_RANDOM, then MADV_PAGEOUT) on ReadOnlyImageRanges(): the kernel unmaps those pages
// from the agent and frees them from the page cache where no other process maps them (clean file
// pages: nothing is written anywhere). Code the idle agent then runs faults back in from the file
// page by page (MADV_RANDOM: no read-around, which would read the whole file back); code that
// never runs again (start-up) stays out of memory. Then posix_fadvise(POSIX_FADV_DONTNEED) on the
// file drops its cached pages that no process maps any more (MADV_PAGEOUT skips large page-cache
// folios it cannot split); a folio that something still maps stays cached. A later
// `herdlet --step` is a new mapping of the file with the normal read-ahead. Returns the bytes
// advised. Anonymous memory (heap, relocated data) is not touched; the free heap is returned
// with malloc_trim. A kernel without MADV_PAGEOUT (before 5.4) gives an error after MADV_RANDOM,
// and nothing is paged out.
Result<size_t> ReleaseStartupPages();

}  // namespace herd::agent
