// Autostop of a cloud cluster from its own head: the head calls the cloud's API itself (for aws:
// EC2 StopInstances, or TerminateInstances with --down) with the cluster's scoped key, through
// `curl --aws-sigv4` (libcurl's SigV4 signer, as the controller's EC2 client uses it). The key
// reaches the head inside SetAutostop (TLS) and is kept only in a 0600 curl config file in the
// head's state dir; the command line names that file, never the secret.
#pragma once

#include <string>

#include "herd/v1/client.pb.h"
#include "shared/common/status.hpp"

namespace herd::agent {

// The file the key is kept in, in the head's state dir.
std::string CloudCredentialsPath(const std::string& state_dir);

// Every field is checked against what the cloud accepts (provider "aws", a region name, an
// http(s) endpoint without quotes or spaces, i-<hex> instance ids, a key id and secret of AWS's
// alphabet), so nothing of it can change the command line it goes into. InvalidArgument names the
// field.
Status ValidateCloudAutostop(const herd::v1::CloudAutostop& cloud);

// Writes the key as a curl config (`user = "ID:SECRET"`), mode 0600, atomically.
Status WriteCloudCredentials(const std::string& path, const herd::v1::CloudAutostop& cloud);

// The setting as it may be saved: everything but the secret.
herd::v1::SetAutostop WithoutSecret(const herd::v1::SetAutostop& setting);

// The shell command that stops (down: terminates) the instances: one signed EC2 Query API call,
// retried on any error (limits::kCloudAutostopRetries), its reply appended to the autostop log.
// The cloud setting must have passed ValidateCloudAutostop.
std::string CloudStopCommand(const herd::v1::CloudAutostop& cloud, bool down,
                             const std::string& credentials_path);

}  // namespace herd::agent
