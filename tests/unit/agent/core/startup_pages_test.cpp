#include "agent/core/startup_pages.hpp"

#include <doctest/doctest.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>

namespace herd::agent {
namespace {

int g_written = 1;  // .data: a writable segment
const char* const kText = "a string literal in read-only data";

bool Inside(const std::vector<PageRange>& ranges, const void* p) {
  auto a = reinterpret_cast<uintptr_t>(p);
  for (const PageRange& r : ranges)
    if (a >= r.begin && a < r.end) return true;
  return false;
}

// Kilobytes of this executable's pages that are mapped in the read-only ranges (/proc/self/smaps).
long MappedKb(const std::vector<PageRange>& ranges) {
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool in = false;
  long kb = 0;
  while (std::getline(smaps, line)) {
    unsigned long lo = 0, hi = 0;
    char dash = 0;
    std::istringstream head(line);
    if (line.find(':') > line.find(' ') && (head >> std::hex >> lo >> dash >> hi) && dash == '-') {
      in = false;
      for (const PageRange& r : ranges) in = in || (lo >= r.begin && hi <= r.end);
    } else if (in && line.rfind("Rss:", 0) == 0) {
      kb += std::stol(line.substr(4));
    }
  }
  return kb;
}

TEST_CASE("the read-only ranges hold the executable's code and constants, not its data") {
  auto ranges = ReadOnlyImageRanges();
  REQUIRE_FALSE(ranges.empty());
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  for (const PageRange& r : ranges) {
    CHECK(r.begin % page == 0);
    CHECK(r.end % page == 0);
    CHECK(r.begin < r.end);
  }
  CHECK(Inside(ranges, reinterpret_cast<const void*>(&ReadOnlyImageRanges)));  // .text
  CHECK(Inside(ranges, kText));                                                // .rodata
  CHECK_FALSE(Inside(ranges, &g_written));                                     // .data
  CHECK_FALSE(Inside(ranges, &kText));  // a pointer the loader relocates (RELRO): written once
}

TEST_CASE("paging out the executable's read-only pages unmaps them and the code still runs") {
  auto ranges = ReadOnlyImageRanges();
  long before = MappedKb(ranges);
  REQUIRE(before > 0);
  auto released = ReleaseStartupPages();
  REQUIRE_MESSAGE(released.ok(), released.status().message());
  size_t total = 0;
  for (const PageRange& r : ranges) total += r.end - r.begin;
  CHECK(*released == total);
  // Reading smaps runs code again, which maps some of it back: fewer pages, not none.
  long after = MappedKb(ranges);
  MESSAGE("read-only image pages mapped: " << before << " kB before, " << after << " kB after");
  CHECK(after < before);
  CHECK(ReadOnlyImageRanges().size() == ranges.size());  // code and constants still work
  CHECK(std::string(kText).size() == 34);
  ++g_written;
}

}  // namespace
}  // namespace herd::agent
