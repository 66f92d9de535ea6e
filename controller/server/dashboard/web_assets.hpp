// The dashboard's pages (controller/server/dashboard/web), built into the server binary by
// embed_web.cmake: the server needs no files beside it and the pages nothing from the internet.
#pragma once

#include <string_view>

namespace herd::server::dashboard {

struct WebAsset {
  std::string_view path;          // "index.html", "app.js", ...
  std::string_view content_type;  // with charset for text
  std::string_view body;
  std::string_view sha256;  // of body: the ETag
};

// The asset at `path` (relative to web/), nullptr when there is none.
const WebAsset* FindWebAsset(std::string_view path);

}  // namespace herd::server::dashboard
