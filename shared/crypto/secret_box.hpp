// Authenticated encryption of secrets at rest (AES-256-GCM, OpenSSL EVP) with a key kept in a file
// of its own: 32 random bytes, mode 0600, owned by the user of the process that uses it. The
// agent's job store seals the secrets of each job with it, so jobs.db (and its WAL, and any copy of
// them) never holds a secret in clear; the API server's store (controller/server/store) seals its
// users' secrets the same way. What it does not protect against: whoever can read the key file
// (that user, root) can decrypt; see docs/ARCHITECTURE.md, "Secrets".
#pragma once

#include <array>
#include <cstddef>
#include <string>
#include <string_view>

#include "shared/common/status.hpp"

namespace herd {

class SecretBox {
 public:
  static constexpr std::size_t kKeyBytes = 32;    // AES-256
  static constexpr std::size_t kNonceBytes = 12;  // GCM's standard IV, random per seal
  static constexpr std::size_t kTagBytes = 16;
  static constexpr unsigned char kFormat = 1;  // first byte of a sealed value

  // Reads an existing key file. Errors (each naming the path): NotFound when it does not exist;
  // FailedPrecondition when it is a symbolic link or not a regular file, is owned by another user,
  // can be read or written by group or others (it must be 0600), or does not hold exactly
  // kKeyBytes bytes.
  static Result<SecretBox> Load(const std::string& path);
  // Makes a new random key file (0600) and returns it. When another process made the file first,
  // that one is loaded instead (never overwritten), so two processes opening one store agree.
  static Result<SecretBox> Create(const std::string& path);

  SecretBox(const SecretBox&) = default;
  SecretBox& operator=(const SecretBox&) = default;
  ~SecretBox();

  // kFormat || nonce || ciphertext || tag. `context` is authenticated, not stored: a value sealed
  // for one context (a job id) does not open for another.
  Result<std::string> Seal(std::string_view plaintext, std::string_view context) const;
  // InvalidArgument for a value that is not in this format, FailedPrecondition when the key is not
  // the one it was sealed with (or the bytes or the context were changed).
  Result<std::string> Open(std::string_view sealed, std::string_view context) const;

  const std::string& path() const { return path_; }

 private:
  SecretBox(std::string path, const unsigned char* key);

  std::string path_;
  std::array<unsigned char, kKeyBytes> key_{};
};

}  // namespace herd
