// RunOneCommandArgs (the warm worker's parser of only the command named) against RunCliArgs (the
// parser of every command): the same output, errors and exit codes for reads, help and mistakes,
// on an empty herd home of the test's own.
#include <doctest/doctest.h>

#include <sstream>
#include <string>
#include <vector>

#include "controller/cli/cli.hpp"
#include "tests/unit/test_support.hpp"

namespace {

struct Ran {
  int code;
  std::string out, err;
  bool operator==(const Ran&) const = default;
};

template <class Fn>
Ran RunWith(Fn fn, const std::vector<std::string>& args) {
  std::ostringstream out, err;
  const int code = fn(args, out, err);
  return {code, out.str(), err.str()};
}

}  // namespace

TEST_CASE("a parser of the one command named answers as the parser of every command") {
  herd::testing::TempHome home;
  herd::testing::ScopedEnv local("HERD_API_SERVER", "local");
  const std::vector<std::vector<std::string>> cases = {
      {"status"},
      {"status", "-o", "json"},
      {"queue", "nosuch"},
      {"logs", "nosuch", "1", "--no-follow"},
      {"jobs", "queue"},
      {"nodes", "nosuch"},
      {"status", "--bogus"},                   // an unknown flag
      {"queue"},                               // a missing argument
      {"logs", "nosuch", "x", "--no-follow"},  // a bad job id
      {"status", "--help"},
      {"show-gpus", "--help"},   // an alias
      {"statsu"},                // no such command: every command's parser
      {"status", "--help-all"},  // every command's help
      {"-v", "status"},          // a flag before the verb
  };
  for (const auto& args : cases) {
    std::string words;
    for (const auto& a : args) words += a + " ";
    const Ran all = RunWith(herd::controller::RunCliArgs, args);
    const Ran one = RunWith(herd::controller::RunOneCommandArgs, args);
    CHECK_MESSAGE(one == all, words, "\nall: ", all.code, "\n", all.out, all.err,
                  "\none: ", one.code, "\n", one.out, one.err);
  }
  // Two commands in a row in one process: what the first was given does not reach the second.
  const Ran json = RunWith(herd::controller::RunOneCommandArgs, {"status", "-o", "json"});
  const Ran table = RunWith(herd::controller::RunOneCommandArgs, {"status"});
  CHECK(json.out != table.out);
  CHECK(table == RunWith(herd::controller::RunCliArgs, {"status"}));
}
