#include "shared/common/file_util.hpp"
#include "shared/common/temp_file.hpp"
#include "tests/unit/test_support.hpp"

#include <doctest/doctest.h>
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>

namespace herd {
namespace {

using herd::testing::TempDir;

TEST_CASE("ReadFile: the whole file, or an error that names the path") {
  TempDir dir{"herd-file-util-test"};
  const std::string path = dir.Write("f", std::string(40000, 'x') + "end");
  CHECK(ReadFile(path).value() == std::string(40000, 'x') + "end");

  auto missing = ReadFile(dir / "missing");
  CHECK(missing.status().code() == Code::kNotFound);
  CHECK(missing.status().message() ==
        "cannot read " + (dir / "missing") + ": No such file or directory");
  auto directory = ReadFile(dir.path());
  CHECK(directory.status().code() == Code::kIo);
  CHECK(directory.status().message() == "cannot read " + dir.path() + ": Is a directory");
}

TEST_CASE("ReadFile with a bound refuses a larger file before reading, a stream once over it") {
  TempDir dir{"herd-file-util-test"};
  const std::string path = dir.Write("f", "0123456789");
  CHECK(ReadFile(path, 10).value() == "0123456789");
  auto big = ReadFile(path, 9);
  CHECK(big.status().code() == Code::kInvalidArgument);
  CHECK(big.status().message() == path + ": the file is 10 bytes");
  // Not a regular file: no size to check first, so it is read until it passes the bound.
  auto endless = ReadFile("/dev/zero", 100);
  CHECK(endless.status().code() == Code::kInvalidArgument);
  CHECK(endless.status().message() == "/dev/zero: the file is more than 100 bytes");
}

TEST_CASE("ReadFileIfExists: nothing for a missing file, the error of any other failure") {
  TempDir dir{"herd-file-util-test"};
  CHECK_FALSE(ReadFileIfExists(dir / "missing").value().has_value());
  CHECK(ReadFileIfExists(dir.Write("f", "text")).value() == std::optional<std::string>("text"));
  CHECK(ReadFileIfExists(dir.path()).status().message() ==
        "cannot read " + dir.path() + ": Is a directory");
}

TEST_CASE("WriteAll writes everything or gives the errno of the failed write") {
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  CHECK(WriteAll(fds[1], "hello") == 0);
  char buf[8] = {};
  CHECK(::read(fds[0], buf, sizeof buf) == 5);
  CHECK(std::string(buf) == "hello");
  ::close(fds[0]);
  ::signal(SIGPIPE, SIG_IGN);
  CHECK(WriteAll(fds[1], "x") == EPIPE);  // no reader left
  ::close(fds[1]);
}

TEST_CASE("WriteFileAtomic with either durability leaves the whole file and no temporaries") {
  TempDir dir{"herd-file-util-test"};
  for (Durability d : {Durability::kPowerLoss, Durability::kProcessCrash}) {
    REQUIRE(WriteFileAtomic(dir / "f", "first", 0600, d).ok());
    REQUIRE(WriteFileAtomic(dir / "f", "second", 0600, d).ok());
    CHECK(ReadFile(dir / "f").value() == "second");
    int entries = 0;
    for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(dir.path())) {
      ++entries;
    }
    CHECK(entries == 1);
  }
}

// A program another thread starts while a file is being written must not hold the file open for
// writing: the bootstrap writes the agent binary into a local node's home while its other threads
// start ssh sessions, and one such session holding the binary's write descriptor made the node's
// herdlet fail to start with "Text file busy" (seen in CI).
TEST_CASE("the temporary file of a write is not inherited by a program started meanwhile") {
  TempDir dir{"herd-file-util-test"};
  auto made = CreateTempFileBeside(dir / "herdlet");
  REQUIRE(made.ok());
  CHECK(made->path.starts_with(dir / ".herdlet."));
  CHECK((::fcntl(made->fd, F_GETFD) & FD_CLOEXEC) != 0);
  const std::string listing = dir / "fds";
  REQUIRE(std::system(("ls -l /proc/self/fd/ > " + listing).c_str()) == 0);
  ::close(made->fd);
  const std::string fds = ReadFile(listing).value();
  CHECK_MESSAGE(fds.find(dir.path()) != std::string::npos, fds);  // the listing itself is there
  CHECK_MESSAGE(fds.find(made->path) == std::string::npos, fds);
}

}  // namespace
}  // namespace herd
