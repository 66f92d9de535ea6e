// Managed jobs hosted by the server: their controllers are the keeper's children (job_keeper.hpp),
// leased to one server of the database by this server's id; a job's secrets are sealed at rest
// under its user for the controllers to read.
#include "controller/jobs/managed_job_store.hpp"
#include "controller/server/server_impl.hpp"
#include "shared/common/file_util.hpp"
#include "shared/common/log.hpp"

namespace herd::server::detail {

namespace {

// This server's id (made once in its home): its lease rows survive its restart under it.
Result<std::string> ServerId(const ServerHome& home) {
  if (auto text = ReadFile(home.ServerId()); text.ok()) {
    std::string id = *text;
    while (!id.empty() && (id.back() == '\n' || id.back() == ' ')) id.pop_back();
    if (!id.empty()) return id;
  }
  HERD_ASSIGN_OR_RETURN(std::string random, RandomHex(6));
  const std::string id = "srv-" + random;
  HERD_RETURN_IF_ERROR(WriteFileAtomic(home.ServerId(), id + "\n", 0600));
  return id;
}

}  // namespace

Status ServerImpl::StartKeeper() {
  HERD_ASSIGN_OR_RETURN(std::string id, ServerId(home_));
  std::weak_ptr<ServerImpl> weak = shared_from_this();
  HERD_ASSIGN_OR_RETURN(keeper_,
                        StartServerKeeper(*store_, {.holder = id,
                                                    .state_dir = home_.state,
                                                    .herd_binary = options_.herd_binary,
                                                    .user_env = [weak](const std::string& user) {
                                                      auto self = weak.lock();
                                                      return self ? self->ChildEnv(user, false)
                                                                  : std::vector<std::string>();
                                                    }}));
  HERD_LOG(kInfo) << "managed jobs' controllers run here as " << id;
  return Status::Ok();
}

Result<std::string> ServerImpl::KeepManagedSecrets(const std::string& user,
                                                   const std::string& json) {
  HERD_ASSIGN_OR_RETURN(std::string ref, RandomHex(8));
  HERD_RETURN_IF_ERROR(store_->PutSecret(user, jobs::ManagedSecretsKey(ref), json));
  return ref;
}

void ServerImpl::LaunchedManaged(const std::string& user, const std::string& verb, int code,
                                 const std::string& secrets_ref) {
  if (verb != "jobs.launch") return;
  if (code != 0 && !secrets_ref.empty()) {
    (void)store_->DeleteSecret(user, jobs::ManagedSecretsKey(secrets_ref));
  }
  if (keeper_) keeper_->Kick();
}

}  // namespace herd::server::detail
