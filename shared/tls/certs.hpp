// Cluster certificates made with OpenSSL's library API (no openssl tool): one CA per cluster, and
// leaf certificates whose role (agent or client) is carried in the subject OU and in the
// extendedKeyUsage. Keys are ECDSA P-256, signatures SHA-256, serials random 128-bit.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "shared/common/status.hpp"
#include "shared/tls/roles.hpp"

struct x509_st;  // OpenSSL's X509

namespace herd::tls {

// A certificate and its private key, both PEM.
struct Pem {
  std::string cert;
  std::string key;
};

// Subject OU of each role's certificates.
inline constexpr std::string_view kAgentOu = "herd-agent";
inline constexpr std::string_view kClientOu = "herd-client";
// Subject OU of a TLS server certificate of the API server (IssueServerCertificate); RoleOf gives
// kUnknown for it, so it can neither join a cluster as an agent nor dial one as a client.
inline constexpr std::string_view kServerOu = "herd-api-server";

// A self-signed CA for one cluster (CN "herd-ca <cluster>").
Result<Pem> CreateCa(std::string_view cluster_name, int valid_days = 3650);
// The cluster a CA made by CreateCa is for (its CN without "herd-ca ").
Result<std::string> ClusterOfCa(std::string_view ca_cert_pem);

// The node an agent certificate proves: its subjectAltName holds the URI
// "herd-node://<cluster>/<node>" (both percent-encoded). The head accepts an agent's registration
// as node N of cluster C only over a connection whose certificate proves exactly (C, N).
struct NodeIdentity {
  std::string cluster;
  std::string node;
  bool operator==(const NodeIdentity&) const = default;
};
inline constexpr std::string_view kNodeUriScheme = "herd-node://";
std::string NodeUri(const NodeIdentity& id);
// The identity in a certificate's URI SANs: NotFound when it has none (a certificate issued
// before identities were bound, or a client's), InvalidArgument when it has two or a bad one.
Result<NodeIdentity> NodeIdentityOf(const ::x509_st* cert);
Result<NodeIdentity> NodeIdentityOf(std::string_view cert_pem);

// What IssueCertificate puts into a leaf certificate besides its role and common name.
struct IssueOptions {
  std::vector<std::string> ip_sans;
  std::vector<std::string> dns_sans;
  std::optional<NodeIdentity> node;  // agents: the node the certificate proves
  int valid_days = 825;
  // notBefore, relative to now: an hour back by default, since the machines of a cluster do not
  // agree on the time to the second. A positive value issues a certificate valid only later.
  long not_before_seconds = -3600;
};

// A leaf certificate signed by `ca`. Agent certificates may serve and dial (serverAuth and
// clientAuth); client certificates may only dial (clientAuth). ip_sans and dns_sans go into the
// subjectAltName.
Result<Pem> IssueCertificate(const Pem& ca, Role role, std::string_view common_name,
                             const std::vector<std::string>& ip_sans = {},
                             const std::vector<std::string>& dns_sans = {}, int valid_days = 825);
Result<Pem> IssueCertificate(const Pem& ca, Role role, std::string_view common_name,
                             const IssueOptions& options);

// A TLS server certificate signed by `ca` (e.g. the API server's own CA, made with CreateCa): CN
// `common_name`, subjectAltName with `dns_sans` and `ip_sans` (at least one of them: clients check
// the host they dialed against these), extendedKeyUsage serverAuth only. `valid_days` and
// `not_before_seconds` as in IssueOptions.
Result<Pem> IssueServerCertificate(const Pem& ca, std::string_view common_name,
                                   const std::vector<std::string>& dns_sans,
                                   const std::vector<std::string>& ip_sans,
                                   int valid_days = IssueOptions{}.valid_days,
                                   long not_before_seconds = IssueOptions{}.not_before_seconds);

// The role from the subject OU; kUnknown for a certificate without a herd role (e.g. the CA).
Result<Role> RoleOf(std::string_view cert_pem);
Result<std::string> CommonNameOf(std::string_view cert_pem);
// The same of a parsed certificate (the transport's verified peer, without encoding it again).
Result<Role> RoleOf(const ::x509_st* cert);
Result<std::string> CommonNameOf(const ::x509_st* cert);

// Creates `dir` (0700) with ca.crt, ca.key (0600), client.crt and client.key (0600). Refuses
// (AlreadyExists) when dir/ca.key exists: replacing a CA would lock out every agent.
Status InitClusterCerts(const std::string& dir, std::string_view cluster);

// Issues an agent certificate for `node_name` (CN, DNS SAN when it is a valid host name, and the
// node identity of the CA's cluster) with `ips` as IP SANs from the CA in `ca_dir`, and writes
// out_dir/ca.crt, out_dir/agent.crt and out_dir/agent.key (0600). The CA key never goes to out_dir.
// `valid_days` and `not_before_seconds` as in IssueOptions.
Status IssueAgentCerts(const std::string& ca_dir, std::string_view node_name,
                       const std::vector<std::string>& ips, const std::string& out_dir,
                       int valid_days = IssueOptions{}.valid_days,
                       long not_before_seconds = IssueOptions{}.not_before_seconds);

// Whether out_dir/agent.crt proves node `node_name` of the cluster of the CA in `ca_dir` and was
// signed by that CA: false for a certificate of an older herd (no identity), of another node or
// of another CA, or a missing one. An agent with such a certificate is refused by its head, so a
// launch issues it a new one.
bool AgentCertsProve(const std::string& ca_dir, std::string_view node_name,
                     const std::string& out_dir);

}  // namespace herd::tls
