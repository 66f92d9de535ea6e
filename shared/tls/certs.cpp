#include "shared/tls/certs.hpp"

#include "shared/common/file_util.hpp"

#include <fcntl.h>
#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <memory>
#include <optional>

namespace herd::tls {
namespace {

// RAII owners of OpenSSL objects.
struct Deleter {
  void operator()(BIO* p) const { BIO_free_all(p); }
  void operator()(EVP_PKEY* p) const { EVP_PKEY_free(p); }
  void operator()(X509* p) const { X509_free(p); }
  void operator()(BIGNUM* p) const { BN_free(p); }
  void operator()(X509_EXTENSION* p) const { X509_EXTENSION_free(p); }
  void operator()(GENERAL_NAMES* p) const { GENERAL_NAMES_free(p); }
  void operator()(GENERAL_NAME* p) const { GENERAL_NAME_free(p); }
  void operator()(ASN1_OCTET_STRING* p) const { ASN1_OCTET_STRING_free(p); }
};
template <typename T>
using Owned = std::unique_ptr<T, Deleter>;

// "what: <OpenSSL error queue>", clearing the queue so later calls start clean.
Status SslError(std::string_view what) {
  std::string msg(what);
  bool first = true;
  while (unsigned long err = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(err, buf, sizeof(buf));
    msg += first ? ": " : "; ";
    msg += buf;
    first = false;
  }
  return Internal(std::move(msg));
}

Result<Owned<X509>> ParseCert(std::string_view pem) {
  Owned<BIO> bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  if (!bio) return SslError("BIO_new_mem_buf");
  Owned<X509> cert(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
  if (!cert) {
    ERR_clear_error();
    return InvalidArgument("not a PEM certificate");
  }
  return cert;
}

Result<Owned<EVP_PKEY>> ParseKey(std::string_view pem) {
  Owned<BIO> bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  if (!bio) return SslError("BIO_new_mem_buf");
  Owned<EVP_PKEY> key(PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr));
  if (!key) {
    ERR_clear_error();
    return InvalidArgument("not a PEM private key");
  }
  return key;
}

Result<std::string> BioString(BIO* bio) {
  char* data = nullptr;
  long n = BIO_get_mem_data(bio, &data);
  if (n < 0) return SslError("BIO_get_mem_data");
  return std::string(data, static_cast<std::size_t>(n));
}

Result<Pem> ToPem(X509* cert, EVP_PKEY* key) {
  Owned<BIO> cbio(BIO_new(BIO_s_mem()));
  Owned<BIO> kbio(BIO_new(BIO_s_mem()));
  if (!cbio || !kbio) return SslError("BIO_new");
  if (PEM_write_bio_X509(cbio.get(), cert) != 1) return SslError("PEM_write_bio_X509");
  // PKCS#8, unencrypted: the file mode protects it.
  if (PEM_write_bio_PrivateKey(kbio.get(), key, nullptr, nullptr, 0, nullptr, nullptr) != 1) {
    return SslError("PEM_write_bio_PrivateKey");
  }
  Pem pem;
  HERD_ASSIGN_OR_RETURN(pem.cert, BioString(cbio.get()));
  HERD_ASSIGN_OR_RETURN(pem.key, BioString(kbio.get()));
  return pem;
}

Result<Owned<EVP_PKEY>> NewKey() {
  Owned<EVP_PKEY> key(EVP_EC_gen("P-256"));
  if (!key) return SslError("EVP_EC_gen(P-256)");
  return key;
}

// Fills version, a random positive 128-bit serial, validity and subject of a new certificate.
Status InitCert(X509* cert, const std::vector<std::pair<std::string, std::string>>& subject,
                int valid_days, long not_before_seconds = IssueOptions{}.not_before_seconds) {
  if (valid_days <= 0) return InvalidArgument("valid_days must be positive");
  if (X509_set_version(cert, X509_VERSION_3) != 1) return SslError("X509_set_version");
  unsigned char serial[16];
  if (RAND_bytes(serial, sizeof(serial)) != 1) return SslError("RAND_bytes");
  serial[0] &= 0x7f;  // positive
  serial[0] |= 0x40;  // and a full 16 bytes, so serials never collide by length
  Owned<BIGNUM> bn(BN_bin2bn(serial, sizeof(serial), nullptr));
  if (!bn || !BN_to_ASN1_INTEGER(bn.get(), X509_get_serialNumber(cert))) {
    return SslError("serial number");
  }
  // Valid for valid_days from notBefore.
  if (!X509_gmtime_adj(X509_getm_notBefore(cert), not_before_seconds) ||
      !X509_time_adj_ex(X509_getm_notAfter(cert), valid_days, not_before_seconds, nullptr)) {
    return SslError("validity");
  }
  X509_NAME* name = X509_get_subject_name(cert);
  for (const auto& [field, value] : subject) {
    if (X509_NAME_add_entry_by_txt(name, field.c_str(), MBSTRING_UTF8,
                                   reinterpret_cast<const unsigned char*>(value.data()),
                                   static_cast<int>(value.size()), -1, 0) != 1) {
      return SslError("subject " + field);
    }
  }
  return Status::Ok();
}

// Adds an extension given in OpenSSL's config syntax (values here are fixed strings, never user
// input, so no escaping is needed).
Status AddExt(X509* cert, X509* issuer, int nid, const char* value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  Owned<X509_EXTENSION> ext(X509V3_EXT_conf_nid(nullptr, &ctx, nid, value));
  if (!ext) return SslError(std::string("extension ") + OBJ_nid2sn(nid));
  if (X509_add_ext(cert, ext.get(), -1) != 1) return SslError("X509_add_ext");
  return Status::Ok();
}

// A GENERAL_NAME of an IA5String type (DNS, URI) pushed onto names.
Status PushIa5Name(GENERAL_NAMES* names, int type, std::string_view value) {
  Owned<GENERAL_NAME> gen(GENERAL_NAME_new());
  ASN1_IA5STRING* ia5 = ASN1_IA5STRING_new();
  if (!gen || !ia5 || ASN1_STRING_set(ia5, value.data(), static_cast<int>(value.size())) != 1) {
    ASN1_IA5STRING_free(ia5);
    return SslError("subjectAltName entry");
  }
  GENERAL_NAME_set0_value(gen.get(), type, ia5);
  if (!sk_GENERAL_NAME_push(names, gen.get())) return SslError("sk_GENERAL_NAME_push");
  gen.release();
  return Status::Ok();
}

// subjectAltName built from GENERAL_NAMEs, so that names are never parsed as config syntax.
Status AddSans(X509* cert, const std::vector<std::string>& ips, const std::vector<std::string>& dns,
               const std::vector<std::string>& uris) {
  if (ips.empty() && dns.empty() && uris.empty()) return Status::Ok();
  Owned<GENERAL_NAMES> names(sk_GENERAL_NAME_new_null());
  if (!names) return SslError("sk_GENERAL_NAME_new_null");
  for (const std::string& ip : ips) {
    Owned<ASN1_OCTET_STRING> octets(a2i_IPADDRESS(ip.c_str()));
    if (!octets) {
      ERR_clear_error();
      return InvalidArgument("not an IP address: '" + ip + "'");
    }
    Owned<GENERAL_NAME> gen(GENERAL_NAME_new());
    if (!gen) return SslError("GENERAL_NAME_new");
    GENERAL_NAME_set0_value(gen.get(), GEN_IPADD, octets.release());
    if (!sk_GENERAL_NAME_push(names.get(), gen.get())) return SslError("sk_GENERAL_NAME_push");
    gen.release();
  }
  for (const std::string& name : dns) {
    if (name.empty()) return InvalidArgument("empty DNS name");
    HERD_RETURN_IF_ERROR(PushIa5Name(names.get(), GEN_DNS, name));
  }
  for (const std::string& uri : uris) HERD_RETURN_IF_ERROR(PushIa5Name(names.get(), GEN_URI, uri));
  if (X509_add1_ext_i2d(cert, NID_subject_alt_name, names.get(), 0, X509V3_ADD_DEFAULT) != 1) {
    return SslError("subjectAltName");
  }
  return Status::Ok();
}

// The text of the first `nid` entry of the subject, or NotFound.
Result<std::string> SubjectEntry(const X509* cert, int nid) {
  const X509_NAME* name = X509_get_subject_name(cert);
  int idx = X509_NAME_get_index_by_NID(name, nid, -1);
  if (idx < 0) return NotFound(std::string("certificate has no ") + OBJ_nid2sn(nid));
  const ASN1_STRING* data = X509_NAME_ENTRY_get_data(X509_NAME_get_entry(name, idx));
  unsigned char* utf8 = nullptr;
  int n = ASN1_STRING_to_UTF8(&utf8, data);
  if (n < 0) return SslError("ASN1_STRING_to_UTF8");
  std::string out(reinterpret_cast<char*>(utf8), static_cast<std::size_t>(n));
  OPENSSL_free(utf8);
  return out;
}

bool IsHostName(std::string_view s) {
  if (s.empty() || s.size() > 253 || s.front() == '-' || s.front() == '.') return false;
  for (char c : s) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '-' || c == '.';
    if (!ok) return false;
  }
  return true;
}

// RFC 3986 percent-encoding of everything but the unreserved characters, so that a name can hold
// no '/' (the separator of the node URI) and no byte a URI may not carry.
std::string PercentEncode(std::string_view s) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    bool unreserved = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                      c == '-' || c == '.' || c == '_' || c == '~';
    if (unreserved) {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 0xF];
    }
  }
  return out;
}

std::optional<std::string> PercentDecode(std::string_view s) {
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '%') {
      out += s[i];
      continue;
    }
    if (i + 2 >= s.size()) return std::nullopt;
    int hi = hex(s[i + 1]), lo = hex(s[i + 2]);
    if (hi < 0 || lo < 0) return std::nullopt;
    out += static_cast<char>(hi * 16 + lo);
    i += 2;
  }
  return out;
}

Status MakeDir(const std::string& dir) {
  std::error_code ec;
  bool created = std::filesystem::create_directories(dir, ec);
  if (ec) return IoError("create " + dir + ": " + ec.message());
  // Only a directory made here is narrowed; an existing one keeps the mode its owner chose.
  if (created && ::chmod(dir.c_str(), 0700) != 0) return ErrnoError("chmod " + dir, errno);
  return Status::Ok();
}

std::string Join(const std::string& dir, std::string_view name) {
  return (std::filesystem::path(dir) / name).string();
}

// A leaf certificate signed by `ca` with `subject`, extendedKeyUsage `eku` (config syntax, a fixed
// string) and the SANs of `options` plus `uris`.
Result<Pem> SignLeaf(const Pem& ca, const std::vector<std::pair<std::string, std::string>>& subject,
                     const char* eku, const IssueOptions& options,
                     const std::vector<std::string>& uris) {
  HERD_ASSIGN_OR_RETURN(Owned<X509> ca_cert, ParseCert(ca.cert));
  HERD_ASSIGN_OR_RETURN(Owned<EVP_PKEY> ca_key, ParseKey(ca.key));
  if (X509_check_private_key(ca_cert.get(), ca_key.get()) != 1) {
    ERR_clear_error();
    return InvalidArgument("the CA key does not belong to the CA certificate");
  }
  HERD_ASSIGN_OR_RETURN(Owned<EVP_PKEY> key, NewKey());
  Owned<X509> cert(X509_new());
  if (!cert) return SslError("X509_new");
  HERD_RETURN_IF_ERROR(
      InitCert(cert.get(), subject, options.valid_days, options.not_before_seconds));
  if (X509_set_issuer_name(cert.get(), X509_get_subject_name(ca_cert.get())) != 1 ||
      X509_set_pubkey(cert.get(), key.get()) != 1) {
    return SslError("issuer/key");
  }
  HERD_RETURN_IF_ERROR(
      AddExt(cert.get(), ca_cert.get(), NID_basic_constraints, "critical,CA:FALSE"));
  HERD_RETURN_IF_ERROR(
      AddExt(cert.get(), ca_cert.get(), NID_key_usage, "critical,digitalSignature"));
  HERD_RETURN_IF_ERROR(AddExt(cert.get(), ca_cert.get(), NID_ext_key_usage, eku));
  HERD_RETURN_IF_ERROR(AddExt(cert.get(), ca_cert.get(), NID_subject_key_identifier, "hash"));
  HERD_RETURN_IF_ERROR(
      AddExt(cert.get(), ca_cert.get(), NID_authority_key_identifier, "keyid:always"));
  HERD_RETURN_IF_ERROR(AddSans(cert.get(), options.ip_sans, options.dns_sans, uris));
  if (X509_sign(cert.get(), ca_key.get(), EVP_sha256()) == 0) return SslError("X509_sign");
  return ToPem(cert.get(), key.get());
}

}  // namespace

Result<Pem> CreateCa(std::string_view cluster_name, int valid_days) {
  if (cluster_name.empty()) return InvalidArgument("cluster name is empty");
  HERD_ASSIGN_OR_RETURN(Owned<EVP_PKEY> key, NewKey());
  Owned<X509> cert(X509_new());
  if (!cert) return SslError("X509_new");
  HERD_RETURN_IF_ERROR(InitCert(
      cert.get(), {{"O", "herd"}, {"CN", "herd-ca " + std::string(cluster_name)}}, valid_days));
  if (X509_set_issuer_name(cert.get(), X509_get_subject_name(cert.get())) != 1 ||
      X509_set_pubkey(cert.get(), key.get()) != 1) {
    return SslError("CA issuer/key");
  }
  // pathlen:0: the CA signs leaves only.
  HERD_RETURN_IF_ERROR(
      AddExt(cert.get(), cert.get(), NID_basic_constraints, "critical,CA:TRUE,pathlen:0"));
  HERD_RETURN_IF_ERROR(
      AddExt(cert.get(), cert.get(), NID_key_usage, "critical,keyCertSign,cRLSign"));
  HERD_RETURN_IF_ERROR(AddExt(cert.get(), cert.get(), NID_subject_key_identifier, "hash"));
  if (X509_sign(cert.get(), key.get(), EVP_sha256()) == 0) return SslError("X509_sign");
  return ToPem(cert.get(), key.get());
}

Result<Pem> IssueCertificate(const Pem& ca, Role role, std::string_view common_name,
                             const std::vector<std::string>& ip_sans,
                             const std::vector<std::string>& dns_sans, int valid_days) {
  IssueOptions options;
  options.ip_sans = ip_sans;
  options.dns_sans = dns_sans;
  options.valid_days = valid_days;
  return IssueCertificate(ca, role, common_name, options);
}

Result<Pem> IssueCertificate(const Pem& ca, Role role, std::string_view common_name,
                             const IssueOptions& options) {
  if (common_name.empty()) return InvalidArgument("common name is empty");
  std::vector<std::string> uris;
  if (options.node) {
    if (role != Role::kAgent) return InvalidArgument("only an agent certificate proves a node");
    if (options.node->cluster.empty() || options.node->node.empty()) {
      return InvalidArgument("a node identity needs a cluster and a node name");
    }
    uris.push_back(NodeUri(*options.node));
  }
  std::string_view ou;
  const char* eku = nullptr;
  switch (role) {
    case Role::kAgent:
      ou = kAgentOu;
      eku = "serverAuth,clientAuth";
      break;
    case Role::kClient:
      ou = kClientOu;
      eku = "clientAuth";
      break;
    default:
      return InvalidArgument("a certificate needs the agent or the client role");
  }
  return SignLeaf(ca, {{"O", "herd"}, {"OU", std::string(ou)}, {"CN", std::string(common_name)}},
                  eku, options, uris);
}

Result<Pem> IssueServerCertificate(const Pem& ca, std::string_view common_name,
                                   const std::vector<std::string>& dns_sans,
                                   const std::vector<std::string>& ip_sans, int valid_days,
                                   long not_before_seconds) {
  if (common_name.empty()) return InvalidArgument("common name is empty");
  if (dns_sans.empty() && ip_sans.empty()) {
    return InvalidArgument("a server certificate needs at least one DNS name or IP address");
  }
  IssueOptions options;
  options.dns_sans = dns_sans;
  options.ip_sans = ip_sans;
  options.valid_days = valid_days;
  options.not_before_seconds = not_before_seconds;
  return SignLeaf(ca,
                  {{"O", "herd"}, {"OU", std::string(kServerOu)}, {"CN", std::string(common_name)}},
                  "serverAuth", options, {});
}

Result<std::string> ClusterOfCa(std::string_view ca_cert_pem) {
  Result<std::string> cn = CommonNameOf(ca_cert_pem);
  if (!cn.ok()) return cn.status();
  constexpr std::string_view kPrefix = "herd-ca ";
  const std::string_view name = *cn;
  if (name.size() <= kPrefix.size() || !name.starts_with(kPrefix)) {
    return InvalidArgument("not a herd cluster CA (CN '" + *cn + "')");
  }
  return std::string(name.substr(kPrefix.size()));
}

std::string NodeUri(const NodeIdentity& id) {
  return std::string(kNodeUriScheme) + PercentEncode(id.cluster) + "/" + PercentEncode(id.node);
}

Result<NodeIdentity> NodeIdentityOf(const X509* cert) {
  Owned<GENERAL_NAMES> names(
      static_cast<GENERAL_NAMES*>(X509_get_ext_d2i(cert, NID_subject_alt_name, nullptr, nullptr)));
  std::optional<NodeIdentity> found;
  for (int i = 0; names && i < sk_GENERAL_NAME_num(names.get()); ++i) {
    const GENERAL_NAME* gen = sk_GENERAL_NAME_value(names.get(), i);
    if (gen->type != GEN_URI) continue;
    const ASN1_IA5STRING* ia5 = gen->d.uniformResourceIdentifier;
    std::string_view uri(reinterpret_cast<const char*>(ASN1_STRING_get0_data(ia5)),
                         static_cast<std::size_t>(ASN1_STRING_length(ia5)));
    if (uri.substr(0, kNodeUriScheme.size()) != kNodeUriScheme) continue;
    if (found) return InvalidArgument("certificate names more than one node");
    std::string_view rest = uri.substr(kNodeUriScheme.size());
    std::size_t slash = rest.find('/');
    std::optional<std::string> cluster, node;
    if (slash != std::string_view::npos) {
      cluster = PercentDecode(rest.substr(0, slash));
      node = PercentDecode(rest.substr(slash + 1));
    }
    if (!cluster || !node || cluster->empty() || node->empty()) {
      return InvalidArgument("malformed node identity '" + std::string(uri) + "'");
    }
    found = NodeIdentity{std::move(*cluster), std::move(*node)};
  }
  ERR_clear_error();
  if (!found) return NotFound("certificate proves no node (no herd-node URI)");
  return std::move(*found);
}

Result<NodeIdentity> NodeIdentityOf(std::string_view cert_pem) {
  HERD_ASSIGN_OR_RETURN(Owned<X509> cert, ParseCert(cert_pem));
  return NodeIdentityOf(cert.get());
}

Result<Role> RoleOf(std::string_view cert_pem) {
  HERD_ASSIGN_OR_RETURN(Owned<X509> cert, ParseCert(cert_pem));
  return RoleOf(cert.get());
}

Result<Role> RoleOf(const X509* cert) {
  Result<std::string> ou = SubjectEntry(cert, NID_organizationalUnitName);
  if (!ou.ok()) {
    if (ou.status().code() == Code::kNotFound) return Role::kUnknown;
    return ou.status();
  }
  if (*ou == kAgentOu) return Role::kAgent;
  if (*ou == kClientOu) return Role::kClient;
  return Role::kUnknown;
}

Result<std::string> CommonNameOf(std::string_view cert_pem) {
  HERD_ASSIGN_OR_RETURN(Owned<X509> cert, ParseCert(cert_pem));
  return CommonNameOf(cert.get());
}

Result<std::string> CommonNameOf(const X509* cert) { return SubjectEntry(cert, NID_commonName); }

Status InitClusterCerts(const std::string& dir, std::string_view cluster) {
  std::string ca_key_path = Join(dir, kCaKeyFile);
  std::error_code ec;
  if (std::filesystem::exists(ca_key_path, ec)) {
    return AlreadyExists("cluster CA already exists: " + ca_key_path);
  }
  HERD_RETURN_IF_ERROR(MakeDir(dir));
  HERD_ASSIGN_OR_RETURN(Pem ca, CreateCa(cluster));
  HERD_ASSIGN_OR_RETURN(Pem client, IssueCertificate(ca, Role::kClient, "herd-client"));
  // Keys first: a crash in between leaves no certificate without its key.
  HERD_RETURN_IF_ERROR(WriteFileAtomic(ca_key_path, ca.key, 0600));
  HERD_RETURN_IF_ERROR(WriteFileAtomic(Join(dir, kCaCertFile), ca.cert, 0644));
  HERD_RETURN_IF_ERROR(WriteFileAtomic(Join(dir, kClientKeyFile), client.key, 0600));
  HERD_RETURN_IF_ERROR(WriteFileAtomic(Join(dir, kClientCertFile), client.cert, 0644));
  return Status::Ok();
}

Status IssueAgentCerts(const std::string& ca_dir, std::string_view node_name,
                       const std::vector<std::string>& ips, const std::string& out_dir,
                       int valid_days, long not_before_seconds) {
  Pem ca;
  HERD_ASSIGN_OR_RETURN(ca.cert, ReadFile(Join(ca_dir, kCaCertFile)));
  HERD_ASSIGN_OR_RETURN(ca.key, ReadFile(Join(ca_dir, kCaKeyFile)));
  IssueOptions options;
  options.ip_sans = ips;
  if (IsHostName(node_name)) options.dns_sans.emplace_back(node_name);
  HERD_ASSIGN_OR_RETURN(std::string cluster, ClusterOfCa(ca.cert));
  options.node = NodeIdentity{std::move(cluster), std::string(node_name)};
  options.valid_days = valid_days;
  options.not_before_seconds = not_before_seconds;
  HERD_ASSIGN_OR_RETURN(Pem agent, IssueCertificate(ca, Role::kAgent, node_name, options));
  HERD_RETURN_IF_ERROR(MakeDir(out_dir));
  HERD_RETURN_IF_ERROR(WriteFileAtomic(Join(out_dir, kAgentKeyFile), agent.key, 0600));
  HERD_RETURN_IF_ERROR(WriteFileAtomic(Join(out_dir, kAgentCertFile), agent.cert, 0644));
  HERD_RETURN_IF_ERROR(WriteFileAtomic(Join(out_dir, kCaCertFile), ca.cert, 0644));
  return Status::Ok();
}

bool AgentCertsProve(const std::string& ca_dir, std::string_view node_name,
                     const std::string& out_dir) {
  auto ca_pem = ReadFile(Join(ca_dir, kCaCertFile));
  auto cert_pem = ReadFile(Join(out_dir, kAgentCertFile));
  if (!ca_pem.ok() || !cert_pem.ok()) return false;
  auto ca = ParseCert(*ca_pem);
  auto cert = ParseCert(*cert_pem);
  auto cluster = ClusterOfCa(*ca_pem);
  if (!ca.ok() || !cert.ok() || !cluster.ok()) return false;
  EVP_PKEY* ca_key = X509_get0_pubkey(ca->get());
  bool signed_by_ca = ca_key != nullptr && X509_verify(cert->get(), ca_key) == 1;
  ERR_clear_error();
  auto id = NodeIdentityOf(cert->get());
  return signed_by_ca && id.ok() && id->cluster == *cluster && id->node == node_name;
}

}  // namespace herd::tls
