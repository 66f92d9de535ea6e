// A managed-job controller that resumes a running job (its process was restarted, or a team
// server took the job over) and cannot reach the cluster's head, on simulated time: the head is
// asked again until limits::kManagedResumeHeadWait while its machine's sshd answers, and the
// attempt is lost after limits::kNodeLostAfter when it does not. The head node's sshd is a
// loopback listener of the test's own that greets as an SSH server (or a port nobody listens
// on); the cluster operations run on fakes (tests/fakes) with a FakeClock, so the waits take no
// real time.
#include <doctest/doctest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <atomic>
#include <chrono>
#include <memory>
#include <thread>

#include "controller/jobs/managed_job_store.hpp"
#include "controller/jobs/managed_jobs.hpp"
#include "controller/jobs/task_codec.hpp"
#include "controller/ops/cluster_ops.hpp"
#include "controller/state/cluster_store.hpp"
#include "controller/state/herd_home.hpp"
#include "shared/common/limits.hpp"
#include "tests/fakes/fake_clock.hpp"
#include "tests/fakes/fake_head.hpp"
#include "tests/fakes/fake_provider.hpp"
#include "tests/fakes/fake_ssh_runner.hpp"
#include "tests/unit/controller/jobs/managed_job_support.hpp"
#include "tests/unit/test_support.hpp"

namespace herd::controller {
namespace {

using std::chrono::milliseconds;
constexpr const char* kHeadIp = "127.0.236.1";

// A TCP listener on kHeadIp that greets every connection as an SSH server does, then closes it;
// or, with greet false, a port nothing listens on (connections refused).
class FakeSshd {
 public:
  explicit FakeSshd(bool greet) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    REQUIRE(fd_ >= 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    REQUIRE(::inet_pton(AF_INET, kHeadIp, &a.sin_addr) == 1);
    REQUIRE(::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    socklen_t len = sizeof a;
    REQUIRE(::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) == 0);
    port_ = ntohs(a.sin_port);
    if (!greet) {
      ::close(fd_);  // the port is free again: a connection to it is refused
      fd_ = -1;
      return;
    }
    REQUIRE(::listen(fd_, 16) == 0);
    thread_ = std::thread([this] {
      while (true) {
        int c = ::accept(fd_, nullptr, nullptr);
        if (c < 0 || stop_) {
          if (c >= 0) ::close(c);
          return;
        }
        ++greeted_;
        static constexpr char kBanner[] = "SSH-2.0-OpenSSH_9.2p1 fake\r\n";
        (void)!::write(c, kBanner, sizeof kBanner - 1);
        ::close(c);
      }
    });
  }
  ~FakeSshd() {
    if (fd_ < 0) return;
    stop_ = true;
    ::shutdown(fd_, SHUT_RDWR);
    ::close(fd_);
    thread_.join();
  }
  int port() const { return port_; }
  int greeted() const { return greeted_; }

 private:
  int fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int> greeted_{0};
  std::thread thread_;
};

struct World {
  herd::testing::TempHome home{"herd-mj-resume"};
  std::shared_ptr<herd::testing::FakeProviderState> provider =
      std::make_shared<herd::testing::FakeProviderState>();
  std::shared_ptr<herd::testing::FakeHeadConnector> heads =
      std::make_shared<herd::testing::FakeHeadConnector>();
  std::shared_ptr<herd::testing::FakeClock> clock = std::make_shared<herd::testing::FakeClock>();
  ops::ClusterOps ops{Parts()};

  ops::ClusterOpsParts Parts() {
    ops::ClusterOpsParts p;
    p.providers = [this](const std::string&,
                         const task::Resources*) -> Result<std::unique_ptr<Provider>> {
      return std::unique_ptr<Provider>(new herd::testing::FakeProvider(provider));
    };
    p.ssh = std::make_shared<herd::testing::RecordingSshRunner>();
    p.open_store = ops::OwnConnectionTo([] { return StateDbPath(); });
    p.heads = heads;
    p.clock = clock;
    p.user = "alice";
    return p;
  }

  // The attempt's cluster as its launch left it: UP, one node, its sshd on `ssh_port`; its head
  // refuses every connection.
  void PutCluster(const std::string& name, int ssh_port) {
    ClusterRecord c;
    c.name = name;
    c.infra = c.provider = "local";
    c.status = ClusterStatus::kUp;
    c.state_dir = ClusterDir(name);
    c.certs_dir = c.state_dir + "/certs";
    c.control_dir = c.state_dir + "/cm";
    NodeRecord n;
    n.name = name + "-head";
    n.ip = kHeadIp;
    n.ssh_port = ssh_port;
    n.is_head = true;
    c.nodes.push_back(n);
    REQUIRE(EnsureDir(c.state_dir).ok());
    auto store = ClusterStore::Open(StateDbPath());
    REQUIRE(store.ok());
    REQUIRE((*store)->Put(c).ok());
    heads->Head(name)->refuse = Unavailable("connect " + std::string(kHeadIp) + ": refused");
  }

  // A job whose attempt 1 runs cluster job 7 on `cluster`, with no controller (it is resumed),
  // and job_recovery none: a lost attempt ends the job.
  int64_t PutRunningJob(const std::string& cluster) {
    task::Task t;
    t.name = "resumed";
    t.run = "true";
    task::JobRecovery none;
    none.strategy = "NONE";
    t.resources.job_recovery = none;
    jobs::ManagedJob job;
    job.name = t.name;
    job.state = jobs::ManagedState::kRunning;
    job.task_json = jobs::EncodeTask(t);
    job.cluster = cluster;
    job.submitted_unix_ms = clock->UnixMs();
    job.attempts.push_back({.attempt = 1,
                            .cluster = cluster,
                            .cluster_job_id = 7,
                            .start_unix_ms = clock->UnixMs(),
                            .end_unix_ms = 0,
                            .outcome = "",
                            .reason = ""});
    auto db = jobs::ManagedJobStore::Open(jobs::ManagedJobsDbPath());
    REQUIRE(db.ok());
    auto id = (*db)->Create(job);
    REQUIRE(id.ok());
    return *id;
  }
};

TEST_CASE("resuming: a head whose machine answers is asked again for kManagedResumeHeadWait") {
  World w;
  FakeSshd sshd(/*greet=*/true);
  w.PutCluster("mjr-a", sshd.port());
  const int64_t id = w.PutRunningJob("mjr-a");
  const auto start = w.clock->Now();
  CHECK(RunManagedController(w.ops, id) == 0);
  const auto waited = w.clock->Now() - start;
  // Lost once the head stayed silent the whole wait (asked every kManagedResumeRetry), not at
  // kNodeLostAfter: the machine kept answering.
  CHECK(waited >= limits::kManagedResumeHeadWait);
  CHECK(waited < limits::kManagedResumeHeadWait + limits::kManagedResumeRetry * 2);
  CHECK(sshd.greeted() >= 2);
  const jobs::ManagedJob job = herd::testing::StoredJob(id);
  CHECK(job.state == jobs::ManagedState::kFailed);
  REQUIRE(job.attempts.size() == 1);
  CHECK(job.attempts[0].outcome == "NODE_LOST");
  CHECK(
      job.attempts[0].reason.starts_with("lost the cluster's head: connect 127.0.236.1: "
                                         "refused; a node of the cluster was lost; "
                                         "job_recovery is none"));
  CHECK(w.heads->Head("mjr-a")->connections == 0);
}

TEST_CASE("resuming: a head whose machine does not answer either is lost after kNodeLostAfter") {
  World w;
  FakeSshd closed(/*greet=*/false);
  w.PutCluster("mjr-b", closed.port());
  const int64_t id = w.PutRunningJob("mjr-b");
  const auto start = w.clock->Now();
  CHECK(RunManagedController(w.ops, id) == 0);
  const auto waited = w.clock->Now() - start;
  CHECK(waited >= limits::kNodeLostAfter);
  CHECK(waited < limits::kNodeLostAfter + limits::kManagedResumeRetry * 2);
  CHECK(waited < limits::kManagedResumeHeadWait);
  const jobs::ManagedJob job = herd::testing::StoredJob(id);
  CHECK(job.state == jobs::ManagedState::kFailed);
  REQUIRE(job.attempts.size() == 1);
  CHECK(job.attempts[0].outcome == "NODE_LOST");
}

}  // namespace
}  // namespace herd::controller
