// A new private file beside another, for writers that fill it and then move it into place.
#pragma once

#include <string>

#include "shared/common/status.hpp"

namespace herd {

struct TempFile {
  int fd = -1;       // open for writing, close-on-exec; the caller closes it
  std::string path;  // "<dir of path>/.<name of path>.XXXXXX", made by mkostemp (mode 0600)
};

// The descriptor is close-on-exec: the controller writes files (the agent binary among them) while
// its other threads start ssh and local scripts, and a child that inherited the write descriptor
// would hold the file open for writing for its whole life, so that executing the finished file
// fails with ETXTBSY ("Text file busy") until that child ends.
Result<TempFile> CreateTempFileBeside(const std::string& path);

}  // namespace herd
