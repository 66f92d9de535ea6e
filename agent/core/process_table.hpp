// The worker's process table on disk, in its state directory: what a restarted agent needs to
// adopt the processes its predecessor started, and the exits that predecessor had already seen
// (so that a StartProcess sent again after a reconnect is answered with the exit, not run twice).
//
//   processes.pb     the live entries (starting or running), a ProcessTable rewritten atomically
//                    on every change; a few entries, whatever the node's history. Written into
//                    processes.pb.next and swapped with it (WriteFileSwapped): no inode freed
//                    per write. Load never reads .next (a write torn by a crash stays there).
//   processes.exits  the exited entries, one record each, appended when a process ends: a 4-byte
//                    little-endian length, then a SupervisedProcess. Rewritten (atomically) from
//                    the worker's memory once it holds more than twice
//                    limits::kMaxExitedProcessesKept records, so it stays bounded too.
//
// The exits are appended, not kept in processes.pb: with limits::kMaxExitedProcessesKept of them
// remembered, rewriting them all a few times per job would cost more than the job's own
// bookkeeping in a burst of `herd exec -d`. A processes.pb written by an older agent (exits in it)
// still loads: an in-place upgrade keeps what it knew.
//
// No fsync (Durability::kProcessCrash): the table is
// for a restarted agent; a power failure or kernel crash leaves no live process to adopt. A record
// torn by such a crash ends the journal where it starts (the exits after it are lost, the live
// entries are not); Load() cuts it off there. Not thread-safe: the worker's event loop owns it.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "herd/v1/agent.pb.h"
#include "shared/common/status.hpp"

namespace herd::agent {

class ProcessTableFile {
 public:
  using Entries = std::vector<herd::v1::SupervisedProcess>;

  explicit ProcessTableFile(std::string state_dir);

  // Every entry the files hold: the journal's exits first (in the order they were appended), then
  // the live table's entries that no exit record names (a process that ended after the table was
  // last written is an exit, not a live process). The first journal_records() entries are the
  // journal's. Empty on a first start. Unreadable parts are logged and skipped.
  Entries Load();

  // Persists a change: appends `newly_exited` to the journal (or rewrites the journal as
  // `all_exited()` when it would grow past its bound), then rewrites the live table as `live`.
  // When the journal cannot be written, `newly_exited` go into the live table instead (as an older
  // agent kept them) and the error is returned: the caller offers them again next time.
  Status Save(const Entries& live, const Entries& newly_exited,
              const std::function<Entries()>& all_exited);

  std::string table_path() const { return dir_ + "/processes.pb"; }
  std::string journal_path() const { return dir_ + "/processes.exits"; }
  // Records in the journal file now (what the bound is checked against).
  int journal_records() const { return journal_records_; }

 private:
  std::string dir_;
  int journal_records_ = 0;
};

}  // namespace herd::agent
