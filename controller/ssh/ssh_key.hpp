// SSH key pairs made in-process (OpenSSL), in the files ssh-keygen writes: a program start fewer
// per node on a cold launch (starting ssh-keygen costs far more CPU than making the key).
#pragma once

#include <string>

#include "shared/common/status.hpp"

namespace herd::controller {

// A new Ed25519 key pair: `path` in OpenSSH's private key format ("openssh-key-v1", unencrypted,
// mode 0600) and `path`.pub as "ssh-ed25519 <base64> <comment>" (mode 0644), each written through
// a temporary file, an fsync and a rename. What `ssh-keygen -q -t ed25519 -N "" -C comment -f path`
// makes.
Status MakeEd25519KeyPair(const std::string& path, const std::string& comment);

}  // namespace herd::controller
