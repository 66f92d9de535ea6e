#include "shared/common/status.hpp"

#include <doctest/doctest.h>

namespace herd {
namespace {

Result<int> Half(int x) {
  if (x % 2 != 0) return InvalidArgument("odd: " + std::to_string(x));
  return x / 2;
}

Result<int> Quarter(int x) {
  HERD_ASSIGN_OR_RETURN(int h, Half(x));
  return Half(h);
}

TEST_CASE("Result carries a value or an error") {
  CHECK(Quarter(8).value() == 2);
  auto r = Quarter(6);
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() == Code::kInvalidArgument);
  CHECK(r.status().message() == "odd: 3");
  CHECK(r.status().WithContext("task.yaml").ToString() == "INVALID_ARGUMENT: task.yaml: odd: 3");
}

}  // namespace
}  // namespace herd
