#include "controller/bootstrap/sha256.hpp"

#include <openssl/evp.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <memory>

namespace herd::controller {
namespace {

struct CtxFree {
  void operator()(EVP_MD_CTX* c) const { EVP_MD_CTX_free(c); }
};
using Ctx = std::unique_ptr<EVP_MD_CTX, CtxFree>;

std::string Hex(const unsigned char* d, unsigned n) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(n * 2);
  for (unsigned i = 0; i < n; ++i) {
    out.push_back(kDigits[d[i] >> 4]);
    out.push_back(kDigits[d[i] & 0xf]);
  }
  return out;
}

// Digest of whatever `feed` passes to the update callback; "" only on an OpenSSL failure, which
// with SHA-256 means out of memory.
template <typename Feed>
Result<std::string> Digest(Feed feed) {
  Ctx ctx(EVP_MD_CTX_new());
  if (!ctx || EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) != 1) {
    return Internal("OpenSSL: cannot initialise SHA-256");
  }
  HERD_RETURN_IF_ERROR(
      feed([&](const char* p, size_t n) { return EVP_DigestUpdate(ctx.get(), p, n) == 1; }));
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned len = 0;
  if (EVP_DigestFinal_ex(ctx.get(), md, &len) != 1) return Internal("OpenSSL: SHA-256 failed");
  return Hex(md, len);
}

}  // namespace

std::string Sha256Hex(std::string_view data) {
  auto r = Digest([&](auto update) -> Status {
    if (!update(data.data(), data.size())) return Internal("OpenSSL: SHA-256 update failed");
    return Status::Ok();
  });
  return r.ok() ? *r : std::string();
}

Result<std::string> Sha256FileHex(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    int err = errno;
    if (err == ENOENT) return NotFound("cannot read " + path + ": no such file");
    return IoError("cannot read " + path + ": " + std::strerror(err));
  }
  return Digest([&](auto update) -> Status {
    std::unique_ptr<char[]> buf(new char[1 << 20]);
    while (in) {
      in.read(buf.get(), 1 << 20);
      std::streamsize got = in.gcount();
      if (got > 0 && !update(buf.get(), static_cast<size_t>(got))) {
        return Internal("OpenSSL: SHA-256 update failed");
      }
    }
    if (in.bad()) return IoError("cannot read " + path);
    return Status::Ok();
  });
}

}  // namespace herd::controller
