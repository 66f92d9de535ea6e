#include "shared/proto/job_state.hpp"

namespace herd::proto {

using namespace herd::v1;

std::string_view JobStateName(JobState state) {
  switch (state) {
    case JOB_STATE_INIT:
      return "INIT";
    case JOB_STATE_PENDING:
      return "PENDING";
    case JOB_STATE_SETTING_UP:
      return "SETTING_UP";
    case JOB_STATE_RUNNING:
      return "RUNNING";
    case JOB_STATE_SUCCEEDED:
      return "SUCCEEDED";
    case JOB_STATE_FAILED:
      return "FAILED";
    case JOB_STATE_FAILED_SETUP:
      return "FAILED_SETUP";
    case JOB_STATE_FAILED_DRIVER:
      return "FAILED_DRIVER";
    case JOB_STATE_CANCELLED:
      return "CANCELLED";
    default:
      return "UNKNOWN";
  }
}

bool IsTerminal(JobState state) {
  return state == JOB_STATE_SUCCEEDED || state == JOB_STATE_FAILED ||
         state == JOB_STATE_FAILED_SETUP || state == JOB_STATE_FAILED_DRIVER ||
         state == JOB_STATE_CANCELLED;
}

}  // namespace herd::proto
