#include "agent/core/startup_pages.hpp"

#include <fcntl.h>
#include <link.h>
#include <malloc.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#ifndef MADV_PAGEOUT
#define MADV_PAGEOUT 21  // Linux 5.4
#endif

namespace herd::agent {

namespace {

struct Segments {
  std::vector<PageRange> read_only, writable;
  bool done = false;
};

int CollectMainProgram(dl_phdr_info* info, size_t, void* data) {
  auto* s = static_cast<Segments*>(data);
  if (s->done) return 1;
  s->done = true;  // the first object is the executable itself
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type != PT_LOAD || ph.p_memsz == 0) continue;
    uintptr_t begin = info->dlpi_addr + ph.p_vaddr;
    PageRange r{begin & ~(page - 1), (begin + ph.p_memsz + page - 1) & ~(page - 1)};
    ((ph.p_flags & PF_W) ? s->writable : s->read_only).push_back(r);
  }
  return 1;
}

}  // namespace

std::vector<PageRange> ReadOnlyImageRanges() {
  Segments s;
  dl_iterate_phdr(CollectMainProgram, &s);
  std::vector<PageRange> out;
  for (PageRange r : s.read_only) {
    // A page that a writable segment shares is written (relocations, .data): leave it out.
    for (const PageRange& w : s.writable) {
      if (w.begin < r.end && r.begin < w.end) {
        if (w.begin <= r.begin) r.begin = std::min(r.end, w.end);
        if (w.end >= r.end) r.end = std::max(r.begin, w.begin);
      }
    }
    if (r.begin < r.end) out.push_back(r);
  }
  return out;
}

Result<size_t> ReleaseStartupPages() {
  malloc_trim(0);
  int fd = open("/proc/self/exe", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoError("open /proc/self/exe", errno);
  // A binary written just before it started (bootstrap's upload, a build) has dirty pages for up
  // to vm.dirty_expire_centisecs: reclaim skips those. Written back now, once (~11 MB). Best
  // effort: a file system that cannot sync (EROFS, EINVAL) holds no dirty pages of it either.
  (void)fdatasync(fd);
  Status status = Status::Ok();
  size_t bytes = 0;
  for (const PageRange& r : ReadOnlyImageRanges()) {
    if (!status.ok()) break;
    void* p = reinterpret_cast<void*>(r.begin);
    // MADV_RANDOM first: a fault in these pages then reads that page alone. The default
    // read-around reads the device's read_ahead_kb around each fault (often megabytes): the first
    // heartbeat after the page-out would read the whole file back into the cache.
    if (madvise(p, r.end - r.begin, MADV_RANDOM) != 0) {
      status = ErrnoError("madvise(MADV_RANDOM) of the agent's executable", errno);
    } else if (madvise(p, r.end - r.begin, MADV_PAGEOUT) != 0) {
      status = ErrnoError("madvise(MADV_PAGEOUT) of the agent's executable", errno);
    }
    bytes += r.end - r.begin;
  }
  // MADV_PAGEOUT frees only what it can split out of the page cache's large folios; the file's
  // pages that no process maps any more are dropped here (clean: the file is not written).
  if (status.ok()) {
    if (int err = posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED); err != 0) {
      status = ErrnoError("posix_fadvise(POSIX_FADV_DONTNEED) of the agent's executable", err);
    }
  }
  close(fd);
  if (!status.ok()) return status;
  return bytes;
}

}  // namespace herd::agent
