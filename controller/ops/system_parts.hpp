// The parts a herd process on this machine runs the cluster operations with: OpenSSH, the
// providers herd has, the cluster store at $HERD_HOME/state.db, heads reached through an SSH
// forward kept between commands and the cluster's mux, and the system clock.
#pragma once

#include <string>

#include "controller/ops/cluster_ops.hpp"

namespace herd::ops {

// "local", "ssh/<pool>" and "aws[/REGION[/ZONE]]"; InvalidArgument naming the infra otherwise.
Result<std::unique_ptr<controller::Provider>> MakeSystemProvider(const std::string& infra,
                                                                 const Resources* resources);

// A head through an SSH port-forward (the ControlMaster of the head node), mutual TLS inside it;
// through the cluster's mux when one runs (controller/core/mux.hpp), else a dial of its own after
// which it starts a mux (unless start_mux is false).
class SshHeadConnector final : public HeadConnector {
 public:
  // via_mux: a connection goes through the cluster's mux when one runs (and a command that
  // dialled the head itself may start one); false: always its own TLS connection, for a process
  // that keeps its connections (a relay through the mux would then cost every read a hop).
  SshHeadConnector(std::shared_ptr<controller::SshRunner> ssh, StoreOpener open_store,
                   bool via_mux = true)
      : ssh_(std::move(ssh)), open_store_(std::move(open_store)), via_mux_(via_mux) {}
  Result<std::unique_ptr<HeadApi>> Connect(const ClusterRecord& cluster, bool start_mux) override;

 private:
  std::shared_ptr<controller::SshRunner> ssh_;
  StoreOpener open_store_;
  bool via_mux_;
};

// For a long-lived process that runs one read after another (the API server's warm worker,
// `herd _serve`): from now on the heads of every SystemParts keep their connections between
// commands, one per cluster, and a command asks again on a fresh connection (once) when a kept
// one turns out closed. Only reads keep theirs: a connection that carried anything else, a
// followed log or a failed call is closed with its command, as without this.
void KeepHeadConnections();

// For the same long-lived process: from now on every SystemParts shares one connection to the
// cluster store, opened at its first use and kept for the rest of the process, instead of opening
// one per call. Opening a connection (the WAL index, the schema check, the statements) and closing
// it (the checkpoint) cost more than a read's queries; a kept connection still sees every write
// committed by other processes (each query is a read transaction of its own).
void KeepClusterStoreOpen();

// user: who submits jobs; "" means $USER (else root).
ClusterOpsParts SystemParts(std::string user = "");

}  // namespace herd::ops
