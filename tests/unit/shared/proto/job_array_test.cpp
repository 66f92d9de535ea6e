#include "shared/proto/job_array.hpp"

#include <doctest/doctest.h>

#include <vector>

#include "shared/common/limits.hpp"

namespace herd::proto {
namespace {

std::vector<int> Indices(const herd::v1::JobArray& a) {
  return {a.indices().begin(), a.indices().end()};
}

std::string ErrorOf(std::string_view spec) {
  auto r = ParseJobArray(spec);
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() == Code::kInvalidArgument);
  return r.status().message();
}

TEST_CASE("Slurm's array forms: ranges, lists, steps and the running limit") {
  auto a = ParseJobArray("0-99%8");
  REQUIRE(a.ok());
  CHECK(a->indices_size() == 100);
  CHECK(a->indices(0) == 0);
  CHECK(a->indices(99) == 99);
  CHECK(a->max_running() == 8);
  CHECK(a->spec() == "0-99%8");

  auto b = ParseJobArray("1,3,5-7");
  REQUIRE(b.ok());
  CHECK(Indices(*b) == std::vector<int>{1, 3, 5, 6, 7});
  CHECK(b->max_running() == 0);

  auto c = ParseJobArray("0-15:4");
  REQUIRE(c.ok());
  CHECK(Indices(*c) == std::vector<int>{0, 4, 8, 12});

  auto d = ParseJobArray("7");
  REQUIRE(d.ok());
  CHECK(Indices(*d) == std::vector<int>{7});

  // The largest allowed index and a limit above the array's size (kept as the array's size).
  auto e = ParseJobArray("999998-999999%5000");
  REQUIRE(e.ok());
  CHECK(e->max_running() == limits::kMaxArrayJobs);
}

TEST_CASE("bad arrays are refused with the input named and the reason") {
  CHECK(ErrorOf("5-1") == "--array 5-1: the range 5-1 ends before it starts");
  CHECK(ErrorOf("0-9%0") ==
        "--array 0-9%0: the limit after % must be at least 1 (%0 runs nothing)");
  CHECK(ErrorOf("0-9%x").find("the limit after % must be a whole number") != std::string::npos);
  CHECK(ErrorOf("").find("give indices") != std::string::npos);
  CHECK(ErrorOf("%4").find("give indices") != std::string::npos);
  CHECK(ErrorOf("1,,2").find("an empty item between commas") != std::string::npos);
  CHECK(ErrorOf("-3").find("is not a range like 0-99") != std::string::npos);
  CHECK(ErrorOf("a-b").find("is not a range like 0-99") != std::string::npos);
  CHECK(ErrorOf("0-9:0").find("the step after : in 0-9:0 must be at least 1") != std::string::npos);
  CHECK(ErrorOf("3:2").find("a step needs a range") != std::string::npos);
  CHECK(ErrorOf("1,2,1") == "--array 1,2,1: index 1 is given twice");
  CHECK(ErrorOf("0-1000000").find("indices go up to 999999 at most") != std::string::npos);
  CHECK(ErrorOf("0-1000").find("an array holds at most 1000 jobs") != std::string::npos);
  CHECK(ParseJobArray("0-999").ok());  // exactly kMaxArrayJobs
}

TEST_CASE("ValidateJobArray: what the head checks of a submitted array") {
  herd::v1::JobArray a;
  CHECK(ValidateJobArray(a).message() == "the array has no indices");
  a.add_indices(1);
  a.add_indices(1);
  CHECK(ValidateJobArray(a).message() == "array index 1 is given twice");
  a.clear_indices();
  a.add_indices(-1);
  CHECK(ValidateJobArray(a).message().find("outside 0..999999") != std::string::npos);
  a.clear_indices();
  a.add_indices(0);
  a.set_max_running(-2);
  CHECK(ValidateJobArray(a).message() == "the array's running limit is negative");
  a.set_max_running(0);
  CHECK(ValidateJobArray(a).ok());
  for (int i = 1; i <= limits::kMaxArrayJobs; ++i) a.add_indices(i);
  CHECK(ValidateJobArray(a).message().find("at most 1000 jobs, not 1001") != std::string::npos);
}

TEST_CASE("job id lists for --after and --after-ok") {
  auto ids = ParseJobIdList("3,4,9", "--after");
  REQUIRE(ids.ok());
  CHECK(*ids == std::vector<int64_t>{3, 4, 9});
  CHECK(ParseJobIdList("", "--after").status().message().find("give job ids") != std::string::npos);
  CHECK(ParseJobIdList("0", "--after").status().message() == "--after 0: '0' is not a job id");
  CHECK(ParseJobIdList("3,x", "--after-ok").status().message() ==
        "--after-ok 3,x: 'x' is not a job id");
  CHECK(ParseJobIdList("3,3", "--after").status().message() == "--after 3,3: job 3 is given twice");
}

TEST_CASE("DescribeJobArray collapses what ParseJobArray expands") {
  for (const char* spec : {"0-99%8", "0-12:4", "7", "0-1", "2,9", "1-5:2,6-7"}) {
    auto a = ParseJobArray(spec);
    REQUIRE(a.ok());
    CHECK(DescribeJobArray(*a) == spec);
  }
  CHECK(DescribeJobArray(*ParseJobArray("0-15:4")) == "0-12:4");
  CHECK(DescribeJobArray(*ParseJobArray("1,3,5-7")) == "1-5:2,6-7");
}

}  // namespace
}  // namespace herd::proto
