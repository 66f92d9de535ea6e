#include "controller/optimizer/catalog.hpp"

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>

#include "controller/state/herd_home.hpp"
#include "shared/common/file_util.hpp"
#include "shared/common/limits.hpp"

namespace herd::optimizer {

namespace {

constexpr std::array<std::string_view, 9> kColumns = {
    "InstanceType", "AcceleratorName", "AcceleratorCount", "vCPUs",           "MemoryGiB",
    "Price",        "SpotPrice",       "Region",           "AvailabilityZone"};
enum Column { kType, kAcc, kAccCount, kVcpus, kMemory, kPrice, kSpot, kRegion, kZone };

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r'))
    s.remove_suffix(1);
  return s;
}

// Splits one CSV line: fields may be quoted ("a,b" and "" for a quote inside).
Result<std::vector<std::string>> SplitCsv(std::string_view line) {
  std::vector<std::string> out;
  std::string field;
  bool quoted = false;
  for (std::size_t i = 0; i < line.size(); ++i) {
    char c = line[i];
    if (quoted) {
      if (c == '"' && i + 1 < line.size() && line[i + 1] == '"') {
        field += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        field += c;
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      out.push_back(std::string(Trim(field)));
      field.clear();
    } else {
      field += c;
    }
  }
  if (quoted) return InvalidArgument("unterminated quote");
  out.push_back(std::string(Trim(field)));
  return out;
}

std::optional<double> Number(std::string_view s) {
  double v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || !std::isfinite(v)) return std::nullopt;
  return v;
}

}  // namespace

std::vector<std::string> Catalog::Accelerators() const {
  std::vector<std::string> out;
  for (const auto& r : rows) {
    if (!r.accelerator.empty() && std::find(out.begin(), out.end(), r.accelerator) == out.end()) {
      out.push_back(r.accelerator);
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<std::string> Catalog::Regions() const {
  std::vector<std::string> out;
  for (const auto& r : rows) {
    if (std::find(out.begin(), out.end(), r.region) == out.end()) out.push_back(r.region);
  }
  return out;
}

Result<Catalog> ParseCatalogCsv(std::string_view text, std::string_view source, std::string cloud) {
  const std::string src(source);
  if (text.size() > limits::kMaxCatalogBytes) {
    return InvalidArgument(src + ": the catalog is " + std::to_string(text.size()) +
                           " bytes; at most " + std::to_string(limits::kMaxCatalogBytes));
  }
  Catalog cat;
  cat.cloud = std::move(cloud);
  cat.source = src;
  std::array<int, kColumns.size()> index;
  index.fill(-1);
  bool have_header = false;
  int line_no = 0;
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t nl = text.find('\n', pos);
    std::string_view line = text.substr(pos, nl == std::string_view::npos ? nl : nl - pos);
    pos = nl == std::string_view::npos ? text.size() : nl + 1;
    ++line_no;
    std::string where = src + ":" + std::to_string(line_no) + ": ";
    if (line.size() > limits::kMaxCatalogLineBytes) {
      return InvalidArgument(where + "line of " + std::to_string(line.size()) + " bytes; at most " +
                             std::to_string(limits::kMaxCatalogLineBytes));
    }
    std::string_view t = Trim(line);
    if (t.empty() || t.front() == '#') continue;
    auto fields = SplitCsv(t);
    if (!fields.ok()) return InvalidArgument(where + fields.status().message());
    if (!have_header) {
      for (std::size_t i = 0; i < fields->size(); ++i) {
        for (std::size_t c = 0; c < kColumns.size(); ++c) {
          if ((*fields)[i] == kColumns[c]) index[c] = static_cast<int>(i);
        }
      }
      for (std::size_t c = 0; c < kColumns.size(); ++c) {
        if (index[c] < 0) {
          return InvalidArgument(where + "the header has no column " + std::string(kColumns[c]) +
                                 " (SkyPilot's columns: InstanceType, AcceleratorName, "
                                 "AcceleratorCount, vCPUs, MemoryGiB, Price, SpotPrice, Region, "
                                 "AvailabilityZone)");
        }
      }
      have_header = true;
      continue;
    }
    if (cat.rows.size() >= limits::kMaxCatalogRows) {
      return InvalidArgument(where + "more than " + std::to_string(limits::kMaxCatalogRows) +
                             " rows");
    }
    auto get = [&](Column c) -> const std::string& {
      static const std::string kEmpty;
      auto i = static_cast<std::size_t>(index[c]);
      return i < fields->size() ? (*fields)[i] : kEmpty;
    };
    CatalogRow row;
    row.line = line_no;
    row.instance_type = get(kType);
    row.accelerator = get(kAcc);
    row.region = get(kRegion);
    row.zone = get(kZone);
    if (row.instance_type.empty()) return InvalidArgument(where + "InstanceType is empty");
    if (row.region.empty()) return InvalidArgument(where + "Region is empty");
    auto number = [&](Column c, bool optional, bool positive,
                      const char* what) -> Result<std::optional<double>> {
      const std::string& v = get(c);
      if (v.empty()) {
        if (optional) return std::optional<double>();
        return InvalidArgument(where + std::string(kColumns[c]) + " is empty; expected " + what);
      }
      auto n = Number(v);
      if (!n || *n < 0 || (positive && *n == 0)) {
        return InvalidArgument(where + std::string(kColumns[c]) + ": '" + v + "' is not " + what);
      }
      return std::optional<double>(*n);
    };
    HERD_ASSIGN_OR_RETURN(auto vcpus, number(kVcpus, false, true, "a positive number of vCPUs"));
    HERD_ASSIGN_OR_RETURN(auto mem, number(kMemory, false, true, "a positive number of GiB"));
    HERD_ASSIGN_OR_RETURN(row.price, number(kPrice, true, false, "a price in USD per hour"));
    HERD_ASSIGN_OR_RETURN(row.spot_price,
                          number(kSpot, true, false, "a spot price in USD per hour"));
    HERD_ASSIGN_OR_RETURN(auto count, number(kAccCount, row.accelerator.empty(), true,
                                             "a positive accelerator count"));
    row.vcpus = *vcpus;
    row.memory_gib = *mem;
    if (!row.accelerator.empty()) {
      row.accelerator_count = *count;
    } else if (count) {
      return InvalidArgument(where + "AcceleratorCount is " + get(kAccCount) +
                             " but AcceleratorName is empty");
    }
    cat.rows.push_back(std::move(row));
  }
  if (!have_header) return InvalidArgument(src + ": no header row (InstanceType,...)");
  return cat;
}

Result<Catalog> LoadCatalogFile(const std::string& path, std::string cloud) {
  HERD_ASSIGN_OR_RETURN(std::string text, ReadFile(path, limits::kMaxCatalogBytes));
  return ParseCatalogCsv(text, path, std::move(cloud));
}

std::string UserAwsCatalogPath() { return controller::HerdHome() + "/catalogs/aws.csv"; }

Result<Catalog> LoadAwsCatalog() {
  auto user = LoadCatalogFile(UserAwsCatalogPath());
  if (user.ok() || user.status().code() != Code::kNotFound) return user;
  return ParseCatalogCsv(BuiltinAwsCatalogCsv(), "<built-in aws.csv>");
}

}  // namespace herd::optimizer
