"""A small EC2-shaped test server: the Query API calls herd's aws provider makes, answered with the
XML shapes of the EC2 API reference (errors as <Response><Errors><Error>..), every request's SigV4
signature verified with its own implementation (hmac/hashlib, independent of libcurl's), and
instances that are network-namespace hosts made by herd_test_hosts (sshd, user root).

RunInstances hands out free hosts of the pool and authorises the imported key pair's public key
on them; StopInstances ends every process of the host; StartInstances brings sshd back;
TerminateInstances ends the processes, wipes the home and frees the host.

    fake_ec2.py CONFIG.json   (see AwsTest in aws_test.py for the fields)

Beside the EC2 API (POST /): GET /checkip (the caller's address, as checkip.amazonaws.com),
GET /_fake/state (instances, groups, key pairs as JSON), POST /_fake/config (JSON merged into
the config: e.g. {"no_capacity_zones": [...]}), POST /_fake/preempt ({"id": INSTANCE}: EC2
takes the instance back, as it does a spot instance: its host stops, it is terminated) and POST
/_fake/interrupt ({"id": INSTANCE, "lead_s": S}: a spot instance's interruption is scheduled S
seconds ahead, AWS's two minutes by default; its notice is on the instance metadata at once and
the instance is preempted at that time) for the test.

Instance metadata (IMDSv2), as a node reaches it (on "node_bind"): PUT /latest/api/token with
X-aws-ec2-metadata-token-ttl-seconds (1..21600) gives a token; GET
/latest/meta-data/spot/instance-action with it (X-aws-ec2-metadata-token; 401 without a valid
one) answers 404, or {"action": "terminate", "time": ISO8601} once an interruption is scheduled.
Both are per instance: the fake knows which instance asks by the node's source address on the
hosts' bridge (the instance's host address), as EC2's link-local service knows its instance.

Regions: "region" with its "zones", and optionally "regions" ({REGION: [ZONE, ...]}) for more.
A request's region is the one its signature is scoped to (one endpoint serves them all, as
HERD_AWS_ENDPOINT points every region at it); key pairs, security groups and the instances a
request sees are that region's, as in EC2. The state's "keys" and "groups" are "region"'s; its
"regions" holds every region's. Injected errors, for failover: "no_capacity_zones" and
"no_capacity_regions" (InsufficientInstanceCapacity), "quota_regions" (VcpuLimitExceeded). Standard library only, and herd_env's
cgroup helper: a stopped or terminated host's agent cgroups are removed as a real machine's go.

IAM (requests signed for us-east-1/iam on the same endpoint, Version 2010-05-08): CreateUser,
PutUserPolicy, CreateAccessKey, ListAccessKeys, DeleteAccessKey, DeleteUserPolicy, DeleteUser.
Only the configured "credentials" may call IAM. A key made by CreateAccessKey signs EC2 calls as
its user, and the user's policies are ENFORCED: an action is allowed only by an Allow statement
whose Action, Resource (the instances' ARNs, else "*") and StringEquals (or StringLike)
conditions on ec2:ResourceTag/KEY all match every instance named; otherwise UnauthorizedOperation (403) and
"denied:<Action>" in the calls. "transition_s" (default 0: each DescribeInstances moves a
transition on) makes stopping/shutting-down/pending last that many seconds, so a test can see
them. "node_bind" (with "node_port_file") serves the same fake on a second address, one the
namespace hosts reach (a head's own EC2 calls).

S3 (s3_front(), or "s3_bind" with "s3_port_file", "s3_upstream" and "s3_upstream_key" [id,
secret]): path-style S3 requests signed for us-east-1/s3 (x-amz-content-sha256: the body's hash
or UNSIGNED-PAYLOAD) by the configured credentials, which may do anything, or by a key made by
CreateAccessKey, whose user's policies are ENFORCED per request: each request is mapped to the
S3 actions and resources AWS would check (s3_request_actions: GetObject on
arn:aws:s3:::BUCKET/KEY, ListBucket on arn:aws:s3:::BUCKET, ...) with its condition keys
(s3_request_context: s3:prefix of a listing; StringEquals and StringLike conditions are
evaluated, a key the request lacks fails its condition); a denied one is AccessDenied
(403) and "denied:<action>:<arn>" in the calls. Allowed requests go on to the upstream S3 server
(s3rver), signed again with its own key."""

import base64
import datetime
import fnmatch
import hashlib
import hmac
import http.client
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
import urllib.parse
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from xml.sax.saxutils import escape

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from herd_env import AGENT_CGROUP_SCOPE_FILE, remove_cgroups  # noqa: E402

NS = "http://ec2.amazonaws.com/doc/2016-11-15/"
IAM_NS = "https://iam.amazonaws.com/doc/2010-05-08/"
MAX_SKEW = datetime.timedelta(minutes=15)


# ---- SigV4, written from AWS's description (not libcurl's) ------------------------------------

def _hmac(key, msg):
    return hmac.new(key, msg.encode(), hashlib.sha256).digest()


def _uri_encode(s, keep_slash=False):
    return urllib.parse.quote(s, safe="-_.~" + ("/" if keep_slash else ""))


def canonical_request(method, path, query, headers, signed, payload, payload_hash=None):
    """headers: list of (name, value) as received; signed: lower-case names; payload_hash: S3's
    x-amz-content-sha256 (the body's hash or UNSIGNED-PAYLOAD), else the body is hashed."""
    pairs = urllib.parse.parse_qsl(query, keep_blank_values=True)
    cq = "&".join(f"{k}={v}" for k, v in sorted((_uri_encode(k), _uri_encode(v))
                                                  for k, v in pairs))
    values = {}
    for name, value in headers:
        values.setdefault(name.lower(), []).append(" ".join(value.strip().split()))
    lines = "".join(f"{h}:{','.join(values.get(h, []))}\n" for h in signed)
    return "\n".join([method, _uri_encode(path or "/", keep_slash=True), cq, lines,
                      ";".join(signed), payload_hash or hashlib.sha256(payload).hexdigest()])


def signature(secret, amz_date, region, service, creq):
    scope = f"{amz_date[:8]}/{region}/{service}/aws4_request"
    sts = "\n".join(["AWS4-HMAC-SHA256", amz_date, scope,
                     hashlib.sha256(creq.encode()).hexdigest()])
    k = _hmac(("AWS4" + secret).encode(), amz_date[:8])
    for part in (region, service, "aws4_request"):
        k = _hmac(k, part)
    return hmac.new(k, sts.encode(), hashlib.sha256).hexdigest()


class AuthError(Exception):
    def __init__(self, status, code, message):
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


def verify(method, path, query, headers, payload, credentials, region, service="ec2",
           now=None, payload_hash=None):
    """Raises AuthError unless the request is signed by a known key for region/service."""
    auth = [v for k, v in headers if k.lower() == "authorization"]
    if not auth:
        raise AuthError(401, "MissingAuthenticationToken", "Request is missing Authentication Token")
    algo, _, rest = auth[0].partition(" ")
    fields = dict(p.strip().split("=", 1) for p in rest.split(",") if "=" in p)
    if algo != "AWS4-HMAC-SHA256" or not {"Credential", "SignedHeaders", "Signature"} <= set(fields):
        raise AuthError(400, "IncompleteSignature", f"Authorization header is malformed: {auth[0]}")
    key_id, date, scope_region, scope_service, terminator = (fields["Credential"].split("/") +
                                                             [""] * 5)[:5]
    if key_id not in credentials:
        raise AuthError(401, "AuthFailure",
                        "AWS was not able to validate the provided access credentials")
    dates = {v for k, v in headers if k.lower() == "x-amz-date"}
    if len(dates) != 1:
        raise AuthError(400, "IncompleteSignature", "need exactly one X-Amz-Date value")
    amz_date = dates.pop()
    if (date != amz_date[:8] or scope_region != region or scope_service != service
            or terminator != "aws4_request"):
        raise AuthError(403, "SignatureDoesNotMatch",
                        f"Credential should be scoped to a valid region ('{region}'), service "
                        f"('{service}') and date ('{amz_date[:8]}')")
    signed = fields["SignedHeaders"].split(";")
    if "host" not in signed or "x-amz-date" not in signed or signed != sorted(signed):
        raise AuthError(403, "SignatureDoesNotMatch", "host and x-amz-date must be signed")
    secret, token = credentials[key_id]
    if token:
        sent = [v for k, v in headers if k.lower() == "x-amz-security-token"]
        if sent != [token] or "x-amz-security-token" not in signed:
            raise AuthError(401, "AuthFailure", "The security token included in the request is "
                                                "invalid")
    want = signature(secret, amz_date, region, service,
                     canonical_request(method, path, query, headers, signed, payload,
                                       payload_hash))
    if not hmac.compare_digest(want, fields["Signature"]):
        raise AuthError(403, "SignatureDoesNotMatch",
                        "The request signature we calculated does not match the signature you "
                        "provided. Check your AWS Secret Access Key and signing method.")
    if now is not None:
        when = datetime.datetime.strptime(amz_date, "%Y%m%dT%H%M%SZ").replace(
            tzinfo=datetime.timezone.utc)
        if abs(now - when) > MAX_SKEW:
            raise AuthError(400, "RequestExpired", f"Request has expired. Timestamp {amz_date}")


# ---- The EC2 model ------------------------------------------------------------------------------

class Ec2Error(Exception):
    def __init__(self, code, message, status=400):
        super().__init__(message)
        self.code, self.message, self.status = code, message, status


INSTANCE_TYPES = {  # name: (vcpus, memory MiB, gpu, count)
    "m6i.large": (2, 8192, None, 0), "m6i.xlarge": (4, 16384, None, 0),
    "m6i.2xlarge": (8, 32768, None, 0), "c6i.large": (2, 4096, None, 0),
    "c6i.xlarge": (4, 8192, None, 0), "g6.xlarge": (4, 16384, "L4", 1),
    "g5.xlarge": (4, 16384, "A10G", 1), "p4d.24xlarge": (96, 1179648, "A100", 8),
}


def _items(params, prefix):
    """Values of prefix.1, prefix.2, ... in order."""
    out, i = [], 1
    while f"{prefix}.{i}" in params:
        out.append(params[f"{prefix}.{i}"])
        i += 1
    return out


def _filters(params):
    out, i = [], 1
    while f"Filter.{i}.Name" in params:
        out.append((params[f"Filter.{i}.Name"], _items(params, f"Filter.{i}.Value")))
        i += 1
    return out


def _tag_specs(params, resource_type):
    tags, i = {}, 1
    while f"TagSpecification.{i}.ResourceType" in params:
        if params[f"TagSpecification.{i}.ResourceType"] == resource_type:
            j = 1
            while f"TagSpecification.{i}.Tag.{j}.Key" in params:
                tags[params[f"TagSpecification.{i}.Tag.{j}.Key"]] = params.get(
                    f"TagSpecification.{i}.Tag.{j}.Value", "")
                j += 1
        i += 1
    return tags


def _tag_xml(tags):
    return "<tagSet>" + "".join(f"<item><key>{escape(k)}</key><value>{escape(v)}</value></item>"
                                for k, v in sorted(tags.items())) + "</tagSet>"


class Ec2:
    def __init__(self, config):
        self.config = config
        self.lock = threading.RLock()
        self.instances = {}  # id -> dict (with its region)
        self.stores = {}     # region -> {"groups": id -> dict(name, rules, tags),
        #                                 "keys": name -> dict(material, tags)}
        self.region = config["region"]  # the current request's
        self.calls = []      # action names, in order
        self.free = list(range(len(config["hosts"])))
        self.users = {}      # IAM user name -> {"tags", "policies": name -> doc, "keys": [id]}
        self.iam_keys = {}   # access key id -> {"user", "secret"}
        self.imds_tokens = {}  # IMDSv2 token -> (the node address it was given to, expiry)

    def _store(self, region=None):
        return self.stores.setdefault(region or self.region, {"groups": {}, "keys": {}})

    @property
    def groups(self):
        return self._store()["groups"]

    @property
    def keys(self):
        return self._store()["keys"]

    def regions(self):
        return {self.config["region"], *self.config.get("regions", {})}

    def _zones(self):
        if self.region == self.config["region"]:
            return self.config["zones"]
        return self.config.get("regions", {}).get(self.region, [])

    def _host_cmd(self, *args):
        p = subprocess.run([self.config["test_hosts"], *args, ], capture_output=True, text=True,
                           timeout=120)
        if p.returncode != 0:
            raise Ec2Error("InternalError", f"test host command failed: {p.stderr.strip()}", 500)

    def _stop_host(self, index):
        # A machine that stops takes its cgroups with it: those its agent made (the agent records
        # where) go once its processes have ended, or they would outlive the test on this machine.
        scope_file = os.path.join(self.config["hosts"][index]["dir"], "home",
                                  AGENT_CGROUP_SCOPE_FILE)
        try:
            with open(scope_file) as f:
                scope = f.read().strip()
        except OSError:
            scope = ""
        self._host_cmd("stop-host", self.config["hosts_name"], self.config["hosts_state"],
                       str(index))
        if scope.startswith("/sys/fs/cgroup/"):
            try:
                remove_cgroups([scope])
            except OSError as e:  # a process of the host still in it: the test will say so
                print(f"fake_ec2: cannot remove {scope}: {e}", file=sys.stderr)

    def _start_hosts(self):
        self._host_cmd("start", self.config["hosts_name"], self.config["hosts_state"])

    def _advance(self, inst):
        """Each look moves a transition on, as EC2's asynchronous state changes do."""
        nxt = {"pending": "running", "stopping": "stopped", "shutting-down": "terminated"}
        wait = self.config.get("transition_s", 0)
        if wait and time.monotonic() - inst.get("since", 0) < wait:
            return
        if inst["state"] in nxt:
            inst["state"] = nxt[inst["state"]]
            if inst["state"] == "terminated":
                self.free.append(inst["host"])
                self.free.sort()

    def _instance_xml(self, i):
        host = self.config["hosts"][i["host"]]
        public = f"<ipAddress>{host['ip']}</ipAddress>" if i["state"] == "running" else ""
        codes = {"pending": 0, "running": 16, "shutting-down": 32, "terminated": 48,
                 "stopping": 64, "stopped": 80}
        spot = "<instanceLifecycle>spot</instanceLifecycle>" if i["spot"] else ""
        return (f"<item><instanceId>{i['id']}</instanceId><imageId>{i['image']}</imageId>"
                f"<instanceState><code>{codes[i['state']]}</code><name>{i['state']}</name>"
                f"</instanceState><privateIpAddress>{host['ip']}</privateIpAddress>{public}"
                f"<keyName>{escape(i['key'])}</keyName><instanceType>{i['type']}</instanceType>"
                f"<placement><availabilityZone>{i['zone']}</availabilityZone></placement>"
                f"<groupSet><item><groupId>{i['group']}</groupId></item></groupSet>{spot}"
                f"{_tag_xml(i['tags'])}</item>")

    def _state_change(self, ids, new_state):
        out = ""
        for iid in ids:
            i = self.instances[iid]
            prev = i["state"]
            i["state"] = new_state(i)
            i["since"] = time.monotonic()
            out += (f"<item><instanceId>{iid}</instanceId><currentState><name>{i['state']}"
                    f"</name></currentState><previousState><name>{prev}</name></previousState>"
                    f"</item>")
        return f"<instancesSet>{out}</instancesSet>"

    def _known(self, ids):
        for iid in ids:
            if iid not in self.instances or self.instances[iid]["region"] != self.region:
                raise Ec2Error("InvalidInstanceID.NotFound",
                               f"The instance ID '{iid}' does not exist")
        return ids

    def call(self, action, p, region=None):
        with self.lock:
            self.region = region or self.config["region"]
            self.calls.append(action)
            handler = getattr(self, "do_" + action, None)
            if handler is None:
                raise Ec2Error("InvalidAction",
                               f"The action {action} is not valid for this web service.")
            return handler(p)

    def do_DescribeInstanceTypes(self, p):
        names = _items(p, "InstanceType")
        bad = [n for n in names if n not in INSTANCE_TYPES]
        if bad:
            raise Ec2Error("InvalidInstanceType",
                           f"The following supplied instance types do not exist: [{', '.join(bad)}]")
        out = ""
        for n in names or sorted(INSTANCE_TYPES):
            vcpus, mib, gpu, count = INSTANCE_TYPES[n]
            g = (f"<gpuInfo><gpus><item><name>{gpu}</name><manufacturer>NVIDIA</manufacturer>"
                 f"<count>{count}</count></item></gpus></gpuInfo>") if gpu else ""
            out += (f"<item><instanceType>{n}</instanceType><vCpuInfo><defaultVCpus>{vcpus}"
                    f"</defaultVCpus></vCpuInfo><memoryInfo><sizeInMiB>{mib}</sizeInMiB>"
                    f"</memoryInfo>{g}</item>")
        return f"<instanceTypeSet>{out}</instanceTypeSet>"

    def do_DescribeAvailabilityZones(self, p):
        return "<availabilityZoneInfo>" + "".join(
            f"<item><zoneName>{z}</zoneName><zoneState>available</zoneState>"
            f"<regionName>{self.region}</regionName></item>"
            for z in self._zones()) + "</availabilityZoneInfo>"

    def do_DescribeImages(self, p):
        owners = _items(p, "Owner")
        images = self.config["images"]
        for name, values in _filters(p):
            if name == "name":
                images = [i for i in images if any(fnmatch.fnmatchcase(i["name"], v)
                                                   for v in values)]
            elif name == "state":
                images = [i for i in images if "available" in values]
        images = [i for i in images if not owners or i["owner"] in owners]
        return "<imagesSet>" + "".join(
            f"<item><imageId>{i['id']}</imageId><imageOwnerId>{i['owner']}</imageOwnerId>"
            f"<name>{escape(i['name'])}</name><creationDate>{i['date']}</creationDate>"
            f"<imageState>available</imageState></item>" for i in images) + "</imagesSet>"

    def do_ImportKeyPair(self, p):
        name = p.get("KeyName", "")
        if name in self.keys:
            raise Ec2Error("InvalidKeyPair.Duplicate", f"The keypair '{name}' already exists.")
        try:
            material = base64.b64decode(p.get("PublicKeyMaterial", ""), validate=True).decode()
        except Exception:
            raise Ec2Error("InvalidKey.Format", "Key is not in valid OpenSSH public key format")
        if not material.startswith(("ssh-", "ecdsa-")):
            raise Ec2Error("InvalidKey.Format", "Key is not in valid OpenSSH public key format")
        self.keys[name] = {"material": material.strip(), "tags": _tag_specs(p, "key-pair")}
        return (f"<keyName>{escape(name)}</keyName><keyFingerprint>"
                f"{hashlib.md5(material.encode()).hexdigest()}</keyFingerprint>"
                f"<keyPairId>key-{uuid.uuid4().hex[:17]}</keyPairId>")

    def do_DeleteKeyPair(self, p):
        self.keys.pop(p.get("KeyName", ""), None)  # EC2 answers true for a missing key, too
        return "<return>true</return>"

    def do_DescribeKeyPairs(self, p):
        names = sorted(self.keys)
        for name, values in _filters(p):
            if name == "key-name":
                names = [n for n in names if n in values]
        return "<keySet>" + "".join(f"<item><keyName>{escape(n)}</keyName></item>"
                                    for n in names) + "</keySet>"

    def do_CreateSecurityGroup(self, p):
        name = p.get("GroupName", "")
        if not name or not p.get("GroupDescription"):
            raise Ec2Error("MissingParameter", "GroupName and GroupDescription are required")
        if any(g["name"] == name for g in self.groups.values()):
            raise Ec2Error("InvalidGroup.Duplicate",
                           f"The security group '{name}' already exists for VPC 'vpc-fake'")
        gid = "sg-" + uuid.uuid4().hex[:17]
        self.groups[gid] = {"name": name, "rules": [], "tags": _tag_specs(p, "security-group")}
        return f"<return>true</return><groupId>{gid}</groupId>"

    def _group(self, gid):
        if gid not in self.groups:
            raise Ec2Error("InvalidGroup.NotFound", f"The security group '{gid}' does not exist")
        return self.groups[gid]

    def do_AuthorizeSecurityGroupIngress(self, p):
        g = self._group(p.get("GroupId", ""))
        i, rules = 1, []
        while f"IpPermissions.{i}.IpProtocol" in p:
            pre = f"IpPermissions.{i}"
            base = (p[f"{pre}.IpProtocol"], p.get(f"{pre}.FromPort"), p.get(f"{pre}.ToPort"))
            j = 1
            while f"{pre}.IpRanges.{j}.CidrIp" in p:
                rules.append(base + ("cidr", p[f"{pre}.IpRanges.{j}.CidrIp"]))
                j += 1
            j = 1
            while f"{pre}.Groups.{j}.GroupId" in p:
                self._group(p[f"{pre}.Groups.{j}.GroupId"])
                rules.append(base + ("group", p[f"{pre}.Groups.{j}.GroupId"]))
                j += 1
            i += 1
        if not rules:
            raise Ec2Error("MissingParameter", "No IpPermissions given")
        for r in rules:
            if list(r) in g["rules"]:
                raise Ec2Error("InvalidPermission.Duplicate",
                               f"the specified rule \"peer: {r[4]}, {r[0]}\" already exists")
        g["rules"] += [list(r) for r in rules]
        return "<return>true</return>"

    def do_DeleteSecurityGroup(self, p):
        gid = p.get("GroupId", "")
        self._group(gid)
        if any(i["group"] == gid and i["state"] != "terminated" for i in self.instances.values()):
            raise Ec2Error("DependencyViolation", f"resource {gid} has a dependent object")
        del self.groups[gid]
        return "<return>true</return>"

    def do_DescribeSecurityGroups(self, p):
        gids = sorted(self.groups)
        for name, values in _filters(p):
            if name == "group-name":
                gids = [g for g in gids if self.groups[g]["name"] in values]
        return "<securityGroupInfo>" + "".join(
            f"<item><groupId>{g}</groupId><groupName>{escape(self.groups[g]['name'])}</groupName>"
            f"</item>" for g in gids) + "</securityGroupInfo>"

    def do_RunInstances(self, p):
        try:
            lo, hi = int(p.get("MinCount", "")), int(p.get("MaxCount", ""))
        except ValueError:
            raise Ec2Error("InvalidParameterValue", "MinCount and MaxCount must be integers")
        if lo < 1 or hi < lo:
            raise Ec2Error("InvalidParameterValue", f"Invalid MinCount {lo} / MaxCount {hi}")
        image, itype = p.get("ImageId", ""), p.get("InstanceType", "")
        if not any(i["id"] == image for i in self.config["images"]):
            raise Ec2Error("InvalidAMIID.NotFound", f"The image id '[{image}]' does not exist")
        if itype not in INSTANCE_TYPES:
            raise Ec2Error("InvalidParameterValue", f"Invalid value '{itype}' for InstanceType.")
        key = p.get("KeyName", "")
        if key not in self.keys:
            raise Ec2Error("InvalidKeyPair.NotFound", f"The key pair '{key}' does not exist")
        groups = _items(p, "SecurityGroupId")
        for g in groups:
            self._group(g)
        zones = self._zones()
        zone = p.get("Placement.AvailabilityZone") or zones[0]
        if zone not in zones:
            raise Ec2Error("InvalidParameterValue", f"Invalid availability zone: [{zone}]")
        if self.region in self.config.get("quota_regions", []):
            raise Ec2Error("VcpuLimitExceeded",
                           f"You have requested more vCPU capacity than your current vCPU limit "
                           f"of 0 allows for the instance bucket that the specified instance type "
                           f"belongs to in {self.region}.")
        if (zone in self.config.get("no_capacity_zones", [])
                or self.region in self.config.get("no_capacity_regions", [])):
            raise Ec2Error("InsufficientInstanceCapacity",
                           f"We currently do not have sufficient {itype} capacity in the "
                           f"Availability Zone you requested ({zone}). Our system will be working "
                           f"on provisioning additional capacity. You can currently get {itype} "
                           f"capacity by not specifying an Availability Zone in your request or "
                           f"choosing {', '.join(z for z in zones if z != zone)}.",
                           500)
        if len(self.free) < lo:
            raise Ec2Error("InstanceLimitExceeded",
                           f"You have requested more instances ({lo}) than your current instance "
                           f"limit of {len(self.free)} allows for the specified instance type.")
        spot = p.get("InstanceMarketOptions.MarketType") == "spot"
        tags = _tag_specs(p, "instance")
        made = []
        for _ in range(min(hi, len(self.free))):
            host = self.free.pop(0)
            node_dir = self.config["hosts"][host]["dir"]
            # A fresh machine: an empty home and the key pair as root's only key.
            home = os.path.join(node_dir, "home")
            for entry in os.listdir(home):
                path = os.path.join(home, entry)
                shutil.rmtree(path) if os.path.isdir(path) and not os.path.islink(path) \
                    else os.remove(path)
            with open(os.path.join(node_dir, "authorized_keys"), "w") as f:
                f.write(self.keys[key]["material"] + "\n")
            iid = "i-" + uuid.uuid4().hex[:17]
            self.instances[iid] = {"id": iid, "region": self.region, "host": host,
                                   "state": "pending", "type": itype,
                                   "image": image, "key": key, "zone": zone,
                                   "group": groups[0] if groups else "", "spot": spot,
                                   "tags": dict(tags)}
            made.append(iid)
        self._start_hosts()
        return (f"<reservationId>r-{uuid.uuid4().hex[:17]}</reservationId>"
                f"<ownerId>123456789012</ownerId><instancesSet>"
                + "".join(self._instance_xml(self.instances[i]) for i in made) + "</instancesSet>")

    def do_CreateTags(self, p):
        ids = self._known(_items(p, "ResourceId"))
        i = 1
        while f"Tag.{i}.Key" in p:
            for iid in ids:
                self.instances[iid]["tags"][p[f"Tag.{i}.Key"]] = p.get(f"Tag.{i}.Value", "")
            i += 1
        return "<return>true</return>"

    def do_DescribeInstances(self, p):
        ids = self._known(_items(p, "InstanceId")) or sorted(
            i for i, v in self.instances.items() if v["region"] == self.region)
        found = []
        for iid in ids:
            i = self.instances[iid]
            self._advance(i)
            ok = True
            for name, values in _filters(p):
                if name.startswith("tag:"):
                    ok = ok and i["tags"].get(name[4:]) in values
                elif name == "instance-state-name":
                    ok = ok and i["state"] in values
                elif name == "instance-id":
                    ok = ok and iid in values
                else:
                    raise Ec2Error("InvalidParameterValue",
                                   f"The filter '{name}' is invalid")
            if ok:
                found.append(i)
        return ("<reservationSet>" + "".join(
            f"<item><reservationId>r-{i['id'][2:]}</reservationId><instancesSet>"
            f"{self._instance_xml(i)}</instancesSet></item>" for i in found) + "</reservationSet>")

    def do_StopInstances(self, p):
        ids = self._known(_items(p, "InstanceId"))
        for iid in ids:
            i = self.instances[iid]
            if i["spot"]:
                raise Ec2Error("UnsupportedOperation",
                               f"You can't stop the Spot Instance '{iid}' because it is "
                               f"associated with a one-time Spot Instance request.")
            if i["state"] not in ("running", "stopping", "stopped", "pending"):
                raise Ec2Error("IncorrectInstanceState",
                               f"The instance '{iid}' is not in a state from which it can be "
                               f"stopped.")
        for iid in ids:
            self._stop_host(self.instances[iid]["host"])
        return self._state_change(
            ids, lambda i: "stopped" if i["state"] == "stopped" else "stopping")

    def do_StartInstances(self, p):
        ids = self._known(_items(p, "InstanceId"))
        for iid in ids:
            if self.instances[iid]["state"] not in ("stopped", "running", "pending"):
                raise Ec2Error("IncorrectInstanceState",
                               f"The instance '{iid}' is not in a state from which it can be "
                               f"started.")
        self._start_hosts()
        return self._state_change(
            ids, lambda i: "running" if i["state"] == "running" else "pending")

    def do_TerminateInstances(self, p):
        ids = self._known(_items(p, "InstanceId"))
        for iid in ids:
            if self.instances[iid]["state"] not in ("terminated", "shutting-down"):
                self._stop_host(self.instances[iid]["host"])
        return self._state_change(
            ids, lambda i: i["state"] if i["state"] in ("terminated", "shutting-down")
            else "shutting-down")

    # ---- IAM, and the policies of its users' keys -------------------------------------------

    def credentials(self):
        with self.lock:
            creds = {k: (v["secret"], v.get("token", "")) for k, v in
                     self.config["credentials"].items()}
            creds.update({k: (v["secret"], "") for k, v in self.iam_keys.items()})
            return creds

    def _user(self, p):
        name = p.get("UserName", "")
        if name not in self.users:
            raise Ec2Error("NoSuchEntity", f"The user with name {name} cannot be found.", 404)
        return name, self.users[name]

    def iam_call(self, action, p, key_id):
        with self.lock:
            if key_id in self.iam_keys:
                self.calls.append("denied:iam:" + action)
                raise Ec2Error("AccessDenied", f"User: arn:aws:iam::123456789012:user/"
                               f"{self.iam_keys[key_id]['user']} is not authorized to perform: "
                               f"iam:{action}", 403)
            self.calls.append("iam:" + action)
            handler = getattr(self, "iam_" + action, None)
            if handler is None:
                raise Ec2Error("InvalidAction", f"Could not find operation {action}")
            return handler(p)

    def iam_CreateUser(self, p):
        name = p.get("UserName", "")
        if not re.fullmatch(r"[\w+=,.@-]{1,64}", name):
            raise Ec2Error("ValidationError", f"Invalid user name {name!r}")
        if name in self.users:
            raise Ec2Error("EntityAlreadyExists", f"User with name {name} already exists.", 409)
        tags, i = {}, 1
        while f"Tags.member.{i}.Key" in p:
            tags[p[f"Tags.member.{i}.Key"]] = p.get(f"Tags.member.{i}.Value", "")
            i += 1
        self.users[name] = {"tags": tags, "policies": {}, "keys": []}
        return f"<User><UserName>{escape(name)}</UserName></User>"

    def iam_PutUserPolicy(self, p):
        _, u = self._user(p)
        try:
            doc = json.loads(p.get("PolicyDocument", ""))
        except ValueError:
            raise Ec2Error("MalformedPolicyDocument", "Syntax errors in policy.")
        u["policies"][p.get("PolicyName", "")] = doc
        return ""

    def iam_DeleteUserPolicy(self, p):
        _, u = self._user(p)
        if u["policies"].pop(p.get("PolicyName", ""), None) is None:
            raise Ec2Error("NoSuchEntity", "The user policy cannot be found.", 404)
        return ""

    def iam_CreateAccessKey(self, p):
        name, u = self._user(p)
        if len(u["keys"]) >= 2:
            raise Ec2Error("LimitExceeded", "Cannot exceed quota for AccessKeysPerUser: 2", 409)
        key_id = "AKIA" + uuid.uuid4().hex[:16].upper()
        secret = base64.b64encode(os.urandom(30)).decode()
        u["keys"].append(key_id)
        self.iam_keys[key_id] = {"user": name, "secret": secret}
        return (f"<AccessKey><UserName>{escape(name)}</UserName><AccessKeyId>{key_id}"
                f"</AccessKeyId><Status>Active</Status><SecretAccessKey>{secret}"
                f"</SecretAccessKey></AccessKey>")

    def iam_ListAccessKeys(self, p):
        name, u = self._user(p)
        return ("<AccessKeyMetadata>" + "".join(
            f"<member><UserName>{escape(name)}</UserName><AccessKeyId>{k}</AccessKeyId>"
            f"<Status>Active</Status></member>" for k in u["keys"]) + "</AccessKeyMetadata>")

    def iam_DeleteAccessKey(self, p):
        _, u = self._user(p)
        key_id = p.get("AccessKeyId", "")
        if key_id not in u["keys"]:
            raise Ec2Error("NoSuchEntity", f"The Access Key with id {key_id} cannot be found.",
                           404)
        u["keys"].remove(key_id)
        del self.iam_keys[key_id]
        return ""

    def iam_DeleteUser(self, p):
        name, u = self._user(p)
        if u["keys"] or u["policies"]:
            raise Ec2Error("DeleteConflict", "Cannot delete entity, must delete policies and "
                                             "access keys first.", 409)
        del self.users[name]
        return ""

    @staticmethod
    def _statement_allows(stmt, action, arn, context):
        """context: the request's condition keys (ec2:ResourceTag/KEY, s3:prefix) and values."""
        if stmt.get("Effect") != "Allow":
            return False
        actions = stmt.get("Action", [])
        actions = [actions] if isinstance(actions, str) else actions
        resources = stmt.get("Resource", [])
        resources = [resources] if isinstance(resources, str) else resources
        if not any(fnmatch.fnmatchcase(action, a) for a in actions):
            return False
        if not any(fnmatch.fnmatchcase(arn, r) for r in resources):
            return False
        for op, conds in stmt.get("Condition", {}).items():
            if op not in ("StringEquals", "StringLike"):
                return False  # an operator this fake does not know never allows
            for key, want in conds.items():
                # As IAM: a key the request does not have fails the condition; one of the values
                # must match; StringLike's * is any run of characters, ? any one.
                if key not in context:
                    return False
                wants = [want] if isinstance(want, str) else want
                if op == "StringEquals" and context[key] not in wants:
                    return False
                if op == "StringLike" and not any(_aws_like(context[key], w) for w in wants):
                    return False
        return True

    def _statements(self, user):
        return [s for doc in self.users[user]["policies"].values()
                for s in (doc.get("Statement", []) if isinstance(
                    doc.get("Statement", []), list) else [doc["Statement"]])]

    def authorize_s3(self, key_id, action, arn, context=None):
        """An S3 request signed by an IAM user's key: its policies must allow action on arn, with
        the request's condition keys in context (s3:prefix for a listing that gives one)."""
        with self.lock:
            if key_id not in self.iam_keys:
                return  # the account's own credentials may do anything
            user = self.iam_keys[key_id]["user"]
            if not any(self._statement_allows(s, action, arn, context or {})
                       for s in self._statements(user)):
                self.calls.append(f"denied:{action}:{arn}")
                raise Ec2Error("AccessDenied", f"User: arn:aws:iam::123456789012:user/{user} is "
                                               f"not authorized to perform: {action} on resource: "
                                               f"{arn}", 403)

    def authorize(self, key_id, action, p, region):
        """EC2 calls signed by an IAM user's key: every resource must be allowed."""
        with self.lock:
            if key_id not in self.iam_keys:
                return  # the account's own credentials may do anything
            user = self.iam_keys[key_id]["user"]
            statements = self._statements(user)
            ids = _items(p, "InstanceId")
            resources = [(f"arn:aws:ec2:{region}:123456789012:instance/{i}",
                          self.instances[i]["tags"] if i in self.instances else {})
                         for i in ids] or [("*", {})]
            for arn, tags in resources:
                context = {"ec2:ResourceTag/" + k: v for k, v in tags.items()}
                if not any(self._statement_allows(s, "ec2:" + action, arn, context)
                           for s in statements):
                    self.calls.append("denied:" + action)
                    raise Ec2Error("UnauthorizedOperation",
                                   f"You are not authorized to perform this operation. User: "
                                   f"arn:aws:iam::123456789012:user/{user} is not authorized to "
                                   f"perform: ec2:{action} on resource: {arn} because no "
                                   f"identity-based policy allows the ec2:{action} action", 403)

    def preempt(self, iid):
        with self.lock:
            i = self.instances[iid]
            if i["state"] not in ("terminated", "shutting-down"):
                self._stop_host(i["host"])
                i["state"] = "shutting-down"
                i["preempted_unix"] = time.time()

    # ---- Instance metadata (IMDSv2), per instance: the node that asks is known by its address
    def imds_token(self, addr, ttl_header):
        try:
            ttl = int(ttl_header or "")
        except ValueError:
            ttl = 0
        if not 1 <= ttl <= 21600:
            raise Ec2Error("BadRequest", "X-aws-ec2-metadata-token-ttl-seconds: 1 to 21600", 400)
        token = base64.urlsafe_b64encode(os.urandom(24)).decode()
        with self.lock:
            self.imds_tokens[token] = (addr, time.monotonic() + ttl)
            self.calls.append("imds:token")
        return token

    def instance_action(self, addr, token):
        """(status, body) of GET /latest/meta-data/spot/instance-action from addr."""
        with self.lock:
            self.calls.append("imds:instance-action")
            owner, until = self.imds_tokens.get(token or "", ("", 0))
            if owner != addr or time.monotonic() > until:
                return 401, ""
            for i in self.instances.values():
                if (self.config["hosts"][i["host"]]["ip"] == addr and i.get("interruption")
                        and i["state"] not in ("terminated", "shutting-down")):
                    return 200, json.dumps(i["interruption"])
            return 404, "Not Found"

    def schedule_interruption(self, iid, lead_s):
        """EC2 takes a spot instance back lead_s from now (AWS: two minutes), posting the notice
        on its metadata at once; at that time the instance really goes (preempt)."""
        with self.lock:
            i = self.instances.get(iid)
            if i is None or not i["spot"] or i["state"] != "running":
                raise Ec2Error("IncorrectInstanceState", f"{iid} is not a running spot instance")
            at = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=lead_s)
            i["interruption"] = {"action": "terminate", "time": at.strftime("%Y-%m-%dT%H:%M:%SZ")}
            self.calls.append("interrupt:" + iid)
        timer = threading.Timer(lead_s, self.preempt, args=(iid,))
        timer.daemon = True
        timer.start()
        return i["interruption"]

    def snapshot(self):
        with self.lock:
            home = self._store(self.config["region"])
            return {"instances": {k: {**{x: v[x] for x in ("state", "type", "zone", "tags",
                                                           "spot", "key", "group", "region",
                                                           "host")},
                                      "interruption": v.get("interruption"),
                                      "preempted_unix": v.get("preempted_unix")}
                                  for k, v in self.instances.items()},
                    "groups": home["groups"], "keys": home["keys"], "calls": self.calls,
                    "regions": {r: self._store(r) for r in sorted(self.regions())},
                    "free_hosts": self.free,
                    "iam_users": {n: {"tags": u["tags"], "policies": u["policies"],
                                      "keys": list(u["keys"])} for n, u in self.users.items()}}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):  # keep the test's output readable
        pass

    def _send(self, status, body, ctype="text/xml;charset=UTF-8"):
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _error(self, status, code, message):
        self._send(status, f"<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Response><Errors><Error>"
                           f"<Code>{escape(code)}</Code><Message>{escape(message)}</Message>"
                           f"</Error></Errors><RequestID>{uuid.uuid4()}</RequestID></Response>")

    def do_GET(self):
        ec2 = self.server.ec2
        if self.path == "/checkip":
            return self._send(200, self.client_address[0] + "\n", "text/plain")
        if self.path == "/_fake/state":
            return self._send(200, json.dumps(ec2.snapshot()), "application/json")
        if self.path == "/latest/meta-data/spot/instance-action":
            status, body = ec2.instance_action(self.client_address[0],
                                               self.headers.get("X-aws-ec2-metadata-token"))
            return self._send(status, body, "application/json" if status == 200 else "text/plain")
        self._error(400, "InvalidAction", "GET is not served here")

    def do_PUT(self):
        ec2 = self.server.ec2
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        if self.path != "/latest/api/token":
            return self._send(404, "Not Found", "text/plain")
        try:
            token = ec2.imds_token(self.client_address[0],
                                   self.headers.get("X-aws-ec2-metadata-token-ttl-seconds"))
        except Ec2Error as e:
            return self._send(e.status, e.message, "text/plain")
        self._send(200, token, "text/plain")

    def do_POST(self):
        ec2 = self.server.ec2
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        if self.path == "/_fake/preempt":
            ec2.preempt(json.loads(body)["id"])
            return self._send(200, "{}", "application/json")
        if self.path == "/_fake/interrupt":
            req = json.loads(body)
            try:
                notice = ec2.schedule_interruption(req["id"], float(req.get("lead_s", 120)))
            except Ec2Error as e:
                return self._send(e.status, json.dumps({"error": e.message}), "application/json")
            return self._send(200, json.dumps(notice), "application/json")
        if self.path == "/_fake/config":
            with ec2.lock:
                ec2.config.update(json.loads(body))
            return self._send(200, "{}", "application/json")
        url = urllib.parse.urlsplit(self.path)
        # The region the request is signed for, when the fake serves it; else the home region
        # (verify then refuses the scope). A request signed for IAM goes to IAM (us-east-1).
        scoped = re.search(r"Credential=([^/,]*)/[^/,]*/([^/,]*)/([^/,]*)/",
                           self.headers.get("Authorization", ""))
        service = "iam" if scoped and scoped.group(3) == "iam" else "ec2"
        key_id = scoped.group(1) if scoped else ""
        with ec2.lock:
            region = scoped.group(2) if scoped and scoped.group(2) in ec2.regions() \
                else ec2.config["region"]
        if service == "iam":
            region = "us-east-1"
        try:
            verify("POST", url.path, url.query, list(self.headers.items()), body,
                   ec2.credentials(), region, service,
                   now=datetime.datetime.now(datetime.timezone.utc))
        except AuthError as e:
            with ec2.lock:
                ec2.calls.append("refused:" + e.code)
            return self._error(e.status, e.code, e.message)
        params = dict(urllib.parse.parse_qsl(body.decode(), keep_blank_values=True))
        if service == "iam":
            return self._iam(ec2, params, key_id)
        if params.get("Version") != "2016-11-15":
            return self._error(400, "InvalidParameterValue", "Version must be 2016-11-15")
        action = params.pop("Action", "")
        params.pop("Version")
        try:
            ec2.authorize(key_id, action, params, region)
            inner = ec2.call(action, params, region)
        except Ec2Error as e:
            return self._error(e.status, e.code, e.message)
        self._send(200, f"<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<{action}Response "
                        f"xmlns=\"{NS}\"><requestId>{uuid.uuid4()}</requestId>{inner}"
                        f"</{action}Response>")


    def _iam(self, ec2, params, key_id):
        if params.get("Version") != "2010-05-08":
            return self._error(400, "InvalidParameterValue", "Version must be 2010-05-08")
        action = params.pop("Action", "")
        params.pop("Version")
        try:
            inner = ec2.iam_call(action, params, key_id)
        except Ec2Error as e:
            return self._send(e.status, f"<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
                                        f"<ErrorResponse xmlns=\"{IAM_NS}\"><Error><Type>Sender"
                                        f"</Type><Code>{escape(e.code)}</Code><Message>"
                                        f"{escape(e.message)}</Message></Error><RequestId>"
                                        f"{uuid.uuid4()}</RequestId></ErrorResponse>")
        self._send(200, f"<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<{action}Response "
                        f"xmlns=\"{IAM_NS}\"><{action}Result>{inner}</{action}Result>"
                        f"<ResponseMetadata><RequestId>{uuid.uuid4()}</RequestId>"
                        f"</ResponseMetadata></{action}Response>")


# ---- S3 in front of a real S3-compatible server, with the IAM users' policies enforced ---------

def _aws_like(value, pattern):
    """IAM's StringLike: * matches any run of characters (none included), ? any one."""
    rx = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.fullmatch(rx, value, re.DOTALL) is not None


def s3_request_context(query):
    """The condition keys S3 gives a request: s3:prefix for a listing that names a prefix (an
    empty prefix= too); absent otherwise, as in AWS."""
    q = dict(urllib.parse.parse_qsl(query, keep_blank_values=True))
    return {"s3:prefix": q["prefix"]} if "prefix" in q else {}


def s3_request_actions(method, path, query, headers, body):
    """[(action, resource ARN)] a request needs, as S3 authorizes it: path style, path decoded."""
    bucket, _, key = path.lstrip("/").partition("/")
    q = dict(urllib.parse.parse_qsl(query, keep_blank_values=True))
    if not bucket:
        return [("s3:ListAllMyBuckets", "*")]
    b_arn = f"arn:aws:s3:::{bucket}"
    sub = next((k for k in ("location", "uploads", "versioning", "acl", "policy", "tagging",
                            "lifecycle", "cors") if k in q), "")
    if not key:
        if method in ("GET", "HEAD"):
            named = {"": "s3:ListBucket", "location": "s3:GetBucketLocation",
                     "uploads": "s3:ListBucketMultipartUploads"}
            return [(named.get(sub, "s3:GetBucket" + sub.capitalize()), b_arn)]
        if method == "PUT":
            return [("s3:PutBucket" + sub.capitalize() if sub else "s3:CreateBucket", b_arn)]
        if method == "DELETE":
            return [("s3:DeleteBucket" + sub.capitalize(), b_arn)]
        if method == "POST" and "delete" in q:
            keys = re.findall(r"<Key>(.*?)</Key>", body.decode(errors="replace"))
            return [("s3:DeleteObject", f"{b_arn}/{k}") for k in keys] or [("s3:DeleteObject",
                                                                            b_arn + "/")]
        return [("s3:Unknown", b_arn)]
    o_arn = f"{b_arn}/{key}"
    if method in ("GET", "HEAD"):
        return [("s3:ListMultipartUploadParts" if "uploadId" in q else "s3:GetObject", o_arn)]
    if method in ("PUT", "POST"):
        needs = [("s3:PutObject", o_arn)]
        source = dict((k.lower(), v) for k, v in headers).get("x-amz-copy-source")
        if source:
            src = urllib.parse.unquote(source.split("?")[0]).lstrip("/")
            needs.append(("s3:GetObject", f"arn:aws:s3:::{src}"))
        return needs
    if method == "DELETE":
        return [("s3:AbortMultipartUpload" if "uploadId" in q else "s3:DeleteObject", o_arn)]
    return [("s3:Unknown", o_arn)]


class S3Front(BaseHTTPRequestHandler):
    """S3 requests (path style, SigV4 for us-east-1/s3) checked against the fake's credentials and
    IAM keys, each action authorized by the key's user's policies (authorize_s3), then forwarded,
    signed again with the upstream's own key, to the upstream S3 server."""
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):
        pass

    def _s3_error(self, status, code, message):
        data = (f"<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>{escape(code)}</Code>"
                f"<Message>{escape(message)}</Message><RequestId>{uuid.uuid4()}</RequestId>"
                f"</Error>").encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def _body(self):
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            out = b""
            while True:
                size = int(self.rfile.readline().split(b";")[0], 16)
                chunk = self.rfile.read(size + 2)[:size]
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return out
                out += chunk
        return self.rfile.read(int(self.headers.get("Content-Length", "0")))

    def _handle(self):
        ec2 = self.server.ec2
        url = urllib.parse.urlsplit(self.path)
        path = urllib.parse.unquote(url.path)
        body = self._body()
        headers = list(self.headers.items())
        payload_hash = self.headers.get("x-amz-content-sha256", "")
        if payload_hash.startswith("STREAMING-"):
            return self._s3_error(501, "NotImplemented", "chunked signing is not served here")
        if payload_hash not in ("", "UNSIGNED-PAYLOAD") and \
                payload_hash != hashlib.sha256(body).hexdigest():
            return self._s3_error(400, "XAmzContentSHA256Mismatch", "body hash mismatch")
        scoped = re.search(r"Credential=([^/,]*)/", self.headers.get("Authorization", ""))
        key_id = scoped.group(1) if scoped else ""
        try:
            verify(self.command, path, url.query, headers, body, ec2.credentials(), "us-east-1",
                   "s3", now=datetime.datetime.now(datetime.timezone.utc),
                   payload_hash=payload_hash or None)
            context = s3_request_context(url.query)
            for action, arn in s3_request_actions(self.command, path, url.query, headers, body):
                ec2.authorize_s3(key_id, action, arn, context)
        except AuthError as e:
            with ec2.lock:
                ec2.calls.append("refused:s3:" + e.code)
            return self._s3_error(e.status, e.code, e.message)
        except Ec2Error as e:
            return self._s3_error(e.status, e.code, e.message)
        self._forward(url, path, body, payload_hash or hashlib.sha256(body).hexdigest())

    def _forward(self, url, path, body, payload_hash):
        up = urllib.parse.urlsplit(self.server.upstream)
        key_id, secret = self.server.upstream_key
        amz_date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        skip = {"authorization", "host", "x-amz-date", "x-amz-security-token", "content-length",
                "transfer-encoding", "connection", "expect", "x-amz-content-sha256"}
        out = [(k, v) for k, v in self.headers.items() if k.lower() not in skip]
        out += [("Host", up.netloc), ("X-Amz-Date", amz_date),
                ("X-Amz-Content-Sha256", payload_hash)]
        signed = ["host", "x-amz-content-sha256", "x-amz-date"]
        sig = signature(secret, amz_date, "us-east-1", "s3",
                        canonical_request(self.command, path, url.query, out, signed, body,
                                          payload_hash))
        out.append(("Authorization", f"AWS4-HMAC-SHA256 Credential={key_id}/{amz_date[:8]}/"
                                     f"us-east-1/s3/aws4_request, SignedHeaders="
                                     f"{';'.join(signed)}, Signature={sig}"))
        conn = http.client.HTTPConnection(up.hostname, up.port, timeout=60)
        try:
            conn.putrequest(self.command, url.path + ("?" + url.query if url.query else ""),
                            skip_host=True, skip_accept_encoding=True)
            for k, v in out:
                conn.putheader(k, v)
            conn.putheader("Content-Length", str(len(body)))
            conn.endheaders(body)
            resp = conn.getresponse()
            data = resp.read()
            self.send_response(resp.status)
            for k, v in resp.getheaders():
                if k.lower() not in ("transfer-encoding", "connection", "content-length"):
                    self.send_header(k, v)
            length = resp.getheader("Content-Length") if self.command == "HEAD" else None
            self.send_header("Content-Length", length or str(len(data)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)
        finally:
            conn.close()

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _handle


def s3_front(ec2, bind, upstream, upstream_key):
    """The S3 front on (bind, free port) for ec2's keys, forwarding to upstream (an
    http://host:port S3 server) with upstream_key (id, secret); serve_forever it in a thread."""
    server = ThreadingHTTPServer((bind, 0), S3Front)
    server.daemon_threads = True
    server.ec2, server.upstream, server.upstream_key = ec2, upstream, upstream_key
    return server


def serve(server, port_file):
    tmp = port_file + ".tmp"
    with open(tmp, "w") as f:
        f.write(str(server.server_address[1]))
    os.rename(tmp, port_file)
    server.serve_forever()


def main():
    with open(sys.argv[1]) as f:
        config = json.load(f)
    ec2 = Ec2(config)
    if config.get("node_bind"):
        node_server = ThreadingHTTPServer((config["node_bind"], 0), Handler)
        node_server.daemon_threads = True
        node_server.ec2 = ec2
        threading.Thread(target=serve, args=(node_server, config["node_port_file"]),
                         daemon=True).start()
    if config.get("s3_bind"):
        s3 = s3_front(ec2, config["s3_bind"], config["s3_upstream"], config["s3_upstream_key"])
        threading.Thread(target=serve, args=(s3, config["s3_port_file"]), daemon=True).start()
    server = ThreadingHTTPServer((config["bind"], 0), Handler)
    server.daemon_threads = True
    server.ec2 = ec2
    serve(server, config["port_file"])


if __name__ == "__main__":
    main()
