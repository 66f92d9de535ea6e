#include "agent/logs/log_merger.hpp"

#include <doctest/doctest.h>

#include <chrono>

#include "shared/common/limits.hpp"

namespace herd::agent {
namespace {

using namespace std::string_literals;

// Feeds `input` in pieces of `chunk` bytes, then flushes.
std::string FeedChunked(std::string_view input, std::size_t chunk, const std::string& prefix) {
  LinePrefixer p(prefix);
  std::string out;
  for (std::size_t i = 0; i < input.size(); i += chunk) p.Feed(input.substr(i, chunk), out);
  p.Flush(out);
  return out;
}

std::string FeedAll(std::string_view input, const std::string& prefix = "P ") {
  return FeedChunked(input, std::max<std::size_t>(input.size(), 1), prefix);
}

TEST_CASE("PrefixFor: exact bytes of every form") {
  CHECK(PrefixFor({.setup = false, .rank = 0, .pid = 4242, .ip = "10.0.0.1", .num_nodes = 1}) ==
        "(task, pid=4242) ");
  CHECK(PrefixFor({.setup = false, .rank = 0, .pid = 11, .ip = "10.0.0.1", .num_nodes = 2}) ==
        "(head, rank=0, pid=11) ");
  CHECK(PrefixFor({.setup = false, .rank = 1, .pid = 12, .ip = "10.0.0.2", .num_nodes = 2}) ==
        "(worker1, rank=1, pid=12, ip=10.0.0.2) ");
  CHECK(PrefixFor({.setup = false, .rank = 10, .pid = 7, .ip = "10.0.0.11", .num_nodes = 16}) ==
        "(worker10, rank=10, pid=7, ip=10.0.0.11) ");
  CHECK(PrefixFor({.setup = true, .rank = 0, .pid = 99, .ip = "10.0.0.1", .num_nodes = 4}) ==
        "(setup pid=99) ");
  CHECK(PrefixFor({.setup = true, .rank = 2, .pid = 98, .ip = "10.0.0.3", .num_nodes = 4}) ==
        "(setup pid=98, ip=10.0.0.3) ");
  CHECK(PrefixFor({.setup = true, .rank = 0, .pid = 5, .ip = "10.0.0.1", .num_nodes = 1}) ==
        "(setup pid=5) ");
  // A worker whose address is unknown still gets a well-formed prefix.
  CHECK(PrefixFor({.setup = false, .rank = 1, .pid = 3, .ip = "", .num_nodes = 2}) ==
        "(worker1, rank=1, pid=3) ");
}

TEST_CASE("complete lines are emitted as they arrive, the partial one is held") {
  LinePrefixer p("(task, pid=1) ");
  std::string out;
  p.Feed("hello\nwor", out);
  CHECK(out == "(task, pid=1) hello\n");
  CHECK(p.pending_bytes() == 3);
  p.Feed("ld\n", out);
  CHECK(out == "(task, pid=1) hello\n(task, pid=1) world\n");
  CHECK(p.pending_bytes() == 0);
  p.Flush(out);  // nothing held: nothing added
  CHECK(out == "(task, pid=1) hello\n(task, pid=1) world\n");
}

TEST_CASE("empty lines get a prefix too") {
  CHECK(FeedAll("\n") == "P \n");
  CHECK(FeedAll("a\n\n\nb\n") == "P a\nP \nP \nP b\n");
  CHECK(FeedAll("") == "");
}

TEST_CASE("progress bars: every \\r redraw is prefixed") {
  CHECK(FeedAll("10%\r20%\r30%\n") == "P 10%\rP 20%\rP 30%\n");
  CHECK(FeedAll("\r\r") == "P \rP \r\n");
  LinePrefixer p("P ");
  std::string out;
  p.Feed("10%\r20%", out);
  CHECK(out == "P 10%\r");
  p.Feed("\r", out);  // held: it might be the first half of "\r\n"
  CHECK(out == "P 10%\r");
  CHECK(p.pending_bytes() == 4);
  p.Feed("3", out);
  CHECK(out == "P 10%\rP 20%\r");
}

TEST_CASE("\\r\\n is one line end, also when split across feeds") {
  CHECK(FeedAll("a\r\nb\r\n") == "P a\r\nP b\r\n");
  LinePrefixer p("P ");
  std::string out;
  p.Feed("a\r", out);
  CHECK(out.empty());
  CHECK(p.pending_bytes() == 2);
  p.Feed("\n", out);
  CHECK(out == "P a\r\n");
  p.Feed("b\r", out);
  p.Feed("", out);  // an empty read decides nothing
  CHECK(out == "P a\r\n");
  p.Feed("\nc", out);
  CHECK(out == "P a\r\nP b\r\n");
  p.Flush(out);
  CHECK(out == "P a\r\nP b\r\nP c\n");
}

TEST_CASE("Flush: a last partial line gets the prefix and a newline") {
  CHECK(FeedAll("done") == "P done\n");
  CHECK(FeedAll("x\n50%") == "P x\nP 50%\n");
  CHECK(FeedAll("50%\r") == "P 50%\r\n");  // the last bar stays visible in the merged log
  LinePrefixer p("P ");
  std::string out;
  p.Feed("tail", out);
  p.Flush(out);
  p.Flush(out);  // idempotent
  CHECK(out == "P tail\n");
  CHECK(p.pending_bytes() == 0);
}

TEST_CASE("bytes are bytes: NULs and invalid UTF-8 pass through") {
  const std::string in = "a\0b\n\xff\xfe\xc3\n"s;
  CHECK(FeedAll(in) == "P a\0b\nP \xff\xfe\xc3\n"s);
}

TEST_CASE("split anywhere: output does not depend on how the bytes arrive") {
  const std::string in = "line1\n\nbar 1%\rbar 2%\r\nwin\r\n\r\r\n\0\xff\n"s + "x\r" + "tail"s;
  const std::string want =
      "P line1\nP \nP bar 1%\rP bar 2%\r\nP win\r\nP \rP \r\nP \0\xff\nP x\rP tail\n"s;
  REQUIRE(FeedAll(in) == want);
  for (std::size_t i = 0; i <= in.size(); ++i) {
    for (std::size_t j = i; j <= in.size(); ++j) {
      LinePrefixer p("P ");
      std::string out;
      p.Feed(std::string_view(in).substr(0, i), out);
      p.Feed(std::string_view(in).substr(i, j - i), out);
      p.Feed(std::string_view(in).substr(j), out);
      p.Flush(out);
      CAPTURE(i);
      CAPTURE(j);
      REQUIRE(out == want);
    }
  }
  for (std::size_t chunk = 1; chunk <= 7; ++chunk) CHECK(FeedChunked(in, chunk, "P ") == want);
}

TEST_CASE("a line longer than the limit is cut, so memory stays bounded") {
  const std::size_t max = limits::kMaxLogLineBytes;
  // Exactly the limit: still one line.
  CHECK(FeedAll(std::string(max, 'x') + "\n") == "P " + std::string(max, 'x') + "\n");
  // Over it: cut at the limit with a newline added, whatever the chunking.
  const std::string in = std::string(max + 10, 'y') + "\n";
  const std::string want = "P " + std::string(max, 'y') + "\nP " + std::string(10, 'y') + "\n";
  CHECK(FeedAll(in) == want);
  CHECK(FeedChunked(in, 4096, "P ") == want);
  LinePrefixer p("P ");
  std::string out;
  for (int i = 0; i < 3; ++i) p.Feed(std::string(max, 'z'), out);
  CHECK(p.pending_bytes() <= max);
}

TEST_CASE("100 000 lines are fast in 1-byte and in 64 KiB chunks") {
  std::string in, want;
  for (int i = 0; i < 100000; ++i) {
    const std::string line = "step " + std::to_string(i) + (i % 3 == 0 ? "\r" : "\n");
    in += line;
    want += "(head, rank=0, pid=1) " + line;
  }
  want += "\n";  // the input ends with a '\r' (i = 99999 is divisible by 3)
  for (std::size_t chunk : {std::size_t{1}, std::size_t{64} << 10}) {
    const auto start = std::chrono::steady_clock::now();
    const std::string out = FeedChunked(in, chunk, "(head, rank=0, pid=1) ");
    const auto took = std::chrono::steady_clock::now() - start;
    CAPTURE(chunk);
    CHECK(out == want);
    // Linear: well under 100 ms here; a quadratic rescan of the held bytes would take minutes.
    CHECK(took < std::chrono::seconds(3));
  }
}

}  // namespace
}  // namespace herd::agent
