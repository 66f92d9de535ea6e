// SHA-256 (OpenSSL EVP) as lowercase hex, the form `sha256sum` prints on a node.
#pragma once

#include <string>
#include <string_view>

#include "shared/common/status.hpp"

namespace herd::controller {

std::string Sha256Hex(std::string_view data);
// Streams the file; NotFound/IoError naming the path when it cannot be read.
Result<std::string> Sha256FileHex(const std::string& path);

}  // namespace herd::controller
