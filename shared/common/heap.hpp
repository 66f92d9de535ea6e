// glibc malloc settings for processes that move a lot of bytes in large messages.
#pragma once

namespace herd {

// By default glibc serves every allocation of at least 128 KiB (raised as such blocks are freed)
// with its own mmap and gives the top of the heap back once more than twice that is free. A log
// flood allocates and frees 256 KiB messages all the time, so each one would be fresh memory: a
// page fault and a zeroed page per 4 KiB, a large share of the mux's and the head's CPU in a
// flood. This keeps blocks up to limits::kHeapMmapThreshold on the heap and up to
// limits::kHeapTrimThreshold of free heap for reuse. Call once, early in main.
void TuneHeapForStreaming();

}  // namespace herd
