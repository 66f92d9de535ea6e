// The API server's store against both backends: every STORE_TEST body runs once on SQLite (a
// file in a temporary directory) and once on a real PostgreSQL 15 started by the test (suite
// `postgres`, skipped without root or without the PostgreSQL binaries). Each run gets a fresh
// database; times are passed in by hand, nothing sleeps.
#include "controller/server/store/api_store.hpp"

#include <doctest/doctest.h>
#include <openssl/evp.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "controller/server/store/sql_db.hpp"
#include "shared/common/limits.hpp"
#include "tests/unit/postgres_fixture.hpp"
#include "tests/unit/test_support.hpp"

namespace herd::server {
namespace {

using testing::TempDir;

constexpr std::int64_t kNow = 1'760'000'000'000;  // a unix time in ms
const char* const kTables[] = {
    "schema_migrations", "users",      "tokens", "requests", "audit", "names", "leases",
    "secrets",           "gpu_samples"};

// One fresh database of one backend, and the key file of its stores.
class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string Url() const = 0;
  // The database's files as bytes (SQLite: the file and its WAL); "" for a server database.
  virtual std::string FileBytes() const = 0;

  std::string KeyPath() const { return keys_ / "secrets.key"; }

  std::unique_ptr<SqlDb> OpenDb() {
    auto db = OpenSqlDb(Url());
    REQUIRE_MESSAGE(db.ok(), db.status().ToString());
    return std::move(db).value();
  }
  std::unique_ptr<ApiStore> OpenStore() {
    auto store = ApiStore::Open(Url(), KeyPath());
    REQUIRE_MESSAGE(store.ok(), store.status().ToString());
    return std::move(store).value();
  }
  // Every cell of every table, as the database returns it (what "in the database" means for a
  // server we cannot read the files of).
  std::string Dump() {
    auto db = OpenDb();
    std::string out;
    for (const char* table : kTables) {
      auto rows = db->Query(std::string("SELECT * FROM ") + table);
      if (!rows.ok()) continue;  // not created yet
      for (const SqlRow& row : *rows) {
        for (std::size_t c = 0; c < row.size(); ++c) out += row.Text(c) + "\x1f";
      }
    }
    return out;
  }

 private:
  TempDir keys_{"herd-api-keys"};
};

class SqliteBackend final : public Backend {
 public:
  std::string Url() const override { return "sqlite:" + dir_ / "api.db"; }
  std::string FileBytes() const override {
    return testing::ReadAll(dir_ / "api.db") + testing::ReadAll(dir_ / "api.db-wal");
  }

 private:
  TempDir dir_{"herd-api-sqlite"};
};

class PostgresBackend final : public Backend {
 public:
  std::string Url() const override { return url_; }
  std::string FileBytes() const override { return ""; }

 private:
  std::string url_ = testing::SharedPostgres().NewDatabase();
};

#define STORE_TEST_IMPL(fn, title)                                              \
  void fn(Backend& backend);                                                    \
  TEST_CASE("sqlite: " title) {                                                 \
    SqliteBackend backend;                                                      \
    fn(backend);                                                                \
  }                                                                             \
  TEST_CASE("postgres: " title* doctest::test_suite("postgres")) {              \
    if (const std::string why = testing::PostgresUnavailable(); !why.empty()) { \
      return testing::Skip(why);                                                \
    }                                                                           \
    PostgresBackend backend;                                                    \
    fn(backend);                                                                \
  }                                                                             \
  void fn(Backend& backend)
// A test body that runs on each backend: STORE_TEST("what it checks") { ... backend ... }
#define STORE_TEST(title) STORE_TEST_IMPL(HERD_CONCAT(StoreTest, __LINE__), title)

std::int64_t CountRows(SqlDb& db, const std::string& table) {
  auto rows = db.Query("SELECT COUNT(*) FROM " + table);
  REQUIRE_MESSAGE(rows.ok(), rows.status().ToString());
  return (*rows)[0].Int(0);
}

std::string Sha256Hex(const std::string& data) {
  std::array<unsigned char, EVP_MAX_MD_SIZE> md{};
  unsigned int len = 0;
  REQUIRE(EVP_Digest(data.data(), data.size(), md.data(), &len, EVP_sha256(), nullptr) == 1);
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  for (unsigned i = 0; i < len; ++i) {
    out += kDigits[md[i] >> 4];
    out += kDigits[md[i] & 0xf];
  }
  return out;
}

// ---- the SQL seam -------------------------------------------------------------------------------

STORE_TEST("SqlDb: parameters, NULLs, row counts, and values never parsed as SQL") {
  auto db = backend.OpenDb();
  CHECK(db->Exec("CREATE TABLE t (k TEXT PRIMARY KEY, n BIGINT, note TEXT)").value() == 0);
  const std::string evil = "x'); DROP TABLE t; --";
  CHECK(db->Exec("INSERT INTO t (k, n, note) VALUES (?, ?, ?)", {evil, std::int64_t{-7}, nullptr})
            .value() == 1);
  CHECK(db->Exec("INSERT INTO t (k, n, note) VALUES (?, ?, ?)",
                 {std::string("b?"), std::int64_t{1} << 40, std::string("it's '?'")})
            .value() == 1);
  auto rows = db->Query("SELECT k, n, note FROM t WHERE k <> '?' ORDER BY n").value();
  REQUIRE(rows.size() == 2);
  CHECK(rows[0].Text(0) == evil);
  CHECK(rows[0].Int(1) == -7);
  CHECK(rows[0].IsNull(2));
  CHECK(rows[0].Text(2).empty());
  CHECK(rows[1].Text(0) == "b?");
  CHECK(rows[1].Int(1) == (std::int64_t{1} << 40));
  CHECK(rows[1].Text(2) == "it's '?'");
  CHECK(db->Exec("UPDATE t SET n = n + 1").value() == 2);
  CHECK(db->Exec("DELETE FROM t WHERE k = ?", {std::string("none")}).value() == 0);
  CHECK(db->Exec("CREATE INDEX t_by_n ON t (n)").value() == 0);  // not the last UPDATE's 2
  auto dup = db->Exec("INSERT INTO t (k) VALUES (?)", {evil});
  CHECK(dup.status().code() == Code::kAlreadyExists);
  CHECK(dup.status().message().find("API database") != std::string::npos);
  auto bad = db->Query("SELECT nope FROM t");
  CHECK_FALSE(bad.ok());
  CHECK(bad.status().message().find("API database") != std::string::npos);
}

STORE_TEST("SqlDb: a transaction commits whole or not at all, and nests") {
  auto db = backend.OpenDb();
  REQUIRE(db->Exec("CREATE TABLE t (k TEXT PRIMARY KEY)").ok());
  Status failed = db->InTransaction([&]() -> Status {
    HERD_RETURN_IF_ERROR(db->Exec("INSERT INTO t (k) VALUES ('a')").status());
    return InvalidArgument("changed my mind");
  });
  CHECK(failed.code() == Code::kInvalidArgument);
  CHECK(CountRows(*db, "t") == 0);
  Status ok = db->InTransaction([&]() -> Status {
    HERD_RETURN_IF_ERROR(db->Exec("INSERT INTO t (k) VALUES ('a')").status());
    return db->InTransaction(
        [&]() -> Status { return db->Exec("INSERT INTO t (k) VALUES ('b')").status(); });
  });
  CHECK(ok.ok());
  CHECK(CountRows(*db, "t") == 2);
  // A statement error inside rolls back what came before it.
  Status dup = db->InTransaction([&]() -> Status {
    HERD_RETURN_IF_ERROR(db->Exec("INSERT INTO t (k) VALUES ('c')").status());
    return db->Exec("INSERT INTO t (k) VALUES ('a')").status();
  });
  CHECK(dup.code() == Code::kAlreadyExists);
  CHECK(CountRows(*db, "t") == 2);
  CHECK(db->Exec("INSERT INTO t (k) VALUES ('d')").ok());  // the connection is usable after
}

STORE_TEST("SqlDb: read-modify-write transactions of two connections lose no update") {
  auto setup = backend.OpenDb();
  REQUIRE(setup->Exec("CREATE TABLE counter (id BIGINT PRIMARY KEY, n BIGINT NOT NULL)").ok());
  REQUIRE(setup->Exec("INSERT INTO counter (id, n) VALUES (1, 0)").ok());
  constexpr int kEach = 40;
  std::vector<std::unique_ptr<SqlDb>> dbs;
  dbs.push_back(backend.OpenDb());
  dbs.push_back(backend.OpenDb());
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (auto& db : dbs) {
    threads.emplace_back([&failures, conn = db.get()] {
      for (int i = 0; i < kEach; ++i) {
        Status s = conn->InTransaction([&]() -> Status {
          HERD_ASSIGN_OR_RETURN(SqlRows rows, conn->Query("SELECT n FROM counter WHERE id = 1"));
          return conn->Exec("UPDATE counter SET n = ? WHERE id = 1", {rows.at(0).Int(0) + 1})
              .status();
        });
        if (!s.ok()) ++failures;
      }
    });
  }
  for (auto& t : threads) t.join();
  CHECK(failures == 0);
  CHECK(setup->Query("SELECT n FROM counter").value()[0].Int(0) == 2 * kEach);
}

// ---- schema -------------------------------------------------------------------------------------

STORE_TEST("migrations: applied once, idempotent at reopen, a newer schema refused") {
  {
    auto store = backend.OpenStore();
    CHECK(CountRows(store->db(), "schema_migrations") == ApiStore::SchemaVersion());
  }
  auto again = backend.OpenStore();
  CHECK(CountRows(again->db(), "schema_migrations") == ApiStore::SchemaVersion());
  CHECK(Migrate(again->db(), std::span<const Migration>()).status().code() ==
        Code::kFailedPrecondition);
  REQUIRE(again->AddUser("alice", Role::kAdmin, kNow).ok());
  // A newer herd wrote version 999.
  REQUIRE(again->db()
              .Exec("INSERT INTO schema_migrations (version, description) VALUES (?, ?)",
                    {std::int64_t{999}, std::string("from the future")})
              .ok());
  auto refused = ApiStore::Open(backend.Url(), backend.KeyPath());
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.status().code() == Code::kFailedPrecondition);
  CHECK(refused.status().message().find("schema version 999 is newer") != std::string::npos);
  CHECK(refused.status().message().find("API database") != std::string::npos);
  CHECK(again->GetUser("alice").ok());  // nothing was changed
}

STORE_TEST("migrations: stores opening a fresh database at once apply each migration once") {
  constexpr int kOpeners = 4;
  std::vector<Status> results(kOpeners);
  std::vector<std::thread> threads;
  std::atomic<int> ready{0};
  for (int i = 0; i < kOpeners; ++i) {
    threads.emplace_back([&, i, url = backend.Url(), key = backend.KeyPath()] {
      ++ready;
      while (ready < kOpeners) std::this_thread::yield();
      auto store = ApiStore::Open(url, key);
      results[static_cast<std::size_t>(i)] = store.status();
    });
  }
  for (auto& t : threads) t.join();
  for (const Status& s : results) CHECK_MESSAGE(s.ok(), s.ToString());
  auto store = backend.OpenStore();
  CHECK(CountRows(store->db(), "schema_migrations") == ApiStore::SchemaVersion());
}

STORE_TEST("migrations: processes opening a fresh database at once apply each migration once") {
  // Forked children open their own connections; each leaves with _exit so that nothing of the
  // parent's (its connections) is closed from the child.
  constexpr int kChildren = 3;
  std::vector<pid_t> children;
  for (int i = 0; i < kChildren; ++i) {
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      auto store = ApiStore::Open(backend.Url(), backend.KeyPath());
      ::_exit(store.ok() ? 0 : 1);
    }
    children.push_back(pid);
  }
  for (pid_t pid : children) {
    int status = 0;
    REQUIRE(::waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
  }
  auto store = backend.OpenStore();
  CHECK(CountRows(store->db(), "schema_migrations") == ApiStore::SchemaVersion());
}

// ---- users --------------------------------------------------------------------------------------

STORE_TEST("users: add, get, list, roles, delete, duplicates") {
  auto store = backend.OpenStore();
  REQUIRE(store->AddUser("alice", Role::kAdmin, kNow).ok());
  REQUIRE(store->AddUser("bob.smith-2_x", Role::kUser, kNow + 1).ok());
  const Status dup = store->AddUser("alice", Role::kUser, kNow + 2);
  CHECK(dup.code() == Code::kAlreadyExists);
  CHECK(dup.message().find("alice") != std::string::npos);
  auto alice = store->GetUser("alice").value();
  CHECK(alice.role == Role::kAdmin);
  CHECK(alice.created_at_ms == kNow);
  auto users = store->ListUsers().value();
  REQUIRE(users.size() == 2);
  CHECK(users[0].name == "alice");
  CHECK(users[1].name == "bob.smith-2_x");
  CHECK(users[1].role == Role::kUser);
  CHECK(store->SetRole("bob.smith-2_x", Role::kAdmin).ok());
  CHECK(store->GetUser("bob.smith-2_x")->role == Role::kAdmin);
  CHECK(store->SetRole("carol", Role::kAdmin).code() == Code::kNotFound);
  CHECK(store->DeleteUser("alice").ok());
  CHECK(store->GetUser("alice").status().code() == Code::kNotFound);
  CHECK(store->DeleteUser("alice").code() == Code::kNotFound);
  CHECK(store->AddUser("alice", Role::kUser, kNow + 3).ok());  // the name is free again
  CHECK(ParseRole("admin").value() == Role::kAdmin);
  CHECK(ParseRole("root").status().code() == Code::kInvalidArgument);
  CHECK(store->AddUser(std::string(63, 'a'), Role::kUser, kNow).ok());
}

STORE_TEST(
    "users: names with quotes, ';', '/', '..', NUL or too long are refused, nothing changed") {
  auto store = backend.OpenStore();
  REQUIRE(store->AddUser("alice", Role::kAdmin, kNow).ok());
  const std::string before = backend.Dump();
  const std::vector<std::string> bad = {"",
                                        "a'b",
                                        "a\"b",
                                        "x'; DROP TABLE users; --",
                                        "a;b",
                                        "../etc",
                                        "a/b",
                                        "a..b",
                                        std::string("a\0b", 3),
                                        "a b",
                                        "-lead",
                                        ".hidden",
                                        std::string(64, 'a'),
                                        "caf\xc3\xa9"};
  for (const std::string& name : bad) {
    CAPTURE(name);
    const Status added = store->AddUser(name, Role::kAdmin, kNow);
    CHECK(added.code() == Code::kInvalidArgument);
    CHECK(added.message().find("user name") != std::string::npos);
    CHECK(store->GetUser(name).status().code() == Code::kInvalidArgument);
    CHECK(store->DeleteUser(name).code() == Code::kInvalidArgument);
    CHECK(store->CreateToken(name, 0, kNow).status().code() == Code::kInvalidArgument);
    CHECK(store->ClaimName(NameKind::kCluster, "c1", name, kNow).code() == Code::kInvalidArgument);
    CHECK(store->ClaimName(NameKind::kManagedJob, name, "alice", kNow).code() ==
          Code::kInvalidArgument);
    CHECK(store->ClaimName(NameKind::kCluster, name, "alice", kNow).code() ==
          Code::kInvalidArgument);
    CHECK(store->PutSecret(name, "KEY", "v").code() == Code::kInvalidArgument);
  }
  CHECK(store->ListUsers()->size() == 1);
  CHECK(backend.Dump() == before);
}

// ---- tokens -------------------------------------------------------------------------------------

STORE_TEST("tokens: create, authenticate, expire, revoke, deleted user") {
  auto store = backend.OpenStore();
  REQUIRE(store->AddUser("alice", Role::kAdmin, kNow).ok());
  REQUIRE(store->AddUser("bob", Role::kUser, kNow).ok());
  const NewToken forever = store->CreateToken("alice", 0, kNow).value();
  const NewToken hour = store->CreateToken("bob", kNow + 3'600'000, kNow).value();
  CHECK(forever.token.size() == 5 + 16 + 1 + 43);
  CHECK(forever.token.rfind("herd_" + forever.id + "_", 0) == 0);
  CHECK(forever.id != hour.id);
  CHECK(store->CreateToken("carol", 0, kNow).status().code() == Code::kNotFound);
  CHECK(store->CreateToken("bob", kNow, kNow).status().code() == Code::kInvalidArgument);
  CHECK(store->CreateToken("bob", kNow - 1, kNow).status().code() == Code::kInvalidArgument);
  // Seconds where milliseconds belong: far beyond the longest lifetime.
  CHECK(store->CreateToken("bob", kNow * 1000, kNow).status().code() == Code::kInvalidArgument);

  AuthFailure why{};
  auto user = store->Authenticate(forever.token, kNow + 1);
  REQUIRE_MESSAGE(user.ok(), user.status().ToString());
  CHECK(user->name == "alice");
  CHECK(user->role == Role::kAdmin);
  CHECK(store->Authenticate(hour.token, kNow + 3'599'999)->name == "bob");

  auto denied = [&](const std::string& token, std::int64_t now, AuthFailure expected,
                    const std::string& message) {
    CAPTURE(token);
    auto r = store->Authenticate(token, now, &why);
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == Code::kPermissionDenied);
    CHECK(r.status().message() == message);
    CHECK(why == expected);
  };
  denied(hour.token, kNow + 3'600'000, AuthFailure::kExpired, "token expired");
  denied("", kNow, AuthFailure::kMalformed, "invalid token");
  denied("Bearer " + forever.token, kNow, AuthFailure::kMalformed, "invalid token");
  denied(forever.token.substr(0, forever.token.size() - 1), kNow, AuthFailure::kMalformed,
         "invalid token");
  std::string other_secret = forever.token;
  other_secret.back() = other_secret.back() == 'A' ? 'B' : 'A';
  denied(other_secret, kNow, AuthFailure::kWrongSecret, "invalid token");
  std::string other_id = forever.token;
  other_id[5] = other_id[5] == '0' ? '1' : '0';
  denied(other_id, kNow, AuthFailure::kUnknown, "invalid token");
  // bob's secret under alice's id
  denied("herd_" + forever.id + hour.token.substr(5 + 16), kNow, AuthFailure::kWrongSecret,
         "invalid token");

  CHECK(store->RevokeToken(forever.id, kNow + 5).ok());
  CHECK(store->RevokeToken(forever.id, kNow + 9).ok());
  CHECK(store->RevokeToken("0123456789abcdef", kNow).code() == Code::kNotFound);
  denied(forever.token, kNow + 10, AuthFailure::kRevoked, "token revoked");

  const NewToken bob2 = store->CreateToken("bob", 0, kNow).value();
  CHECK(store->Authenticate(bob2.token, kNow).ok());
  REQUIRE(store->DeleteUser("bob").ok());
  denied(bob2.token, kNow, AuthFailure::kUserDeleted, "user deleted");
  // A new bob is another user: the old bob's tokens stay dead.
  REQUIRE(store->AddUser("bob", Role::kAdmin, kNow + 20).ok());
  denied(bob2.token, kNow + 21, AuthFailure::kUserDeleted, "user deleted");

  auto all = store->ListTokens("").value();
  CHECK(all.size() == 3);
  auto alices = store->ListTokens("alice").value();
  REQUIRE(alices.size() == 1);
  CHECK(alices[0].id == forever.id);
  CHECK(alices[0].user == "alice");
  CHECK(alices[0].created_at_ms == kNow);
  CHECK(alices[0].expires_at_ms == 0);
  CHECK(alices[0].revoked_at_ms == kNow + 5);  // the first revocation's time
  CHECK(store->ListTokens("nobody")->empty());

  // Another connection (another server) authenticates the same tokens.
  const NewToken alice2 = store->CreateToken("alice", 0, kNow + 30).value();
  auto other = backend.OpenStore();
  CHECK(other->Authenticate(alice2.token, kNow + 31)->name == "alice");
  CHECK(other->Authenticate(forever.token, kNow + 31).status().message() == "token revoked");
}

STORE_TEST("tokens: only a random salt and SHA-256(salt || secret) are stored") {
  auto store = backend.OpenStore();
  REQUIRE(store->AddUser("alice", Role::kUser, kNow).ok());
  const NewToken a = store->CreateToken("alice", 0, kNow).value();
  const NewToken b = store->CreateToken("alice", 0, kNow).value();
  const std::string secret_a = a.token.substr(5 + 16 + 1);
  auto rows = store->db().Query("SELECT salt, hash FROM tokens ORDER BY id").value();
  REQUIRE(rows.size() == 2);
  CHECK(rows[0].Text(0) != rows[1].Text(0));  // a salt per token
  CHECK(rows[0].Text(0).size() == 32);
  CHECK(rows[0].Text(1).size() == 64);
  const std::string dump = backend.Dump();
  const std::string files = backend.FileBytes();
  for (const NewToken& t : {a, b}) {
    const std::string secret = t.token.substr(5 + 16 + 1);
    CHECK(dump.find(secret) == std::string::npos);
    CHECK(dump.find(t.token) == std::string::npos);
    CHECK(files.find(secret) == std::string::npos);
    CHECK(dump.find(Sha256Hex(secret)) == std::string::npos);  // salted, not a bare hash
  }
  // The stored hash is the salted one.
  const std::string& salt_hex = a.id < b.id ? rows[0].Text(0) : rows[1].Text(0);
  const std::string& hash_hex = a.id < b.id ? rows[0].Text(1) : rows[1].Text(1);
  std::string salt;
  for (std::size_t i = 0; i < salt_hex.size(); i += 2) {
    salt += static_cast<char>(std::stoi(salt_hex.substr(i, 2), nullptr, 16));
  }
  CHECK(Sha256Hex(salt + secret_a) == hash_hex);
}

// ---- requests -----------------------------------------------------------------------------------

STORE_TEST("requests: lifecycle, cancel flag, listing") {
  auto store = backend.OpenStore();
  const std::string id = store->CreateRequest("alice", "launch", "train", kNow, "srv-a").value();
  CHECK(id.rfind("req-", 0) == 0);
  CHECK(id.size() == 4 + 16);
  auto r = store->GetRequest(id).value();
  CHECK(r.state == RequestState::kPending);
  CHECK(r.user == "alice");
  CHECK(r.verb == "launch");
  CHECK(r.target == "train");
  CHECK(r.holder == "srv-a");
  CHECK(r.created_at_ms == kNow);
  CHECK_FALSE(r.exit_code.has_value());
  CHECK(store->FinishRequest(id, RequestState::kRunning, "", std::nullopt, kNow).code() ==
        Code::kInvalidArgument);

  CHECK(store->IsCancelRequested(id).value() == false);
  CHECK(store->SetRequestRunning(id, "srv-b", kNow + 1).ok());
  CHECK(store->SetRequestRunning(id, "srv-b", kNow + 1).code() == Code::kFailedPrecondition);
  CHECK(store->RequestCancel(id).ok());
  CHECK(store->IsCancelRequested(id).value() == true);
  CHECK(
      store->FinishRequest(id, RequestState::kCancelled, "cancelled by alice", 130, kNow + 2).ok());
  r = store->GetRequest(id).value();
  CHECK(r.state == RequestState::kCancelled);
  CHECK(r.holder == "srv-b");
  CHECK(r.started_at_ms == kNow + 1);
  CHECK(r.finished_at_ms == kNow + 2);
  CHECK(r.exit_code == 130);
  CHECK(r.message == "cancelled by alice");
  const Status again = store->FinishRequest(id, RequestState::kSucceeded, "", 0, kNow + 3);
  CHECK(again.code() == Code::kFailedPrecondition);
  CHECK(again.message().find("CANCELLED") != std::string::npos);
  CHECK(store->RequestCancel(id).code() == Code::kFailedPrecondition);
  CHECK(store->GetRequest("req-none").status().code() == Code::kNotFound);
  CHECK(store->SetRequestRunning("req-none", "srv-a", kNow).code() == Code::kNotFound);
  CHECK(store->IsCancelRequested("req-none").status().code() == Code::kNotFound);

  // Text that PostgreSQL would refuse is cleaned; a long message is cut.
  const std::string odd =
      store->CreateRequest("bob", "exec", std::string("a\0b\xff", 4), kNow + 4).value();
  CHECK(store->GetRequest(odd)->target == "a?b?");
  CHECK(store
            ->FinishRequest(odd, RequestState::kFailed, std::string(10'000, 'x'), std::nullopt,
                            kNow + 5)
            .ok());
  CHECK(store->GetRequest(odd)->message.size() == limits::kApiMaxTextBytes);

  for (int i = 0; i < 5; ++i) {
    REQUIRE(store->CreateRequest("bob", "status", "", kNow + 10 + i).ok());
  }
  auto bobs = store->ListRequests("bob", 3).value();
  REQUIRE(bobs.size() == 3);
  CHECK(bobs[0].created_at_ms == kNow + 14);  // newest first
  CHECK(bobs[2].created_at_ms == kNow + 12);
  CHECK(store->ListRequests("bob", 0)->size() == 6);
  CHECK(store->ListRequests("", 100)->size() == 7);
  CHECK(store->ListRequests("alice", -1)->size() == 1);
}

STORE_TEST("requests: a server started again fails every request it had; another's stay") {
  {
    // Server A accepts three requests, runs two, finishes one, then is killed (no clean exit:
    // the store object just goes away).
    auto a = backend.OpenStore();
    const std::string done = a->CreateRequest("alice", "launch", "c1", kNow, "srv-a").value();
    const std::string running = a->CreateRequest("alice", "exec", "c1", kNow, "srv-a").value();
    const std::string pending = a->CreateRequest("alice", "down", "c1", kNow, "srv-a").value();
    REQUIRE(a->SetRequestRunning(done, "srv-a", kNow).ok());
    REQUIRE(a->SetRequestRunning(running, "srv-a", kNow).ok());
    REQUIRE(a->FinishRequest(done, RequestState::kSucceeded, "", 0, kNow + 1).ok());
  }
  auto b = backend.OpenStore();
  const std::string bs = b->CreateRequest("bob", "launch", "c2", kNow, "srv-b").value();
  REQUIRE(b->SetRequestRunning(bs, "srv-b", kNow).ok());

  auto a = backend.OpenStore();  // A starts again
  CHECK(a->FailUnfinished("srv-a", "the API server restarted", kNow + 100).value() == 2);
  const std::vector<RequestRecord> alices = a->ListRequests("alice", 0).value();
  CHECK(alices.size() == 3);
  for (const RequestRecord& r : alices) {
    CHECK(IsTerminal(r.state));
    if (r.verb != "launch") {
      CHECK(r.state == RequestState::kFailed);
      CHECK(r.message == "the API server restarted");
      CHECK(r.finished_at_ms == kNow + 100);
    } else {
      CHECK(r.state == RequestState::kSucceeded);
    }
  }
  CHECK(a->GetRequest(bs)->state == RequestState::kRunning);  // server B's is not A's to end
  CHECK(a->FailUnfinished("srv-a", "again", kNow + 101).value() == 0);
  // The single-server case: everything unfinished.
  CHECK(a->FailUnfinished("", "restarted", kNow + 102).value() == 1);
  CHECK(a->GetRequest(bs)->state == RequestState::kFailed);
}

// ---- audit --------------------------------------------------------------------------------------

STORE_TEST("audit: recorded in order, listed newest first from a time") {
  auto store = backend.OpenStore();
  REQUIRE(store->RecordAudit("alice", "launch", "c1", "ok", kNow).ok());
  REQUIRE(store->RecordAudit("bob", "down", "c1", "denied: not the owner", kNow + 10).ok());
  REQUIRE(store->RecordAudit("x'; --", "login", "", std::string("bad\0", 4), kNow + 20).ok());
  auto all = store->ListAudit(0, 0).value();
  REQUIRE(all.size() == 3);
  CHECK(all[0].user == "x'; --");
  CHECK(all[0].result == "bad?");
  CHECK(all[1].verb == "down");
  CHECK(all[1].result == "denied: not the owner");
  CHECK(all[2].at_ms == kNow);
  CHECK(all[0].id > all[1].id);
  CHECK(all[1].id > all[2].id);
  auto recent = store->ListAudit(10, kNow + 10).value();
  CHECK(recent.size() == 2);
  CHECK(store->ListAudit(1, 0)->size() == 1);
}

// ---- ownership ----------------------------------------------------------------------------------

STORE_TEST("ownership: names are global, one owner each") {
  auto store = backend.OpenStore();
  CHECK(store->ClaimName(NameKind::kCluster, "train", "alice", kNow).ok());
  CHECK(store->ClaimName(NameKind::kCluster, "train", "alice", kNow + 1).ok());  // again: hers
  const Status taken = store->ClaimName(NameKind::kCluster, "train", "bob", kNow + 2);
  CHECK(taken.code() == Code::kAlreadyExists);
  CHECK(taken.message().find("alice") != std::string::npos);
  // Kinds are separate name spaces.
  CHECK(store->ClaimName(NameKind::kManagedJob, "train", "bob", kNow).ok());
  CHECK(store->ClaimName(NameKind::kCluster, "eval", "bob", kNow).ok());
  CHECK(store->OwnerOf(NameKind::kCluster, "train").value() == "alice");
  CHECK(store->OwnerOf(NameKind::kManagedJob, "train").value() == "bob");
  CHECK(store->OwnerOf(NameKind::kCluster, "none").status().code() == Code::kNotFound);
  auto clusters = store->ListNames(NameKind::kCluster, "").value();
  REQUIRE(clusters.size() == 2);
  CHECK(clusters[0].name == "eval");
  CHECK(clusters[1].name == "train");
  CHECK(clusters[1].owner == "alice");
  CHECK(clusters[1].claimed_at_ms == kNow);
  CHECK(store->ListNames(NameKind::kCluster, "bob")->size() == 1);
  CHECK(store->ListNames(NameKind::kManagedJob, "alice")->empty());
  // Cluster names follow the controller's rule (lowercase); managed-job names the API rule.
  CHECK(store->ClaimName(NameKind::kCluster, "Train", "bob", kNow).code() ==
        Code::kInvalidArgument);
  CHECK(store->ClaimName(NameKind::kManagedJob, "Train.v2", "bob", kNow).ok());
  // Another server sees the same owners.
  auto other = backend.OpenStore();
  CHECK(other->ClaimName(NameKind::kCluster, "train", "bob", kNow).code() == Code::kAlreadyExists);
  CHECK(store->ReleaseName(NameKind::kCluster, "train").ok());
  CHECK(store->ReleaseName(NameKind::kCluster, "train").code() == Code::kNotFound);
  CHECK(other->ClaimName(NameKind::kCluster, "train", "bob", kNow + 3).ok());
  CHECK(store->OwnerOf(NameKind::kCluster, "train").value() == "bob");
}

STORE_TEST("ownership: of many claims racing for one name over two connections, one wins") {
  auto a = backend.OpenStore();
  auto b = backend.OpenStore();
  constexpr int kPerStore = 4;
  std::atomic<int> ready{0}, won{0}, lost{0}, other{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < 2 * kPerStore; ++i) {
    ApiStore* store = i % 2 == 0 ? a.get() : b.get();
    threads.emplace_back([&, store, i] {
      ++ready;
      while (ready < 2 * kPerStore) std::this_thread::yield();
      const Status s =
          store->ClaimName(NameKind::kCluster, "shared", "user" + std::to_string(i), kNow);
      if (s.ok()) {
        ++won;
      } else if (s.code() == Code::kAlreadyExists) {
        ++lost;
      } else {
        ++other;
        MESSAGE(s.ToString());
      }
    });
  }
  for (auto& t : threads) t.join();
  CHECK(won == 1);
  CHECK(lost == 2 * kPerStore - 1);
  CHECK(other == 0);
}

// ---- leases -------------------------------------------------------------------------------------

STORE_TEST("leases: two servers, one holder, renew, expiry and takeover") {
  auto a = backend.OpenStore();
  auto b = backend.OpenStore();
  const std::string job = "managed_job/7";
  CHECK(a->LeaseHolder(job, kNow).value() == std::nullopt);
  CHECK(a->TryAcquireLease(job, "srv-a", 1000, kNow).value());
  CHECK_FALSE(b->TryAcquireLease(job, "srv-b", 1000, kNow + 1).value());
  CHECK(b->LeaseHolder(job, kNow + 1).value() == "srv-a");
  CHECK(a->TryAcquireLease(job, "srv-a", 1000, kNow + 500).value());  // renewed: until +1500
  CHECK_FALSE(b->TryAcquireLease(job, "srv-b", 1000, kNow + 1400).value());
  CHECK(a->RenewLease(job, "srv-a", 1000, kNow + 1400).ok());  // until +2400
  const Status not_b = b->RenewLease(job, "srv-b", 1000, kNow + 1401);
  CHECK(not_b.code() == Code::kFailedPrecondition);
  CHECK(not_b.message().find("srv-a") != std::string::npos);
  // srv-a stops renewing: at its expiry the lease is free and srv-b takes it over.
  CHECK(b->LeaseHolder(job, kNow + 2400).value() == std::nullopt);
  CHECK(b->TryAcquireLease(job, "srv-b", 1000, kNow + 2400).value());
  CHECK(a->LeaseHolder(job, kNow + 2401).value() == "srv-b");
  CHECK(a->RenewLease(job, "srv-a", 1000, kNow + 2401).code() == Code::kFailedPrecondition);
  CHECK_FALSE(a->TryAcquireLease(job, "srv-a", 1000, kNow + 2402).value());
  // Release: only by the holder.
  CHECK(a->ReleaseLease(job, "srv-a").ok());
  CHECK(a->LeaseHolder(job, kNow + 2403).value() == "srv-b");
  CHECK(b->ReleaseLease(job, "srv-b").ok());
  CHECK(a->LeaseHolder(job, kNow + 2404).value() == std::nullopt);
  CHECK(a->TryAcquireLease(job, "srv-a", 0, kNow + 2405).value());  // default TTL
  CHECK(a->LeaseHolder(job, kNow + 2405 + limits::kApiLeaseTtl.count() - 1).value() == "srv-a");
  CHECK(a->LeaseHolder(job, kNow + 2405 + limits::kApiLeaseTtl.count()).value() == std::nullopt);
  CHECK(a->TryAcquireLease(job, "srv-a", -5, kNow).status().code() == Code::kInvalidArgument);
  CHECK(
      a->TryAcquireLease(job, "srv-a", limits::kApiLeaseMaxTtl.count() + 1, kNow).status().code() ==
      Code::kInvalidArgument);
  CHECK(a->TryAcquireLease("", "srv-a", 0, kNow).status().code() == Code::kInvalidArgument);
  CHECK(a->TryAcquireLease(job, "srv a", 0, kNow).status().code() == Code::kInvalidArgument);
}

STORE_TEST("leases: of many servers racing for a free or expired lease, exactly one gets it") {
  auto a = backend.OpenStore();
  auto b = backend.OpenStore();
  REQUIRE(a->TryAcquireLease("expired", "old", 1000, kNow - 5000).value());
  for (const std::string lease : {"fresh", "expired"}) {
    CAPTURE(lease);
    constexpr int kRacers = 8;
    std::atomic<int> ready{0}, won{0}, failed{0};
    std::vector<std::thread> threads;
    for (int i = 0; i < kRacers; ++i) {
      ApiStore* store = i % 2 == 0 ? a.get() : b.get();
      threads.emplace_back([&, store, i] {
        ++ready;
        while (ready < kRacers) std::this_thread::yield();
        auto got = store->TryAcquireLease(lease, "srv-" + std::to_string(i), 10'000, kNow);
        if (!got.ok()) {
          ++failed;
        } else if (*got) {
          ++won;
        }
      });
    }
    for (auto& t : threads) t.join();
    CHECK(failed == 0);
    CHECK(won == 1);
    const auto holder = a->LeaseHolder(lease, kNow).value();
    REQUIRE(holder.has_value());
    CHECK(holder->rfind("srv-", 0) == 0);
  }
}

// ---- GPU samples
// ----------------------------------------------------------------------------------

STORE_TEST("gpu samples: one per interval, listed oldest first, per cluster") {
  auto store = backend.OpenStore();
  const GpuSampleBounds b{30'000, 3'600'000, 100};
  CHECK(store->RecordGpuSample("train", 8, 2, kNow, b).value());
  // Within the interval: not recorded, the first stays as it was.
  CHECK_FALSE(store->RecordGpuSample("train", 8, 7, kNow + 29'999, b).value());
  CHECK(store->RecordGpuSample("train", 8, 5, kNow + 30'000, b).value());
  CHECK(store->RecordGpuSample("other", 4, 4, kNow + 1, b).value());
  auto train = store->ListGpuSamples("train", 0).value();
  REQUIRE(train.size() == 2);
  CHECK(train[0].at_ms == kNow);
  CHECK(train[0].gpus == 8);
  CHECK(train[0].in_use == 2);
  CHECK(train[1].at_ms == kNow + 30'000);
  CHECK(train[1].in_use == 5);
  CHECK(store->ListGpuSamples("train", kNow + 1).value().size() == 1);
  REQUIRE(store->ListGpuSamples("other", 0).value().size() == 1);
  CHECK(store->ListGpuSamples("none", 0).value().empty());
  // Names are checked, never glued into SQL; counts are not negative.
  CHECK(store->RecordGpuSample("x'; DROP TABLE gpu_samples; --", 1, 0, kNow, b).status().code() ==
        Code::kInvalidArgument);
  CHECK(store->ListGpuSamples("<script>", 0).status().code() == Code::kInvalidArgument);
  CHECK(store->RecordGpuSample("train", -1, 0, kNow + 90'000, b).status().code() ==
        Code::kInvalidArgument);
  CHECK(CountRows(store->db(), "gpu_samples") == 3);
}

STORE_TEST("gpu samples: bounded by age and by a per-cluster cap") {
  auto store = backend.OpenStore();
  const GpuSampleBounds b{1'000, 60'000, 5};
  for (int i = 0; i < 12; ++i) {
    REQUIRE(store->RecordGpuSample("train", 4, i % 5, kNow + i * 1'000, b).value());
  }
  // The cap keeps the newest 5.
  auto kept = store->ListGpuSamples("train", 0).value();
  REQUIRE(kept.size() == 5);
  CHECK(kept.front().at_ms == kNow + 7'000);
  CHECK(kept.back().at_ms == kNow + 11'000);
  REQUIRE(store->RecordGpuSample("gone", 2, 1, kNow, b).value());
  // A minute later every sample older than the retention goes, a gone cluster's too.
  REQUIRE(store->RecordGpuSample("train", 4, 0, kNow + 71'500, b).value());
  kept = store->ListGpuSamples("train", 0).value();
  REQUIRE(kept.size() == 1);
  CHECK(kept[0].at_ms == kNow + 71'500);
  CHECK(store->ListGpuSamples("gone", 0).value().empty());
  CHECK(CountRows(store->db(), "gpu_samples") == 1);
  // The defaults are limits.hpp's.
  const GpuSampleBounds d = GpuSampleBounds::Default();
  CHECK(d.per_cluster == static_cast<std::int64_t>(limits::kDashboardGpuSamplesPerCluster));
  CHECK(d.interval_ms ==
        std::chrono::duration_cast<std::chrono::milliseconds>(limits::kDashboardGpuSampleInterval)
            .count());
}

STORE_TEST("gpu samples: stores sampling one cluster at once record it once") {
  auto setup = backend.OpenStore();
  constexpr int kStores = 4;
  std::vector<std::unique_ptr<ApiStore>> stores;
  for (int i = 0; i < kStores; ++i) stores.push_back(backend.OpenStore());
  std::atomic<int> ready{0}, recorded{0}, failed{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < kStores; ++i) {
    threads.emplace_back([&, i] {
      ++ready;
      while (ready < kStores) std::this_thread::yield();
      // Each server's clock a little apart, all within one interval.
      auto r = stores[static_cast<std::size_t>(i)]->RecordGpuSample("train", 8, 1, kNow + i);
      if (!r.ok()) ++failed;
      if (r.ok() && *r) ++recorded;
    });
  }
  for (auto& t : threads) t.join();
  CHECK(failed == 0);
  CHECK(recorded == 1);
  CHECK(CountRows(setup->db(), "gpu_samples") == 1);
}

// ---- secrets ------------------------------------------------------------------------------------

STORE_TEST("secrets: sealed at rest, bound to their row, and the key checked at open") {
  const std::string plaintext = "hf_S3CR3T-value-0123456789abcdefXYZ";
  {
    auto store = backend.OpenStore();
    REQUIRE(store->PutSecret("alice", "HF_TOKEN", "old value").ok());
    REQUIRE(store->PutSecret("alice", "HF_TOKEN", plaintext).ok());  // replaced
    REQUIRE(store->PutSecret("alice", "WANDB_API_KEY", "w").ok());
    REQUIRE(store->PutSecret("bob", "HF_TOKEN", "bobs").ok());
    CHECK(store->GetSecret("alice", "HF_TOKEN").value() == plaintext);
    CHECK(store->GetSecret("bob", "HF_TOKEN").value() == "bobs");
    CHECK(store->GetSecret("carol", "HF_TOKEN").status().code() == Code::kNotFound);
    CHECK(store->ListSecretKeys("alice").value() ==
          std::vector<std::string>{"HF_TOKEN", "WANDB_API_KEY"});
    CHECK(store->PutSecret("alice", "1BAD", "x").code() == Code::kInvalidArgument);
    CHECK(store->PutSecret("alice", "A-B", "x").code() == Code::kInvalidArgument);
    CHECK(
        store->PutSecret("alice", "BIG", std::string(limits::kApiMaxSecretBytes + 1, 'x')).code() ==
        Code::kInvalidArgument);
    // The raw column holds no plaintext; neither do the SQLite file and its WAL.
    auto raw = store->db().Query("SELECT sealed FROM secrets").value();
    REQUIRE(raw.size() == 3);
    for (const SqlRow& row : raw) CHECK(row.Text(0).find(plaintext) == std::string::npos);
    CHECK(backend.Dump().find(plaintext) == std::string::npos);
    CHECK(backend.Dump().find("hf_S3CR3T") == std::string::npos);
    CHECK(backend.FileBytes().find("hf_S3CR3T") == std::string::npos);
    CHECK(backend.FileBytes().find("old value") == std::string::npos);
    // A sealed value copied to another row does not open there.
    REQUIRE(store->db()
                .Exec("UPDATE secrets SET sealed = (SELECT sealed FROM secrets WHERE owner = "
                      "'alice' AND name = 'HF_TOKEN') WHERE owner = 'bob'")
                .ok());
    CHECK(store->GetSecret("bob", "HF_TOKEN").status().code() == Code::kFailedPrecondition);
    CHECK(store->DeleteSecret("bob", "HF_TOKEN").ok());
    CHECK(store->DeleteSecret("bob", "HF_TOKEN").code() == Code::kNotFound);
  }
  // Reopened with the same key: readable.
  CHECK(backend.OpenStore()->GetSecret("alice", "HF_TOKEN").value() == plaintext);
  // Another key file: refused at open, naming the key.
  TempDir other{"herd-api-otherkey"};
  REQUIRE(SecretBox::Create(other / "secrets.key").ok());
  auto wrong = ApiStore::Open(backend.Url(), other / "secrets.key");
  CHECK(wrong.status().code() == Code::kFailedPrecondition);
  CHECK(wrong.status().message().find(other / "secrets.key") != std::string::npos);
  // No key file while secrets exist: refused, not a fresh key.
  auto missing = ApiStore::Open(backend.Url(), other / "missing.key");
  CHECK(missing.status().code() == Code::kFailedPrecondition);
  CHECK_FALSE(std::filesystem::exists(other / "missing.key"));
}

// ---- backend-independent helpers ----------------------------------------------------------------

TEST_CASE("ToPostgresPlaceholders numbers ? outside quotes and comments") {
  CHECK(ToPostgresPlaceholders("SELECT a FROM t WHERE b = ? AND c = ?") ==
        "SELECT a FROM t WHERE b = $1 AND c = $2");
  CHECK(ToPostgresPlaceholders("SELECT '?', \"a?\" FROM t WHERE x = ? -- why?\nAND y = ?") ==
        "SELECT '?', \"a?\" FROM t WHERE x = $1 -- why?\nAND y = $2");
  CHECK(ToPostgresPlaceholders("SELECT 'it''s ?' WHERE ? = ?") == "SELECT 'it''s ?' WHERE $1 = $2");
  CHECK(ToPostgresPlaceholders("no params") == "no params");
}

TEST_CASE("RedactDbUrl drops passwords and keeps the rest") {
  CHECK(RedactDbUrl("postgresql://herd:hunter2@db.example:5432/herd?sslmode=require") ==
        "postgresql://herd@db.example:5432/herd?sslmode=require");
  CHECK(RedactDbUrl("postgres://u:p@h/d?password=hunter2&sslmode=require") ==
        "postgres://u@h/d?sslmode=require");
  CHECK(RedactDbUrl("postgresql://u:p%40ss@h/d?password=x") == "postgresql://u@h/d");
  CHECK(RedactDbUrl("postgresql://h:5432/d") == "postgresql://h:5432/d");
  CHECK(RedactDbUrl("sqlite:/var/lib/herd/api.db") == "sqlite:/var/lib/herd/api.db");
}

TEST_CASE("OpenSqlDb: schemes, and errors that name the database but not its password") {
  TempDir dir{"herd-api-open"};
  auto plain = OpenSqlDb(dir / "a.db");
  REQUIRE_MESSAGE(plain.ok(), plain.status().ToString());
  CHECK((*plain)->Dialect() == "sqlite");
  CHECK((*plain)->Name() == "API database sqlite:" + dir / "a.db");
  auto prefixed = OpenSqlDb("sqlite:" + dir / "b.db");
  REQUIRE(prefixed.ok());
  CHECK(std::filesystem::exists(dir / "b.db"));
  CHECK((std::filesystem::status(dir / "b.db").permissions() & std::filesystem::perms::all) ==
        (std::filesystem::perms::owner_read | std::filesystem::perms::owner_write));
  CHECK(OpenSqlDb("").status().code() == Code::kInvalidArgument);
  CHECK(OpenSqlDb("mysql://u:hunter2@h/d").status().code() == Code::kInvalidArgument);
  CHECK(OpenSqlDb("mysql://u:hunter2@h/d").status().message().find("hunter2") == std::string::npos);
  CHECK(OpenSqlDb(dir / "no/such/dir/c.db").status().message().find(dir / "no/such/dir/c.db") !=
        std::string::npos);
  // Port 1 of loopback: nothing listens; refused at once.
  auto pg = OpenSqlDb("postgresql://herd:hunter2@127.0.0.1:1/herd");
  REQUIRE_FALSE(pg.ok());
  CHECK(pg.status().code() == Code::kUnavailable);
  CHECK(pg.status().message().find("postgresql://herd@127.0.0.1:1/herd") != std::string::npos);
  CHECK(pg.status().message().find("hunter2") == std::string::npos);
}

TEST_CASE("CleanText keeps valid UTF-8, replaces NUL and bad bytes, cuts at a character") {
  CHECK(CleanText("plain") == "plain");
  CHECK(CleanText("caf\xc3\xa9 \xe2\x9c\x93") == "caf\xc3\xa9 \xe2\x9c\x93");
  CHECK(CleanText(std::string("a\0b", 3)) == "a?b");
  CHECK(CleanText("\xff\xc3") == "??");
  CHECK(CleanText("\xed\xa0\x80") == "???");  // a surrogate
  CHECK(CleanText("\xc0\xaf") == "??");       // overlong '/'
  const std::string cut = CleanText(std::string(limits::kApiMaxTextBytes - 1, 'x') + "\xc3\xa9");
  CHECK(cut.size() == limits::kApiMaxTextBytes - 1);
}

}  // namespace
}  // namespace herd::server
