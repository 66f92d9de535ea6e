// doctest's main for every unit test program, plus skipping: a test case that cannot run here (it
// needs root, `ip netns`, sshd) calls herd::testing::Skip, and a program whose test cases that ran
// all skipped themselves exits with HERD_TEST_SKIP_CODE, which ctest reports as skipped
// (SKIP_RETURN_CODE, set by herd_unit_test from the same CMake variable), never as passed.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <set>
#include <string>

#include "tests/unit/test_support.hpp"

namespace herd::testing {
namespace {

// The test cases that ran and those that called Skip, by name (a test case with subcases starts
// once and is re-entered for each further subcase).
struct Tally {
  std::set<std::string> ran;
  std::set<std::string> skipped;
  std::string current;
};

Tally& TheTally() {
  static Tally tally;
  return tally;
}

class SkipListener : public doctest::IReporter {
 public:
  explicit SkipListener(const doctest::ContextOptions&) {}
  void report_query(const doctest::QueryData&) override {}
  void test_run_start() override {}
  void test_run_end(const doctest::TestRunStats&) override {}
  void test_case_start(const doctest::TestCaseData& tc) override {
    TheTally().current = tc.m_name;
    TheTally().ran.insert(tc.m_name);
  }
  void test_case_reenter(const doctest::TestCaseData&) override {}
  void test_case_end(const doctest::CurrentTestCaseStats&) override {}
  void test_case_exception(const doctest::TestCaseException&) override {}
  void subcase_start(const doctest::SubcaseSignature&) override {}
  void subcase_end() override {}
  void log_assert(const doctest::AssertData&) override {}
  void log_message(const doctest::MessageData&) override {}
  void test_case_skipped(const doctest::TestCaseData&) override {}
};

REGISTER_LISTENER("herd_skip", 1, SkipListener);

}  // namespace

void Skip(const std::string& why, std::source_location where) {
  ADD_MESSAGE_AT(where.file_name(), static_cast<int>(where.line()), "skipped: " << why);
  TheTally().skipped.insert(TheTally().current);
}

}  // namespace herd::testing

int main(int argc, char** argv) {
  doctest::Context context(argc, argv);
  int rc = context.run();
  if (context.shouldExit() || rc != 0) return rc;
  const auto& tally = herd::testing::TheTally();
  if (!tally.ran.empty() && tally.skipped == tally.ran) return HERD_TEST_SKIP_CODE;
  return 0;
}
