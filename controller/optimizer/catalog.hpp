// Instance catalogs in SkyPilot's CSV columns (InstanceType, AcceleratorName, AcceleratorCount,
// vCPUs, MemoryGiB, Price, SpotPrice, Region, AvailabilityZone), one row per type and region (or
// zone). Lines starting with '#' are comments (the built-in file's provenance). An empty Price or
// SpotPrice means "not offered that way / not priced"; an empty AvailabilityZone means "any zone of
// the region". Every malformed field is one InvalidArgument naming "file:line: Column: ...".
//
// The built-in AWS catalog (controller/optimizer/catalog/aws.csv, compiled in; README.md there says
// how it was made and how scripts/aws_catalog.py regenerates it) is replaced by
// $HERD_HOME/catalogs/aws.csv when that file exists.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "shared/common/status.hpp"

namespace herd::optimizer {

struct CatalogRow {
  std::string instance_type;     // "p4d.24xlarge"
  std::string accelerator;       // "A100"; "" for CPU types
  double accelerator_count = 0;  // 0 for CPU types
  double vcpus = 0;
  double memory_gib = 0;
  std::optional<double> price;       // on-demand USD per hour
  std::optional<double> spot_price;  // USD per hour
  std::string region;                // "us-east-1"
  std::string zone;                  // "us-east-1a", "" = any zone of the region
  int line = 0;                      // in the source, for messages
};

struct Catalog {
  std::string cloud;   // "aws"
  std::string source;  // the file, or "<built-in aws.csv>"
  std::vector<CatalogRow> rows;

  // Distinct accelerator names (catalog spelling), sorted; regions in first-seen order.
  std::vector<std::string> Accelerators() const;
  std::vector<std::string> Regions() const;
};

// Parses catalog text. The header row must name the nine columns (any order; extra columns are
// ignored). Limits: limits::kMaxCatalogBytes, kMaxCatalogRows, kMaxCatalogLineBytes.
Result<Catalog> ParseCatalogCsv(std::string_view text, std::string_view source,
                                std::string cloud = "aws");
// Reads and parses a file (NotFound when it does not exist).
Result<Catalog> LoadCatalogFile(const std::string& path, std::string cloud = "aws");
// The compiled-in AWS catalog text (controller/optimizer/catalog/aws.csv).
std::string_view BuiltinAwsCatalogCsv();
// $HERD_HOME/catalogs/aws.csv when it exists, else the built-in one.
Result<Catalog> LoadAwsCatalog();
// Where LoadAwsCatalog looks first.
std::string UserAwsCatalogPath();

}  // namespace herd::optimizer
