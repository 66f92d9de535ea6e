#include "shared/common/heap.hpp"

#include <malloc.h>

#include "shared/common/limits.hpp"

namespace herd {

void TuneHeapForStreaming() {
  // Setting either one turns off glibc's dynamic adjustment of both: these stay as set.
  ::mallopt(M_MMAP_THRESHOLD, static_cast<int>(limits::kHeapMmapThreshold));
  ::mallopt(M_TRIM_THRESHOLD, static_cast<int>(limits::kHeapTrimThreshold));
}

}  // namespace herd
