#include "shared/crypto/secret_box.hpp"

#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <filesystem>
#include <memory>

#include "shared/common/file_util.hpp"

namespace herd {
namespace {

struct CtxFree {
  void operator()(EVP_CIPHER_CTX* c) const { EVP_CIPHER_CTX_free(c); }
};
using Ctx = std::unique_ptr<EVP_CIPHER_CTX, CtxFree>;

std::string Octal(mode_t mode) {
  char buf[8];
  std::snprintf(buf, sizeof(buf), "%04o", static_cast<unsigned>(mode & 07777));
  return buf;
}

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

}  // namespace

SecretBox::SecretBox(std::string path, const unsigned char* key) : path_(std::move(path)) {
  std::copy(key, key + kKeyBytes, key_.begin());
}

SecretBox::~SecretBox() { OPENSSL_cleanse(key_.data(), key_.size()); }

Result<SecretBox> SecretBox::Load(const std::string& path) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK));
  if (fd.get() < 0) {
    if (errno == ENOENT) return NotFound("secrets key " + path + " does not exist");
    if (errno == ELOOP) {
      return FailedPrecondition("secrets key " + path +
                                " is a symbolic link; it must be a regular file (mode 0600)");
    }
    return ErrnoError("cannot open secrets key " + path, errno);
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return ErrnoError("cannot stat secrets key " + path, errno);
  if (!S_ISREG(st.st_mode)) {
    return FailedPrecondition("secrets key " + path + " is not a regular file");
  }
  if (st.st_uid != ::geteuid()) {
    return FailedPrecondition("secrets key " + path + " is owned by uid " +
                              std::to_string(st.st_uid) + ", not by this process's user (uid " +
                              std::to_string(::geteuid()) + ")");
  }
  if ((st.st_mode & 077) != 0) {
    return FailedPrecondition("secrets key " + path + " has mode " + Octal(st.st_mode) +
                              ": group or others may read it; it must be 0600 (chmod 600 " + path +
                              ")");
  }
  if (st.st_size != static_cast<off_t>(kKeyBytes)) {
    return FailedPrecondition("secrets key " + path + " holds " + std::to_string(st.st_size) +
                              " bytes, a herd secrets key holds " + std::to_string(kKeyBytes) +
                              " (damaged, or not a key file)");
  }
  unsigned char key[kKeyBytes];
  std::size_t got = 0;
  while (got < kKeyBytes) {
    ssize_t n = ::read(fd.get(), key + got, kKeyBytes - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      OPENSSL_cleanse(key, sizeof(key));
      return n < 0 ? ErrnoError("cannot read secrets key " + path, errno)
                   : IoError("secrets key " + path + " ended early");
    }
    got += static_cast<std::size_t>(n);
  }
  SecretBox box(path, key);
  OPENSSL_cleanse(key, sizeof(key));
  return box;
}

Result<SecretBox> SecretBox::Create(const std::string& path) {
  unsigned char key[kKeyBytes];
  if (RAND_bytes(key, sizeof(key)) != 1) return Internal("no random bytes for a secrets key");
  // Not WriteFileAtomic, whose rename replaces a file: written whole under a temporary name, then
  // linked into place. link() never replaces a file, so when another process created the key
  // first, it wins and its key is the one used.
  // Named by thread id, unique among live threads of all processes: threads of one process that
  // create the same key at once (two stores opened at once) do not remove each other's file.
  const std::string tmp = path + ".tmp." + std::to_string(::gettid());
  ::unlink(tmp.c_str());  // a leftover of a crashed run with this id
  {
    Fd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
    if (fd.get() < 0) {
      OPENSSL_cleanse(key, sizeof(key));
      return ErrnoError("cannot create secrets key " + tmp, errno);
    }
    int err = WriteAll(fd.get(), std::string_view(reinterpret_cast<const char*>(key), sizeof(key)));
    if (err == 0 && ::fsync(fd.get()) != 0) err = errno;
    if (err != 0) {
      OPENSSL_cleanse(key, sizeof(key));
      ::unlink(tmp.c_str());
      return ErrnoError("cannot write secrets key " + tmp, err);
    }
  }
  OPENSSL_cleanse(key, sizeof(key));
  const int linked = ::link(tmp.c_str(), path.c_str());
  const int link_errno = errno;
  ::unlink(tmp.c_str());
  if (linked != 0 && link_errno != EEXIST) {
    return ErrnoError("cannot create secrets key " + path, link_errno);
  }
  SyncParentDir(path);
  return Load(path);  // ours, or the one another process linked first
}

Result<std::string> SecretBox::Seal(std::string_view plaintext, std::string_view context) const {
  if (plaintext.size() > static_cast<std::size_t>(INT_MAX) - kTagBytes ||
      context.size() > static_cast<std::size_t>(INT_MAX)) {
    return InvalidArgument("secrets too large to seal");
  }
  std::string out(1 + kNonceBytes + plaintext.size() + kTagBytes, '\0');
  auto* bytes = reinterpret_cast<unsigned char*>(out.data());
  bytes[0] = kFormat;
  unsigned char* nonce = bytes + 1;
  unsigned char* body = nonce + kNonceBytes;
  unsigned char* tag = body + plaintext.size();
  if (RAND_bytes(nonce, kNonceBytes) != 1) return Internal("no random bytes for a nonce");
  Ctx ctx(EVP_CIPHER_CTX_new());
  int len = 0, tail = 0;
  if (!ctx || EVP_EncryptInit_ex(ctx.get(), EVP_aes_256_gcm(), nullptr, nullptr, nullptr) != 1 ||
      EVP_CIPHER_CTX_ctrl(ctx.get(), EVP_CTRL_GCM_SET_IVLEN, kNonceBytes, nullptr) != 1 ||
      EVP_EncryptInit_ex(ctx.get(), nullptr, nullptr, key_.data(), nonce) != 1 ||
      EVP_EncryptUpdate(ctx.get(), nullptr, &len,
                        reinterpret_cast<const unsigned char*>(context.data()),
                        static_cast<int>(context.size())) != 1 ||
      EVP_EncryptUpdate(ctx.get(), body, &len,
                        reinterpret_cast<const unsigned char*>(plaintext.data()),
                        static_cast<int>(plaintext.size())) != 1 ||
      EVP_EncryptFinal_ex(ctx.get(), body + len, &tail) != 1 ||
      EVP_CIPHER_CTX_ctrl(ctx.get(), EVP_CTRL_GCM_GET_TAG, kTagBytes, tag) != 1) {
    return Internal("AES-256-GCM encryption failed");
  }
  return out;
}

Result<std::string> SecretBox::Open(std::string_view sealed, std::string_view context) const {
  if (sealed.size() < 1 + kNonceBytes + kTagBytes ||
      static_cast<unsigned char>(sealed[0]) != kFormat ||
      sealed.size() > static_cast<std::size_t>(INT_MAX) ||
      context.size() > static_cast<std::size_t>(INT_MAX)) {
    return InvalidArgument("not a sealed value of format " + std::to_string(kFormat));
  }
  const auto* bytes = reinterpret_cast<const unsigned char*>(sealed.data());
  const unsigned char* nonce = bytes + 1;
  const unsigned char* body = nonce + kNonceBytes;
  const std::size_t body_size = sealed.size() - 1 - kNonceBytes - kTagBytes;
  unsigned char tag[kTagBytes];
  std::copy(body + body_size, body + body_size + kTagBytes, tag);
  std::string out(body_size, '\0');
  auto* plain = reinterpret_cast<unsigned char*>(out.data());
  Ctx ctx(EVP_CIPHER_CTX_new());
  int len = 0, tail = 0;
  if (!ctx || EVP_DecryptInit_ex(ctx.get(), EVP_aes_256_gcm(), nullptr, nullptr, nullptr) != 1 ||
      EVP_CIPHER_CTX_ctrl(ctx.get(), EVP_CTRL_GCM_SET_IVLEN, kNonceBytes, nullptr) != 1 ||
      EVP_DecryptInit_ex(ctx.get(), nullptr, nullptr, key_.data(), nonce) != 1 ||
      EVP_DecryptUpdate(ctx.get(), nullptr, &len,
                        reinterpret_cast<const unsigned char*>(context.data()),
                        static_cast<int>(context.size())) != 1 ||
      EVP_DecryptUpdate(ctx.get(), plain, &len, body, static_cast<int>(body_size)) != 1 ||
      EVP_CIPHER_CTX_ctrl(ctx.get(), EVP_CTRL_GCM_SET_TAG, kTagBytes, tag) != 1) {
    return Internal("AES-256-GCM decryption failed");
  }
  if (EVP_DecryptFinal_ex(ctx.get(), plain + len, &tail) != 1) {
    OPENSSL_cleanse(out.data(), out.size());
    return FailedPrecondition("the secrets do not open with key " + path_ +
                              " (another key, or changed bytes)");
  }
  return out;
}

}  // namespace herd
