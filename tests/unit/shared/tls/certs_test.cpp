#include "shared/tls/certs.hpp"
#include "shared/common/file_util.hpp"
#include "tests/unit/test_support.hpp"

#include <doctest/doctest.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <set>

namespace herd::tls {
namespace {

namespace fs = std::filesystem;

using herd::testing::TempDir;

mode_t ModeOf(const std::string& path) {
  struct stat st {};
  REQUIRE(::stat(path.c_str(), &st) == 0);
  return st.st_mode & 07777;
}

struct X509Free {
  void operator()(X509* p) const { X509_free(p); }
};
using X509Ptr = std::unique_ptr<X509, X509Free>;

X509Ptr Parse(const std::string& pem) {
  BIO* bio = BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()));
  X509* cert = PEM_read_bio_X509(bio, nullptr, nullptr, nullptr);
  BIO_free(bio);
  REQUIRE(cert != nullptr);
  return X509Ptr(cert);
}

// What a TLS peer checks: the chain to `ca` and the purpose (X509_PURPOSE_SSL_SERVER/CLIENT).
bool Verifies(const std::string& ca_pem, const std::string& cert_pem, int purpose) {
  X509Ptr ca = Parse(ca_pem);
  X509Ptr cert = Parse(cert_pem);
  X509_STORE* store = X509_STORE_new();
  X509_STORE_add_cert(store, ca.get());
  X509_STORE_CTX* ctx = X509_STORE_CTX_new();
  X509_STORE_CTX_init(ctx, store, cert.get(), nullptr);
  X509_STORE_CTX_set_purpose(ctx, purpose);
  bool ok = X509_verify_cert(ctx) == 1;
  X509_STORE_CTX_free(ctx);
  X509_STORE_free(store);
  return ok;
}

TEST_CASE("agent and client certificates carry their role, name and SANs") {
  Result<Pem> ca = CreateCa("prod");
  REQUIRE(ca.ok());
  CHECK(ca->cert.find("BEGIN CERTIFICATE") != std::string::npos);
  CHECK(ca->key.find("BEGIN PRIVATE KEY") != std::string::npos);

  Result<Pem> agent =
      IssueCertificate(*ca, Role::kAgent, "node-1", {"10.0.0.5", "::1"}, {"node-1"});
  REQUIRE(agent.ok());
  Result<Pem> client = IssueCertificate(*ca, Role::kClient, "alice");
  REQUIRE(client.ok());

  CHECK(RoleOf(agent->cert).value() == Role::kAgent);
  CHECK(RoleOf(client->cert).value() == Role::kClient);
  CHECK(RoleOf(ca->cert).value() == Role::kUnknown);
  CHECK(CommonNameOf(agent->cert).value() == "node-1");
  CHECK(CommonNameOf(client->cert).value() == "alice");
  CHECK(CommonNameOf(ca->cert).value() == "herd-ca prod");

  X509Ptr a = Parse(agent->cert);
  CHECK(X509_check_ip_asc(a.get(), "10.0.0.5", 0) == 1);
  CHECK(X509_check_ip_asc(a.get(), "::1", 0) == 1);
  CHECK(X509_check_ip_asc(a.get(), "10.0.0.6", 0) == 0);
  CHECK(X509_check_host(a.get(), "node-1", 0, 0, nullptr) == 1);

  // ECDSA P-256 keys.
  EVP_PKEY* pub = X509_get0_pubkey(a.get());
  REQUIRE(pub != nullptr);
  CHECK(EVP_PKEY_is_a(pub, "EC"));
  CHECK(EVP_PKEY_get_bits(pub) == 256);
  CHECK(X509_get_signature_nid(a.get()) == NID_ecdsa_with_SHA256);
}

TEST_CASE("extended key usage: agents serve and dial, clients only dial") {
  Pem ca = CreateCa("c").value();
  Pem agent = IssueCertificate(ca, Role::kAgent, "n").value();
  Pem client = IssueCertificate(ca, Role::kClient, "u").value();
  CHECK(Verifies(ca.cert, agent.cert, X509_PURPOSE_SSL_SERVER));
  CHECK(Verifies(ca.cert, agent.cert, X509_PURPOSE_SSL_CLIENT));
  CHECK(Verifies(ca.cert, client.cert, X509_PURPOSE_SSL_CLIENT));
  CHECK_FALSE(Verifies(ca.cert, client.cert, X509_PURPOSE_SSL_SERVER));

  Pem other = CreateCa("c").value();
  CHECK_FALSE(Verifies(other.cert, agent.cert, X509_PURPOSE_SSL_CLIENT));
  CHECK_FALSE(Verifies(other.cert, client.cert, X509_PURPOSE_SSL_CLIENT));
}

TEST_CASE("serial numbers are random and distinct") {
  Pem ca = CreateCa("c").value();
  std::set<std::string> serials;
  for (int i = 0; i < 5; ++i) {
    X509Ptr cert = Parse(IssueCertificate(ca, Role::kClient, "u").value().cert);
    BIGNUM* bn = ASN1_INTEGER_to_BN(X509_get_serialNumber(cert.get()), nullptr);
    CHECK(BN_num_bits(bn) > 64);
    char* hex = BN_bn2hex(bn);
    serials.insert(hex);
    OPENSSL_free(hex);
    BN_free(bn);
  }
  CHECK(serials.size() == 5);
}

TEST_CASE("bad input is refused") {
  Pem ca = CreateCa("c").value();
  CHECK(CreateCa("").status().code() == Code::kInvalidArgument);
  CHECK(IssueCertificate(ca, Role::kUnknown, "n").status().code() == Code::kInvalidArgument);
  CHECK(IssueCertificate(ca, Role::kAgent, "").status().code() == Code::kInvalidArgument);
  CHECK(IssueCertificate(ca, Role::kAgent, "n", {"not-an-ip"}).status().code() ==
        Code::kInvalidArgument);
  Pem mixed{ca.cert, CreateCa("d").value().key};
  CHECK(IssueCertificate(mixed, Role::kAgent, "n").status().code() == Code::kInvalidArgument);
  CHECK_FALSE(RoleOf("garbage").ok());
  CHECK_FALSE(CommonNameOf("").ok());
}

TEST_CASE("WriteFileAtomic sets the mode, replaces whole files and leaves no temporaries") {
  TempDir dir{"herd-certs-test"};
  std::string path = dir / "secret";
  REQUIRE(WriteFileAtomic(path, "one", 0600).ok());
  CHECK(ModeOf(path) == 0600);
  CHECK(ReadFile(path).value() == "one");
  REQUIRE(WriteFileAtomic(path, "two, longer", 0640).ok());
  CHECK(ReadFile(path).value() == "two, longer");
  CHECK(ModeOf(path) == 0640);
  int entries = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir.path())) ++entries;
  CHECK(entries == 1);

  CHECK(ReadFile(dir / "missing").status().code() == Code::kNotFound);
  CHECK_FALSE(WriteFileAtomic(dir / "no/such/dir/file", "x", 0600).ok());
}

TEST_CASE("WriteFileSwapped replaces whole files between two inodes, never a third") {
  TempDir dir{"herd-certs-test"};
  std::string path = dir / "table";
  REQUIRE(WriteFileSwapped(path, "first, the longest of them", 0600).ok());
  CHECK(ReadFile(path).value() == "first, the longest of them");
  CHECK(ModeOf(path) == 0600);
  std::set<ino_t> inodes;
  for (const char* content : {"second", "third!", "", "fifth"}) {
    REQUIRE(WriteFileSwapped(path, content, 0640).ok());
    CHECK(ReadFile(path).value() == content);  // shorter than the file it went over: cut
    CHECK(ModeOf(path) == 0640);
    struct stat st {};
    REQUIRE(::stat(path.c_str(), &st) == 0);
    inodes.insert(st.st_ino);
  }
  CHECK(inodes.size() == 2);  // path and its .next, exchanged: no inode made or freed per write
  CHECK(ReadFile(path + ".next").value() == "");  // the write before the last
  int entries = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir.path())) ++entries;
  CHECK(entries == 2);
  CHECK_FALSE(WriteFileSwapped(dir / "no/such/dir/file", "x", 0600).ok());
}

TEST_CASE("cluster and agent directory layout") {
  TempDir root{"herd-certs-test"};
  std::string cluster = root / "cluster";
  std::string agent = root / "agent";
  REQUIRE(InitClusterCerts(cluster, "prod").ok());
  CHECK(ModeOf(cluster) == 0700);
  CHECK(ModeOf(cluster + "/ca.key") == 0600);
  CHECK(ModeOf(cluster + "/client.key") == 0600);
  CHECK(RoleOf(ReadFile(cluster + "/client.crt").value()).value() == Role::kClient);
  CHECK(Verifies(ReadFile(cluster + "/ca.crt").value(), ReadFile(cluster + "/client.crt").value(),
                 X509_PURPOSE_SSL_CLIENT));

  // A second init must not replace the CA (every agent would be locked out).
  std::string ca_before = ReadFile(cluster + "/ca.crt").value();
  CHECK(InitClusterCerts(cluster, "prod").code() == Code::kAlreadyExists);
  CHECK(ReadFile(cluster + "/ca.crt").value() == ca_before);

  REQUIRE(IssueAgentCerts(cluster, "node-7", {"192.168.1.7"}, agent).ok());
  std::set<std::string> names;
  for (const auto& e : fs::directory_iterator(agent)) names.insert(e.path().filename().string());
  CHECK(names == std::set<std::string>{"agent.crt", "agent.key", "ca.crt"});
  CHECK(ModeOf(agent + "/agent.key") == 0600);
  CHECK(ReadFile(agent + "/ca.crt").value() == ca_before);
  std::string agent_cert = ReadFile(agent + "/agent.crt").value();
  CHECK(RoleOf(agent_cert).value() == Role::kAgent);
  CHECK(CommonNameOf(agent_cert).value() == "node-7");
  CHECK(Verifies(ca_before, agent_cert, X509_PURPOSE_SSL_SERVER));
  X509Ptr parsed = Parse(agent_cert);
  CHECK(X509_check_ip_asc(parsed.get(), "192.168.1.7", 0) == 1);
  CHECK(X509_check_host(parsed.get(), "node-7", 0, 0, nullptr) == 1);
  // The CA key itself must not have leaked into the agent's files.
  std::string ca_key = ReadFile(cluster + "/ca.key").value();
  for (const auto& name : names) CHECK(ReadFile(agent + "/" + name).value() != ca_key);

  CHECK(IssueAgentCerts(root / "nowhere", "n", {}, root / "agent2").code() == Code::kNotFound);
}

TEST_CASE("a server certificate names its hosts in the SAN and may only serve") {
  Pem ca = CreateCa("api").value();
  Pem server =
      IssueServerCertificate(ca, "herd-api", {"api.example.com", "localhost"}, {"127.0.0.1", "::1"})
          .value();
  CHECK(Verifies(ca.cert, server.cert, X509_PURPOSE_SSL_SERVER));
  CHECK_FALSE(Verifies(ca.cert, server.cert, X509_PURPOSE_SSL_CLIENT));
  CHECK_FALSE(Verifies(CreateCa("api").value().cert, server.cert, X509_PURPOSE_SSL_SERVER));
  CHECK(RoleOf(server.cert).value() == Role::kUnknown);
  CHECK(CommonNameOf(server.cert).value() == "herd-api");

  // The names a client checks the host it dialed against.
  X509Ptr cert = Parse(server.cert);
  CHECK(X509_check_host(cert.get(), "api.example.com", 0, 0, nullptr) == 1);
  CHECK(X509_check_host(cert.get(), "localhost", 0, 0, nullptr) == 1);
  CHECK(X509_check_host(cert.get(), "other.example.com", 0, 0, nullptr) == 0);
  CHECK(X509_check_ip_asc(cert.get(), "127.0.0.1", 0) == 1);
  CHECK(X509_check_ip_asc(cert.get(), "::1", 0) == 1);
  CHECK(X509_check_ip_asc(cert.get(), "127.0.0.2", 0) == 0);
  // No CA powers and no node identity.
  CHECK(X509_check_ca(cert.get()) == 0);
  CHECK(NodeIdentityOf(server.cert).status().code() == Code::kNotFound);

  // Validity as asked: one that ended yesterday does not verify.
  Pem expired = IssueServerCertificate(ca, "herd-api", {}, {"127.0.0.1"}, 1, -2 * 86400).value();
  CHECK(X509_cmp_current_time(X509_get0_notAfter(Parse(expired.cert).get())) < 0);
  CHECK_FALSE(Verifies(ca.cert, expired.cert, X509_PURPOSE_SSL_SERVER));
}

TEST_CASE("a server certificate needs a name, a host and valid addresses") {
  Pem ca = CreateCa("api").value();
  CHECK(IssueServerCertificate(ca, "", {"h"}, {}).status().code() == Code::kInvalidArgument);
  CHECK(IssueServerCertificate(ca, "s", {}, {}).status().code() == Code::kInvalidArgument);
  CHECK(IssueServerCertificate(ca, "s", {}, {"not-an-ip"}).status().code() ==
        Code::kInvalidArgument);
  CHECK(IssueServerCertificate(ca, "s", {""}, {}).status().code() == Code::kInvalidArgument);
  CHECK(IssueServerCertificate(ca, "s", {"h"}, {}, 0).status().code() == Code::kInvalidArgument);
  Pem mixed{ca.cert, CreateCa("other").value().key};
  CHECK(IssueServerCertificate(mixed, "s", {"h"}, {}).status().code() == Code::kInvalidArgument);
}

}  // namespace
}  // namespace herd::tls

namespace herd::tls {
namespace {

TEST_CASE("an agent certificate proves its node of its CA's cluster, and nothing else does") {
  TempDir root("herd-certs-identity");
  std::string cluster = root / "cluster", other = root / "other";
  REQUIRE(InitClusterCerts(cluster, "prod").ok());
  REQUIRE(InitClusterCerts(other, "staging").ok());
  CHECK(ClusterOfCa(ReadFile(cluster + "/ca.crt").value()).value() == "prod");
  CHECK(ClusterOfCa(ReadFile(cluster + "/client.crt").value()).status().code() ==
        Code::kInvalidArgument);

  REQUIRE(IssueAgentCerts(cluster, "prod-worker1", {"10.0.0.2"}, root / "w1").ok());
  std::string w1 = ReadFile(root / "w1/agent.crt").value();
  CHECK(NodeIdentityOf(w1).value() == NodeIdentity{"prod", "prod-worker1"});
  CHECK(AgentCertsProve(cluster, "prod-worker1", root / "w1"));
  CHECK_FALSE(AgentCertsProve(cluster, "prod-head", root / "w1"));   // another node
  CHECK_FALSE(AgentCertsProve(other, "prod-worker1", root / "w1"));  // another CA
  CHECK_FALSE(AgentCertsProve(cluster, "prod-worker1", root / "missing"));

  // A certificate without an identity (as an older herd issued them) proves nothing.
  Pem ca{ReadFile(cluster + "/ca.crt").value(), ReadFile(cluster + "/ca.key").value()};
  Pem legacy = IssueCertificate(ca, Role::kAgent, "prod-worker1", {"10.0.0.2"}).value();
  CHECK(NodeIdentityOf(legacy.cert).status().code() == Code::kNotFound);
  fs::create_directories(root / "legacy");
  REQUIRE(WriteFileAtomic(root / "legacy/agent.crt", legacy.cert, 0644).ok());
  CHECK_FALSE(AgentCertsProve(cluster, "prod-worker1", root / "legacy"));
  CHECK(NodeIdentityOf(ReadFile(cluster + "/client.crt").value()).status().code() ==
        Code::kNotFound);

  // Names with the URI's separators and odd bytes round-trip; no name can pose as another.
  IssueOptions odd;
  odd.node = NodeIdentity{"a/b c", "n%2F/é"};
  Pem odd_pem = IssueCertificate(ca, Role::kAgent, "odd", odd).value();
  CHECK(NodeIdentityOf(odd_pem.cert).value() == NodeIdentity{"a/b c", "n%2F/é"});
  CHECK(NodeUri({"a/b c", "n%2F/é"}) == "herd-node://a%2Fb%20c/n%252F%2F%C3%A9");

  IssueOptions client_with_node;
  client_with_node.node = NodeIdentity{"prod", "x"};
  CHECK(IssueCertificate(ca, Role::kClient, "u", client_with_node).status().code() ==
        Code::kInvalidArgument);
}

TEST_CASE("a certificate's validity window can start in the past or the future") {
  TempDir root("herd-certs-validity");
  REQUIRE(InitClusterCerts(root / "cluster", "prod").ok());
  REQUIRE(IssueAgentCerts(root / "cluster", "n", {}, root / "expired", 1, -10 * 86400).ok());
  REQUIRE(IssueAgentCerts(root / "cluster", "n", {}, root / "later", 30, 2 * 86400).ok());
  X509Ptr expired = Parse(ReadFile(root / "expired/agent.crt").value());
  X509Ptr later = Parse(ReadFile(root / "later/agent.crt").value());
  // Against now: the first ended 9 days ago, the second starts in 2 days.
  CHECK(X509_cmp_current_time(X509_get0_notAfter(expired.get())) < 0);
  CHECK(X509_cmp_current_time(X509_get0_notBefore(later.get())) > 0);
  CHECK(X509_cmp_current_time(X509_get0_notAfter(later.get())) > 0);
  std::string ca = ReadFile(root / "cluster/ca.crt").value();
  CHECK_FALSE(Verifies(ca, ReadFile(root / "expired/agent.crt").value(), X509_PURPOSE_SSL_CLIENT));
  CHECK_FALSE(Verifies(ca, ReadFile(root / "later/agent.crt").value(), X509_PURPOSE_SSL_CLIENT));
}

}  // namespace
}  // namespace herd::tls
