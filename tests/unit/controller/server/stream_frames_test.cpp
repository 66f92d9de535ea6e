// The frames a command's run travels in (stream_frames.hpp): what EncodeFrame writes comes back
// from FrameDecoder however the stream is cut, and malformed headers fail the decoder for good.
#include "controller/server/stream_frames.hpp"

#include <doctest/doctest.h>

#include <string>
#include <utility>
#include <vector>

#include "shared/common/limits.hpp"

namespace herd::server {
namespace {

using Frames = std::vector<std::pair<char, std::string>>;

struct Collector {
  Frames frames;
  FrameDecoder decoder{[this](FrameTag tag, std::string_view payload) {
    frames.emplace_back(static_cast<char>(tag), std::string(payload));
  }};
};

// A stream with every tag, an empty payload, a payload holding newlines, NUL and header-like
// text, and a large one.
Frames SampleFrames() {
  return {{'R', "req-0123456789abcdef"},
          {'O', "hello\n"},
          {'O', ""},
          {'E', std::string("a\0b\nO 3\nxyz", 11)},
          {'O', std::string(70000, 'x')},
          {'X', "0"}};
}

std::string Encode(const Frames& frames) {
  std::string out;
  for (const auto& [tag, payload] : frames) out += EncodeFrame(static_cast<FrameTag>(tag), payload);
  return out;
}

TEST_CASE("EncodeFrame writes '<tag> <length>\\n<bytes>'") {
  CHECK(EncodeFrame(FrameTag::kStdout, "abc") == "O 3\nabc");
  CHECK(EncodeFrame(FrameTag::kExit, "130") == "X 3\n130");
  CHECK(EncodeFrame(FrameTag::kStderr, "") == "E 0\n");
  CHECK(EncodeFrame(FrameTag::kRequestId, "r") == "R 1\nr");
}

TEST_CASE("a stream fed whole decodes to its frames") {
  Collector c;
  REQUIRE(c.decoder.Feed(Encode(SampleFrames())).ok());
  CHECK(c.frames == SampleFrames());
  CHECK(c.decoder.pending() == 0);
}

TEST_CASE("a stream split in two at every byte boundary decodes the same") {
  // The large frame is left out to keep this quadratic loop small; it is split below.
  Frames sample = SampleFrames();
  sample.erase(sample.begin() + 4);
  const std::string stream = Encode(sample);
  for (std::size_t cut = 0; cut <= stream.size(); ++cut) {
    CAPTURE(cut);
    Collector c;
    REQUIRE(c.decoder.Feed(std::string_view(stream).substr(0, cut)).ok());
    REQUIRE(c.decoder.Feed(std::string_view(stream).substr(cut)).ok());
    CHECK(c.frames == sample);
    CHECK(c.decoder.pending() == 0);
  }
}

TEST_CASE("a stream fed one byte at a time decodes the same") {
  const Frames sample = SampleFrames();
  const std::string stream = Encode(sample);
  Collector c;
  for (char ch : stream) REQUIRE(c.decoder.Feed(std::string_view(&ch, 1)).ok());
  CHECK(c.frames == sample);
  CHECK(c.decoder.pending() == 0);
}

TEST_CASE("pending counts the bytes of an incomplete frame; no frame before it is whole") {
  Collector c;
  REQUIRE(c.decoder.Feed("O 5\nab").ok());
  CHECK(c.frames.empty());
  CHECK(c.decoder.pending() == 6);
  REQUIRE(c.decoder.Feed("cde").ok());
  CHECK(c.frames == Frames{{'O', "abcde"}});
  CHECK(c.decoder.pending() == 0);
  // A zero-length frame is complete with its header.
  REQUIRE(c.decoder.Feed("E 0\n").ok());
  CHECK(c.frames.back() == std::pair<char, std::string>{'E', ""});
}

TEST_CASE("a frame of kApiMaxFrameBytes is accepted; one byte more is refused") {
  Collector ok;
  const std::string max(limits::kApiMaxFrameBytes, 'y');
  REQUIRE(ok.decoder.Feed(EncodeFrame(FrameTag::kStdout, max)).ok());
  REQUIRE(ok.frames.size() == 1);
  CHECK(ok.frames[0].second.size() == limits::kApiMaxFrameBytes);

  Collector over;
  Status s = over.decoder.Feed("O " + std::to_string(limits::kApiMaxFrameBytes + 1) + "\n");
  CHECK(s.code() == Code::kInvalidArgument);
  CHECK(over.frames.empty());
}

TEST_CASE("malformed headers are refused") {
  const std::vector<std::string> bad = {
      "Z 1\nx",                     // unknown tag
      "o 1\nx",                     // tags are upper case
      "O\nx",                       // no length
      "O \n",                       // empty length
      "O1\nx",                      // no space
      "O  1\nx",                    // two spaces
      "O -1\n",                     // negative
      "O +1\nx",                    // sign
      "O 1x\nx",                    // junk after the length
      "O 0x10\n",                   // hex
      "O 99999999999999999999\n",   // overflows size_t
      "\n",                         // empty header
      "O " + std::string(40, '1'),  // a header that never ends
  };
  for (const auto& stream : bad) {
    CAPTURE(stream);
    Collector c;
    Status s = c.decoder.Feed(stream);
    CHECK(s.code() == Code::kInvalidArgument);
    CHECK(c.frames.empty());
  }
}

TEST_CASE("the header-too-long refusal waits for more than a header's worth of bytes") {
  Collector c;
  // An incomplete but plausible header is not refused yet.
  REQUIRE(c.decoder.Feed("O 12").ok());
  REQUIRE(c.decoder.Feed("\n").ok());
  CHECK(c.decoder.pending() == 5);
  Collector d;
  CHECK(d.decoder.Feed(std::string(33, 'O')).code() == Code::kInvalidArgument);
}

TEST_CASE("frames before a bad header are delivered, and a failed decoder stays failed") {
  Collector c;
  Status s = c.decoder.Feed(EncodeFrame(FrameTag::kStdout, "ok") + "Q 1\nx");
  CHECK(s.code() == Code::kInvalidArgument);
  CHECK(c.frames == Frames{{'O', "ok"}});
  // Valid frames after the failure are not decoded: the stream is out of step for good.
  Status again = c.decoder.Feed(EncodeFrame(FrameTag::kExit, "0"));
  CHECK(again.code() == Code::kInvalidArgument);
  CHECK(again.message() == s.message());
  CHECK(c.frames.size() == 1);
}

}  // namespace
}  // namespace herd::server
