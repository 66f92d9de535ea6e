// A local port-forward to one remote endpoint, kept on a target's ControlMaster across herd
// commands. Its local port is recorded in a file (in the cluster's private ControlMaster
// directory), so a warm command dials 127.0.0.1:<port> without starting any ssh process. The
// forward dies with its master (ControlPersist, CloseMaster); the caller then sees its dial fail
// and calls Renew, which makes a new one.
//
// A recorded port can be stale: nothing listens there any more (connection refused), or another
// program took it. The caller must authenticate what answers (herd's head: mutual TLS with the
// cluster's CA), so a stale record costs one failed dial, never a wrong peer.
#pragma once

#include <string>

#include "controller/ssh/ssh_runner.hpp"
#include "controller/ssh/ssh_target.hpp"
#include "shared/common/status.hpp"

namespace herd::controller {

class KeptForward {
 public:
  // record_path: where the port is kept; record_path + ".lock" serialises renewals.
  KeptForward(SshRunner& ssh, SshTarget target, std::string remote_host, int remote_port,
              std::string record_path);

  // The recorded port, or 0 when there is no (readable, valid) record.
  int Recorded() const;

  // Replaces the forward at `stale` (0: none known) with a new one, records it and returns its
  // port. Renewals of one record are serialised across processes (flock); when another process
  // renewed it meanwhile (the record no longer says `stale`), that forward is returned and no
  // new one is made. The stale forward is cancelled first, so forwards do not pile up on a master
  // whose forward works but whose far end is down (a head still starting).
  Result<int> Renew(int stale);

  const std::string& record_path() const { return record_path_; }

 private:
  SshRunner& ssh_;
  SshTarget target_;
  std::string remote_host_;
  int remote_port_;
  std::string record_path_;
};

}  // namespace herd::controller
