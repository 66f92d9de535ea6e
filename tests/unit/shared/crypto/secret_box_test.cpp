#include "shared/crypto/secret_box.hpp"
#include "tests/unit/test_support.hpp"

#include <doctest/doctest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace herd {
namespace {

namespace fs = std::filesystem;

using herd::testing::TempDir;

void WriteBytes(const std::string& path, const std::string& bytes, mode_t mode) {
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << bytes;
  }
  REQUIRE(::chmod(path.c_str(), mode) == 0);
}

TEST_CASE("seal and open round-trip; each seal has a fresh nonce") {
  TempDir dir{"herd-secretbox"};
  auto box = SecretBox::Create(dir / "k");
  REQUIRE_MESSAGE(box.ok(), box.status().ToString());
  const std::string secret = "hf_abcdef0123456789";
  auto a = box->Seal(secret, "job 1");
  auto b = box->Seal(secret, "job 1");
  REQUIRE((a.ok() && b.ok()));
  CHECK(*a != *b);
  CHECK(a->size() == 1 + SecretBox::kNonceBytes + secret.size() + SecretBox::kTagBytes);
  CHECK(a->find(secret) == std::string::npos);
  CHECK(box->Open(*a, "job 1").value() == secret);
  CHECK(box->Open(*b, "job 1").value() == secret);
  CHECK(box->Open(box->Seal("", "c").value(), "c").value().empty());
}

TEST_CASE("a changed byte, another context or another key does not open") {
  TempDir dir{"herd-secretbox"};
  auto box = SecretBox::Create(dir / "k").value();
  auto other = SecretBox::Create(dir / "other").value();
  const std::string sealed = box.Seal("value", "job 1").value();
  CHECK(box.Open(sealed, "job 2").status().code() == Code::kFailedPrecondition);
  auto wrong = other.Open(sealed, "job 1");
  CHECK(wrong.status().code() == Code::kFailedPrecondition);
  CHECK(wrong.status().message().find(dir / "other") != std::string::npos);
  for (std::size_t i = 1; i < sealed.size(); i += 7) {
    std::string bad = sealed;
    bad[i] = static_cast<char>(bad[i] ^ 0x01);
    CHECK_FALSE(box.Open(bad, "job 1").ok());
  }
  CHECK(box.Open("", "job 1").status().code() == Code::kInvalidArgument);
  CHECK(box.Open(std::string(40, '\x02'), "job 1").status().code() == Code::kInvalidArgument);
  CHECK(box.Open(sealed.substr(0, 20), "job 1").status().code() == Code::kInvalidArgument);
}

TEST_CASE("Create makes a 0600 key of 32 bytes and never replaces an existing one") {
  TempDir dir{"herd-secretbox"};
  const std::string path = dir / "secrets.key";
  auto first = SecretBox::Create(path).value();
  struct stat st {};
  REQUIRE(::stat(path.c_str(), &st) == 0);
  CHECK((st.st_mode & 07777) == 0600);
  CHECK(st.st_size == 32);
  // A second Create (another process racing the first) loads the same key.
  auto second = SecretBox::Create(path).value();
  CHECK(second.Open(first.Seal("x", "c").value(), "c").value() == "x");
  CHECK(SecretBox::Load(path).value().Open(first.Seal("y", "c").value(), "c").value() == "y");
  CHECK(fs::directory_iterator(fs::path(path).parent_path()) != fs::directory_iterator());
  int files = 0;
  for (const auto& e : fs::directory_iterator(fs::path(path).parent_path())) {
    (void)e;
    ++files;
  }
  CHECK(files == 1);  // no temporary file left behind
}

TEST_CASE("threads creating one key at once all get the same key") {
  TempDir dir{"herd-secretbox"};
  const std::string path = dir / "secrets.key";
  constexpr int kThreads = 8;
  std::vector<std::optional<Result<SecretBox>>> boxes(kThreads);
  std::atomic<int> ready{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] {
      ++ready;
      while (ready < kThreads) std::this_thread::yield();
      boxes[static_cast<std::size_t>(i)].emplace(SecretBox::Create(path));
    });
  }
  for (auto& t : threads) t.join();
  const std::string sealed = SecretBox::Load(path).value().Seal("x", "c").value();
  for (auto& box : boxes) {
    REQUIRE_MESSAGE(box->ok(), box->status().ToString());
    CHECK((*box)->Open(sealed, "c").value() == "x");
  }
  int files = 0;
  for (const auto& e : fs::directory_iterator(dir.path())) {
    (void)e;
    ++files;
  }
  CHECK(files == 1);  // no temporary file left behind
}

TEST_CASE("bad key files: each error names the file and says what is wrong") {
  TempDir dir{"herd-secretbox"};
  const std::string path = dir / "secrets.key";
  const std::string key(32, 'k');
  auto load_error = [&]() {
    auto box = SecretBox::Load(path);
    REQUIRE_FALSE(box.ok());
    CHECK(box.status().message().find(path) != std::string::npos);
    return box.status();
  };
  SUBCASE("missing") { CHECK(load_error().code() == Code::kNotFound); }
  SUBCASE("readable by others") {
    WriteBytes(path, key, 0644);
    Status s = load_error();
    CHECK(s.code() == Code::kFailedPrecondition);
    CHECK(s.message().find("mode 0644") != std::string::npos);
    CHECK(s.message().find("chmod 600") != std::string::npos);
  }
  SUBCASE("writable by the group") {
    WriteBytes(path, key, 0620);
    CHECK(load_error().message().find("mode 0620") != std::string::npos);
  }
  SUBCASE("too short") {
    WriteBytes(path, key.substr(0, 31), 0600);
    CHECK(load_error().message().find("holds 31 bytes") != std::string::npos);
  }
  SUBCASE("empty") {
    WriteBytes(path, "", 0600);
    CHECK(load_error().message().find("holds 0 bytes") != std::string::npos);
  }
  SUBCASE("a symbolic link to a good key") {
    WriteBytes(dir / "real", key, 0600);
    REQUIRE(::symlink((dir / "real").c_str(), path.c_str()) == 0);
    CHECK(load_error().message().find("symbolic link") != std::string::npos);
  }
  SUBCASE("a directory") {
    fs::create_directory(path);
    CHECK(load_error().message().find("not a regular file") != std::string::npos);
  }
  SUBCASE("a good one loads") {
    WriteBytes(path, key, 0600);
    CHECK(SecretBox::Load(path).ok());
  }
}

TEST_CASE("a key file owned by another user is refused, naming the file and the owner" *
          doctest::test_suite("root")) {
  if (::geteuid() != 0) return testing::Skip("giving the key file to another user needs root");
  TempDir dir{"herd-secretbox"};
  const std::string path = dir / "secrets.key";
  WriteBytes(path, std::string(32, 'k'), 0600);
  REQUIRE(::chown(path.c_str(), 61018, 61018) == 0);
  auto box = SecretBox::Load(path);
  REQUIRE_FALSE(box.ok());
  CHECK(box.status().message().find(path) != std::string::npos);
  CHECK(box.status().message().find("owned by uid 61018") != std::string::npos);
}

}  // namespace
}  // namespace herd
