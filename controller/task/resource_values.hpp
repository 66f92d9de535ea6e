// Parsers for the text forms of resource values, shared by the YAML parser and the CLI flags.
// Errors carry only what is wrong with the value; callers add where it came from.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "shared/common/status.hpp"

namespace herd::task {

// A finite number written in full ("4", "0.5", "1e3"); nullopt for anything else.
std::optional<double> ParseNumber(std::string_view text);
// A base-10 integer written in full; nullopt for anything else (and for out-of-range values).
std::optional<long long> ParseInteger(std::string_view text);
// The shortest text that reads back as the same double: 4 -> "4", 0.5 -> "0.5".
std::string FormatNumber(double value);

// "4", "4+", "0.5": a positive amount, optionally "at least". With allow_gb, memory's "32GB"
// and "32GB+" are accepted too.
struct Amount {
  double value = 0;
  bool at_least = false;
};
std::optional<Amount> ParseAmount(std::string_view text, bool allow_gb);

// A size as SkyPilot writes memory and disk_size: a number of GB, or a number with a unit, case
// insensitive: KB/K, MB/M, GB/G, TB/T, PB/P (powers of 1024, as SkyPilot counts them) and the
// IEC forms KiB/Ki ... PiB/Pi; an optional trailing '+' means "at least". value is in GB. Errors
// say what is wrong with the text ("unknown unit 'XB'", "must be positive").
Result<Amount> ParseSize(std::string_view text);

// "L4" (count 1), "L4:4", "T4:0.5".
struct Accelerator {
  std::string name;
  double count = 1;
};
Result<Accelerator> ParseAccelerator(std::string_view text);
// Accelerator names as SkyPilot writes them: "L4", "A100-80GB", "tpu-v4-8", "RTX4090".
bool IsAcceleratorName(std::string_view name);

// A port "8080" or a range "10000-10100", normalised; errors say what is wrong.
Result<std::string> ParsePortRange(std::string_view text);

// image_id's container form: "docker:" then an image reference as podman and docker take one
// ("nvcr.io/nvidia/pytorch:24.01-py3", "localhost/herd-test:1", "repo@sha256:...").
inline constexpr std::string_view kDockerImagePrefix = "docker:";
// The image of "docker:IMAGE"; errors say what is wrong ("expected docker:IMAGE ...").
Result<std::string> ParseContainerImage(std::string_view image_id);

// Leading and trailing spaces and tabs removed.
std::string_view Trim(std::string_view text);

}  // namespace herd::task
