// POST /api/v1/uploads: a tar archive (a task's workdir, a file mount) kept under the user until
// the command that names it unpacks it into its directory.
#include <filesystem>

#include "controller/server/server_impl.hpp"
#include "controller/ssh/subprocess.hpp"
#include "controller/state/herd_home.hpp"
#include "shared/common/file_util.hpp"
#include "shared/common/limits.hpp"

namespace herd::server::detail {

namespace fs = std::filesystem;
using api_http::HttpError;
using api_http::HttpRequest;
using api_http::Responder;

Status ServerImpl::ValidateUploadName(const std::string& name) {
  if (name == "workdir") return Status::Ok();
  if (name.rfind("mounts/", 0) == 0 && name.size() > 7 && name.size() <= 12 &&
      name.find_first_not_of("0123456789", 7) == std::string::npos) {
    return Status::Ok();
  }
  return InvalidArgument("uploads: '" + name + "' is not an upload place (workdir or mounts/N)");
}

void ServerImpl::Upload(const User& user, const HttpRequest& req,
                        const std::shared_ptr<Responder>& res) {
  if (req.body.empty()) return res->Respond(HttpError(InvalidArgument("upload: empty body")));
  auto random = RandomHex(8);
  if (!random.ok()) return res->Respond(HttpError(random.status()));
  const std::string id = "up-" + *random;
  const std::string dir = home_.UploadDir(user.name);
  if (auto s = controller::EnsureDir(dir); !s.ok()) return res->Respond(HttpError(s));
  if (auto s = WriteFileAtomic(dir + "/" + id + ".tar", req.body, 0600); !s.ok()) {
    return res->Respond(HttpError(s));
  }
  res->Respond(Json(boost::json::object{{"id", id}, {"bytes", req.body.size()}}, 201));
}

Status ServerImpl::Unpack(const std::string& user, const std::string& upload,
                          const std::string& dest) {
  const std::string file = home_.UploadDir(user) + "/" + upload + ".tar";
  std::error_code ec;
  if (!fs::exists(file, ec)) return NotFound("uploads: no upload " + upload + " of " + user);
  HERD_RETURN_IF_ERROR(controller::EnsureDir(dest));
  HERD_ASSIGN_OR_RETURN(auto r, controller::RunProcess({"tar", "-xf", file, "-C", dest,
                                                        "--no-same-owner", "--no-overwrite-dir"},
                                                       {}, limits::kApiClientTimeout));
  fs::remove(file, ec);
  if (r.exit_code != 0)
    return InvalidArgument("uploads: " + upload + " is not a tar archive: " + r.err);
  return Status::Ok();
}

}  // namespace herd::server::detail
