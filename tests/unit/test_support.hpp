// Fixtures the unit tests share: a private temporary directory, a scoped environment variable and
// a temporary HOME, each undoing what it did when the test ends, however it ends; and Skip.
#pragma once

#include <doctest/doctest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <source_location>
#include <string>
#include <string_view>

namespace herd::testing {

// Marks the running test case skipped, saying why (a message at the caller's line); the test case
// then returns. A test program whose test cases that ran all skipped themselves reports itself
// skipped to ctest (tests/unit/doctest_main.cpp), so keep such cases in a doctest test suite of
// their own (herd_unit_test's SKIPPABLE): passing cases beside them would hide the skip.
void Skip(const std::string& why, std::source_location where = std::source_location::current());

// A fresh directory under the system's temporary directory (`<prefix>-XXXXXX`), removed with
// everything in it when the test ends.
class TempDir {
 public:
  explicit TempDir(std::string_view prefix = "herd-test") {
    std::string tmpl =
        (std::filesystem::temp_directory_path() / (std::string(prefix) + "-XXXXXX")).string();
    REQUIRE(::mkdtemp(tmpl.data()) != nullptr);
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  // The path of `name` inside the directory.
  std::string operator/(std::string_view name) const { return path_ + "/" + std::string(name); }
  // Writes `text` to `name` (making its parent directories) and returns its path.
  std::string Write(std::string_view name, std::string_view text) const {
    std::string p = *this / name;
    std::filesystem::create_directories(std::filesystem::path(p).parent_path());
    std::ofstream out(p, std::ios::binary | std::ios::trunc);
    out << text;
    REQUIRE(out.good());
    return p;
  }

 private:
  std::string path_;
};

// Sets (or, with a null value, unsets) an environment variable for the scope and restores the old
// value, or its absence, after.
class ScopedEnv {
 public:
  ScopedEnv(std::string name, const char* value) : name_(std::move(name)) {
    if (const char* old = std::getenv(name_.c_str())) old_ = old;
    if (value != nullptr) {
      ::setenv(name_.c_str(), value, 1);
    } else {
      ::unsetenv(name_.c_str());
    }
  }
  ScopedEnv(std::string name, const std::string& value)
      : ScopedEnv(std::move(name), value.c_str()) {}
  ~ScopedEnv() {
    if (old_) {
      ::setenv(name_.c_str(), old_->c_str(), 1);
    } else {
      ::unsetenv(name_.c_str());
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_;
  std::optional<std::string> old_;
};

// A fresh HOME with HERD_HOME=<it>/herd, removed with everything in it when the test ends.
class TempHome {
 public:
  explicit TempHome(std::string_view prefix = "herd-home")
      : dir_(prefix), home_("HOME", dir_.path()), herd_home_("HERD_HOME", herd()) {}
  const std::string& dir() const { return dir_.path(); }
  std::string herd() const { return dir_ / "herd"; }

 private:
  TempDir dir_;
  ScopedEnv home_, herd_home_;
};

// The whole of a file, or "" when it cannot be read (tests compare contents, a missing file
// included).
inline std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

}  // namespace herd::testing
