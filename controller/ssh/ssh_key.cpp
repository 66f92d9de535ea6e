#include "controller/ssh/ssh_key.hpp"

#include <openssl/evp.h>
#include <openssl/rand.h>

#include <cstdint>
#include <memory>

#include "shared/common/file_util.hpp"

namespace herd::controller {
namespace {

// SSH wire encoding (RFC 4251): uint32 big-endian, string = uint32 length + bytes.
void PutU32(std::string& out, uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8)
    out.push_back(static_cast<char>((v >> shift) & 0xff));
}
void PutString(std::string& out, std::string_view s) {
  PutU32(out, static_cast<uint32_t>(s.size()));
  out.append(s);
}

std::string Base64(std::string_view bytes) {
  std::string out(4 * ((bytes.size() + 2) / 3) + 1, '\0');
  int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                          reinterpret_cast<const unsigned char*>(bytes.data()),
                          static_cast<int>(bytes.size()));
  out.resize(static_cast<size_t>(n));
  return out;
}

}  // namespace

Status MakeEd25519KeyPair(const std::string& path, const std::string& comment) {
  std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)> key(
      EVP_PKEY_Q_keygen(nullptr, nullptr, "ED25519"), &EVP_PKEY_free);
  if (!key) return Internal("cannot make an Ed25519 key (OpenSSL)");
  std::string seed(32, '\0'), pub(32, '\0');
  size_t seed_len = seed.size(), pub_len = pub.size();
  if (EVP_PKEY_get_raw_private_key(key.get(), reinterpret_cast<unsigned char*>(seed.data()),
                                   &seed_len) != 1 ||
      EVP_PKEY_get_raw_public_key(key.get(), reinterpret_cast<unsigned char*>(pub.data()),
                                  &pub_len) != 1 ||
      seed_len != 32 || pub_len != 32) {
    return Internal("cannot read the Ed25519 key's raw bytes (OpenSSL)");
  }
  std::string public_blob;
  PutString(public_blob, "ssh-ed25519");
  PutString(public_blob, pub);

  // PROTOCOL.key in OpenSSH's sources: the private section holds a check number twice (equal:
  // how ssh tells a wrong passphrase), the key (the secret half is seed || public key) and the
  // comment, padded 1, 2, 3, ... to the cipher's block size (8 for "none").
  uint32_t check = 0;
  if (RAND_bytes(reinterpret_cast<unsigned char*>(&check), sizeof check) != 1) {
    return Internal("cannot draw random bytes (OpenSSL)");
  }
  std::string secret;
  PutU32(secret, check);
  PutU32(secret, check);
  PutString(secret, "ssh-ed25519");
  PutString(secret, pub);
  std::string secret_half = seed + pub;
  PutString(secret, secret_half);
  OPENSSL_cleanse(secret_half.data(), secret_half.size());
  PutString(secret, comment);
  for (char pad = 1; secret.size() % 8 != 0; ++pad) secret.push_back(pad);

  std::string blob("openssh-key-v1", 15);  // with its NUL
  PutString(blob, "none");                 // cipher
  PutString(blob, "none");                 // kdf
  PutString(blob, "");                     // kdf options
  PutU32(blob, 1);                         // keys
  PutString(blob, public_blob);
  PutString(blob, secret);
  OPENSSL_cleanse(seed.data(), seed.size());

  std::string pem = "-----BEGIN OPENSSH PRIVATE KEY-----\n";
  const std::string b64 = Base64(blob);
  for (size_t i = 0; i < b64.size(); i += 70) pem += b64.substr(i, 70) + "\n";
  pem += "-----END OPENSSH PRIVATE KEY-----\n";
  OPENSSL_cleanse(secret.data(), secret.size());
  OPENSSL_cleanse(blob.data(), blob.size());

  // The public half after the private one: a reader that finds path.pub finds its key too.
  Status s = WriteFileAtomic(path, pem, 0600);
  OPENSSL_cleanse(pem.data(), pem.size());
  HERD_RETURN_IF_ERROR(s);
  return WriteFileAtomic(path + ".pub", "ssh-ed25519 " + Base64(public_blob) + " " + comment + "\n",
                         0644);
}

}  // namespace herd::controller
