// What the managed-job unit tests share: a job as the table in HERD_HOME holds it now.
#pragma once

#include <doctest/doctest.h>

#include <cstdint>

#include "controller/jobs/managed_job_store.hpp"

namespace herd::testing {

inline jobs::ManagedJob StoredJob(int64_t id) {
  auto db = jobs::ManagedJobStore::Open(jobs::ManagedJobsDbPath());
  REQUIRE(db.ok());
  auto job = (*db)->Get(id);
  REQUIRE(job.ok());
  REQUIRE(job->has_value());
  return **job;
}

}  // namespace herd::testing
