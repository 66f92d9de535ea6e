"""The team API server (`herd api`) from Python, with the standard library only: its config (as
controller/state/api_config.cpp reads it), an HTTPS client with its CA and bearer token, the frame
stream of POST /api/v1/run (controller/server/stream_frames.hpp), uploads of a task's workdir and
file mounts, and the task in the server's stored JSON form (controller/jobs/task_codec.cpp).

The CLI's remote mode (controller/cli/remote.cpp) is the model: the same command args, the same
body, the same exit codes for the same failures, so the SDK's calls return the same values in both
modes."""

import dataclasses
import http.client
import io
import ipaddress
import json
import math
import os
import re
import socket
import ssl
import tarfile
from typing import Any, Callable, Dict, List, Optional, Tuple

from herd.errors import HerdError

# limits.hpp: kApiClientTimeout (one exchange; a stream gets a heartbeat every
# kApiStreamHeartbeat = 1 s, so a read that waits this long means the server is gone),
# kApiMaxUploadBytes, kApiMaxFrameBytes, kMaxTaskNodes, kMaxTaskNameBytes.
CLIENT_TIMEOUT_S = 60.0
MAX_UPLOAD_BYTES = 256 << 20
MAX_FRAME_BYTES = 256 << 10
MAX_TASK_NODES = 10000
MAX_TASK_NAME_BYTES = 200

# Exit codes the CLI gives the same failures (controller/cli/common.cpp, head_client.hpp).
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_NOT_FOUND = 102
EXIT_NOT_FINISHED = 101

_UNAUTHENTICATED_PREFIX = "unauthenticated: "


@dataclasses.dataclass(frozen=True)
class ApiConfig:
    endpoint: str
    token: str = ""
    ca_cert: str = ""  # "": the system's trust store


def herd_home() -> str:
    """$HERD_HOME (absolute), else ~/.herd, as controller/state/herd_home.cpp."""
    home = os.environ.get("HERD_HOME")
    if home:
        home = os.path.normpath(os.path.abspath(home))
    else:
        home = os.path.join(os.path.expanduser("~"), ".herd")
    return home


def config_path() -> str:
    return os.path.join(herd_home(), "config.yaml")


def _yaml_scalar(text: str, where: str) -> str:
    """A plain, single- or double-quoted YAML scalar, with an optional trailing comment."""
    text = text.strip()
    rest = ""
    if text.startswith('"'):
        try:
            value, end = json.JSONDecoder().raw_decode(text)
        except ValueError:
            raise HerdError(f"{where}: a double-quoted string the SDK cannot read",
                            EXIT_USAGE) from None
        rest = text[end:].strip()
    elif text.startswith("'"):
        m = re.match(r"'((?:[^']|'')*)'", text)
        if not m:
            raise HerdError(f"{where}: unterminated single-quoted string", EXIT_USAGE)
        value, rest = m.group(1).replace("''", "'"), text[m.end():].strip()
    else:
        if " #" in text:
            text = text[:text.index(" #")].rstrip()
        return "" if text in ("~", "null") else text
    if rest and not rest.startswith("#"):
        raise HerdError(f"{where}: unexpected text after a quoted string", EXIT_USAGE)
    return value


def _read_config_file(path: str) -> Dict[str, str]:
    """The api_server mapping of config.yaml: the block form SaveApiConfig writes (and the
    hand-written variants of it: quotes, comments)."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().splitlines()
    out: Dict[str, str] = {}
    in_section = False
    section_indent = -1
    for number, raw in enumerate(lines, 1):
        line = raw.rstrip()
        if not line.strip() or line.lstrip().startswith("#") or line.strip() in ("---", "..."):
            continue
        indent = len(line) - len(line.lstrip(" "))
        m = re.match(r"\s*([A-Za-z_][A-Za-z0-9_]*)\s*:(?:\s+(.*))?$", line)
        where = f"{path}:{number}:{indent + 1}"
        if indent == 0:
            in_section = False
            if m and m.group(1) == "api_server":
                rest = (m.group(2) or "").strip()
                if rest and not rest.startswith("#"):
                    raise HerdError(f"{where}: api_server: expected a mapping", EXIT_USAGE)
                in_section = True
                section_indent = -1
            continue
        if not in_section:
            continue
        if section_indent < 0:
            section_indent = indent
        if indent != section_indent or not m:
            raise HerdError(f"{where}: the SDK reads api_server as `key: value` lines",
                            EXIT_USAGE)
        if m.group(1) in ("endpoint", "token", "ca_cert"):
            out[m.group(1)] = _yaml_scalar(m.group(2) or "", where)
    return out


def load_config() -> Optional[ApiConfig]:
    """The server to use, or None for local mode: <herd home>/config.yaml's api_server, with
    HERD_API_SERVER, HERD_API_TOKEN and HERD_API_CA_CERT over it; HERD_API_SERVER=local forces
    local mode. Read on every call, as the CLI reads it on every run."""
    forced = os.environ.get("HERD_API_SERVER", "")
    if forced == "local":
        return None
    fields: Dict[str, str] = {}
    path = config_path()
    if os.path.exists(path):
        try:
            fields = _read_config_file(path)
        except OSError as e:
            raise HerdError(f"cannot read {path}: {e.strerror or e}", EXIT_ERROR) from None
    if forced:
        fields["endpoint"] = forced
    for env, key in (("HERD_API_TOKEN", "token"), ("HERD_API_CA_CERT", "ca_cert")):
        if os.environ.get(env):
            fields[key] = os.environ[env]
    if not fields.get("endpoint"):
        return None
    return ApiConfig(fields["endpoint"], fields.get("token", ""), fields.get("ca_cert", ""))


def _yaml_quoted(value: str) -> str:
    if value and re.fullmatch(r"[A-Za-z0-9_./:+@=\[\]-]+", value) and not value[0] in "-[@":
        return value
    return json.dumps(value)


def save_config(config: ApiConfig) -> str:
    """Writes config.yaml with only the api_server section, 0600, atomically (SaveApiConfig)."""
    home = herd_home()
    os.makedirs(home, mode=0o700, exist_ok=True)
    text = "api_server:\n"
    text += f"  endpoint: {_yaml_quoted(config.endpoint)}\n"
    text += f"  token: {_yaml_quoted(config.token)}\n"
    if config.ca_cert:
        text += f"  ca_cert: {_yaml_quoted(config.ca_cert)}\n"
    path = config_path()
    tmp = f"{path}.tmp.{os.getpid()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return path


# ---- errors as the CLI reports them


class ApiError(Exception):
    """A failure of the exchange, with the exit code the CLI gives it."""

    def __init__(self, message: str, returncode: int):
        super().__init__(message)
        self.message = message
        self.returncode = returncode


def _status_error(http_status: int, body: bytes) -> ApiError:
    """An HTTP error answer as StatusFromResponse + FailForResponse read it: the server's
    message; exit 2 for a refused token (401) and bad arguments, 102 for not found, else 1."""
    message = ""
    code = None
    try:
        parsed = json.loads(body.decode("utf-8", errors="replace"))
    except ValueError:
        parsed = None
    if isinstance(parsed, dict):
        if isinstance(parsed.get("error"), str):
            message = parsed["error"]
        if isinstance(parsed.get("code"), str):
            code = parsed["code"]
    if code == "UNAUTHENTICATED" and not message.startswith(_UNAUTHENTICATED_PREFIX):
        message = _UNAUTHENTICATED_PREFIX + message
    if not message:
        line = body.decode("utf-8", errors="replace").split("\n", 1)[0][:200]
        message = f"HTTP {http_status}" + (f": {line}" if line else "")
    if code is None:
        code = {400: "INVALID_ARGUMENT", 413: "INVALID_ARGUMENT", 431: "INVALID_ARGUMENT",
                401: "PERMISSION_DENIED", 403: "PERMISSION_DENIED", 404: "NOT_FOUND"}.get(
                    http_status, "")
    if http_status == 401:
        return ApiError(message, EXIT_USAGE)
    if code == "NOT_FOUND":
        return ApiError(message, EXIT_NOT_FOUND)
    if code == "INVALID_ARGUMENT":
        return ApiError(message, EXIT_USAGE)
    return ApiError(message, EXIT_ERROR)


# ---- the client


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


class Client:
    """One server: endpoint checks as api_http::ApiClient::Create (https://, or http:// to a
    loopback address only; only scheme, host and port), TLS 1.2+ with the CA file or the
    system's trust store, the token as a bearer token. One connection per exchange."""

    def __init__(self, config: ApiConfig):
        self.config = config
        url = config.endpoint
        if url.startswith("https://"):
            self.tls = True
            rest = url[8:]
        elif url.startswith("http://"):
            self.tls = False
            rest = url[7:]
        else:
            raise ApiError(f"API server URL '{url}' must start with https:// (or http:// to a "
                           "loopback address)", EXIT_USAGE)
        if rest.endswith("/"):
            rest = rest[:-1]
        if any(c in rest for c in "/?#@"):
            raise ApiError(f"API server URL '{url}' must be only a scheme, a host and a port",
                           EXIT_USAGE)
        m = re.fullmatch(r"\[([^\]]+)\](?::(\d+))?|([^:\[\]]+)(?::(\d+))?", rest)
        if not m:
            raise ApiError(f"API server URL '{url}' has no host or port", EXIT_USAGE)
        self.host = m.group(1) or m.group(3)
        port_text = m.group(2) or m.group(4)
        self.port = int(port_text) if port_text else (443 if self.tls else 80)
        if not self.host or not 0 < self.port < 65536:
            raise ApiError(f"API server URL '{url}' has no host or port", EXIT_USAGE)
        if not self.tls and not _is_loopback(self.host):
            raise ApiError("plain http:// is only allowed to a loopback address (127.0.0.1, "
                           f"::1), not {self.host}: use https://", EXIT_USAGE)
        self._ssl: Optional[ssl.SSLContext] = None
        if self.tls:
            try:
                self._ssl = ssl.create_default_context(cafile=config.ca_cert or None)
            except (OSError, ssl.SSLError) as e:
                raise ApiError(f"CA certificate '{config.ca_cert}': {e}", EXIT_USAGE) from None
            self._ssl.minimum_version = ssl.TLSVersion.TLSv1_2

    def _connect(self, timeout: float) -> http.client.HTTPConnection:
        if self.tls:
            return http.client.HTTPSConnection(self.host, self.port, timeout=timeout,
                                               context=self._ssl)
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout)

    def _headers(self, content_type: str) -> Dict[str, str]:
        headers = {"Content-Type": content_type, "Accept": "*/*"}
        if self.config.token:
            headers["Authorization"] = f"Bearer {self.config.token}"
        return headers

    def _fail(self, e: BaseException) -> ApiError:
        what = getattr(e, "strerror", None) or str(e) or type(e).__name__
        if isinstance(e, (socket.timeout, TimeoutError)):
            what = f"no answer within {CLIENT_TIMEOUT_S:g} s"
        elif isinstance(e, ssl.SSLCertVerificationError):
            what = f"TLS handshake: {e.verify_message or e}"
        return ApiError(f"API server {self.config.endpoint}: {what}", EXIT_ERROR)

    def open(self, method: str, path: str, body: bytes = b"",
             content_type: str = "application/json"):
        """Sends a request; returns (connection, response) with the response's status OK (2xx),
        or raises ApiError (HTTP errors as the CLI reports them)."""
        conn = self._connect(CLIENT_TIMEOUT_S)
        try:
            conn.request(method, path, body=body if body or method != "GET" else None,
                         headers=self._headers(content_type))
            response = conn.getresponse()
            if not 200 <= response.status < 300:
                raise _status_error(response.status, response.read(64 << 10))
        except ApiError:
            conn.close()
            raise
        except (OSError, http.client.HTTPException) as e:
            conn.close()
            raise self._fail(e) from None
        return conn, response

    def request(self, method: str, path: str, body: bytes = b"",
                content_type: str = "application/json") -> bytes:
        conn, response = self.open(method, path, body, content_type)
        try:
            return response.read()
        except (OSError, http.client.HTTPException) as e:
            raise self._fail(e) from None
        finally:
            conn.close()

    def json(self, method: str, path: str, body: Any = None) -> Any:
        raw = self.request(method, path, b"" if body is None else json.dumps(body).encode())
        try:
            return json.loads(raw)
        except ValueError as e:
            raise ApiError(f"the server's answer to {method} {path}: {e}", EXIT_ERROR) from None


# ---- frames


class FrameDecoder:
    """Frames "<tag> <len>\\n<bytes>" fed in any pieces (stream_frames.hpp). on_frame(tag,
    payload) for each; tags R (request id), O (stdout), E (stderr), X (exit code)."""

    TAGS = (b"R", b"O", b"E", b"X")

    def __init__(self, on_frame: Callable[[str, bytes], None]):
        self._on_frame = on_frame
        self._buf = bytearray()
        self._failed: Optional[str] = None

    def pending(self) -> int:
        return len(self._buf)

    def feed(self, piece: bytes) -> None:
        """Raises ValueError for a malformed header (and stays failed)."""
        if self._failed:
            raise ValueError(self._failed)
        self._buf += piece
        while True:
            nl = self._buf.find(b"\n", 0, 24)
            if nl < 0:
                if len(self._buf) >= 24:
                    self._fail("a frame header without its end")
                return
            header = bytes(self._buf[:nl])
            m = re.fullmatch(rb"([ROEX]) (\d{1,10})", header)
            if not m:
                self._fail(f"a malformed frame header {header[:24]!r}")
            length = int(m.group(2))
            if length > MAX_FRAME_BYTES:
                self._fail(f"a frame of {length} bytes (at most {MAX_FRAME_BYTES})")
            if len(self._buf) < nl + 1 + length:
                return
            payload = bytes(self._buf[nl + 1:nl + 1 + length])
            del self._buf[:nl + 1 + length]
            self._on_frame(m.group(1).decode(), payload)

    def _fail(self, why: str) -> None:
        self._failed = why
        raise ValueError(why)


# ---- the task in the server's form


def _number(value: float) -> Any:
    return int(value) if float(value).is_integer() and abs(value) < 2**53 else float(value)


def _amount(field: str, value: Any, allow_gb: bool) -> Tuple[float, bool]:
    """ParseAmount: 4, "4", "4+", memory also "32GB"/"32G"."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if not math.isfinite(value) or value <= 0:
            raise ValueError(f"resources.{field}: expected a positive number, got {value!r}")
        return float(value), False
    text = str(value).strip(" \t")
    at_least = text.endswith("+")
    if at_least:
        text = text[:-1]
    if allow_gb:
        if text.upper().endswith("GB"):
            text = text[:-2]
        elif text.upper().endswith("G"):
            text = text[:-1]
    try:
        number = float(text.strip(" \t"))
    except ValueError:
        number = float("nan")
    if not math.isfinite(number) or number <= 0 or not re.fullmatch(
            r"[0-9.eE+-]+", text.strip(" \t") or "x"):
        raise ValueError(f"resources.{field}: expected a positive number"
                         f"{' of GB' if allow_gb else ''} such as 4 or '4+', got {value!r}")
    return number, at_least


_ACCELERATOR_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*\Z")


_DOCKER_PREFIX = "docker:"
_IMAGE_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-/:@")


def _container_image(image_id: str) -> str:
    """resources.image_id "docker:IMAGE" -> IMAGE, checked as herd's parser checks it
    (controller/task/resource_values.cpp ParseContainerImage): an image runs setup and run in a
    container; any other image_id is accepted and not acted on, as by the CLI."""
    image = image_id[len(_DOCKER_PREFIX):]
    if not image or len(image) > 255 or image[0] == "-" or not set(image) <= _IMAGE_CHARS:
        raise ValueError(f"resources.image_id: '{image}' is not an image reference (expected e.g. "
                         "docker:nvcr.io/nvidia/pytorch:24.01-py3)")
    return image


def _accelerator(text: str) -> Tuple[str, float]:
    text = text.strip(" \t")
    name, count = text, 1.0
    if ":" in text:
        name, count_text = text.split(":", 1)
        name, count_text = name.strip(" \t"), count_text.strip(" \t")
        try:
            count = float(count_text)
        except ValueError:
            count = float("nan")
        if not math.isfinite(count) or count <= 0:
            raise ValueError(f"resources.accelerators: count '{count_text}' must be a positive "
                             "number (e.g. L4:4 or T4:0.5)")
    if not _ACCELERATOR_NAME.match(name):
        raise ValueError("resources.accelerators: expected NAME or NAME:COUNT (e.g. L4:4, H100, "
                         f"T4:0.5), got '{text}'")
    return name, count


def _port(text: Any) -> str:
    text = str(text).strip(" \t")

    def one(p: str) -> Optional[int]:
        p = p.strip(" \t")
        if not re.fullmatch(r"[+-]?\d+", p):
            return None
        v = int(p)
        return v if 1 <= v <= 65535 else None

    bad = ValueError("resources.ports: expected a port 1-65535 or a range like '10000-10100', "
                     f"got '{text}'")
    if "-" not in text:
        p = one(text)
        if p is None:
            raise bad
        return str(p)
    lo_text, hi_text = text.split("-", 1)
    lo, hi = one(lo_text), one(hi_text)
    if lo is None or hi is None:
        raise bad
    if lo > hi:
        raise ValueError(f"resources.ports: range '{text}' ends before it starts")
    return f"{lo}-{hi}"


def _infra(value: str) -> str:
    bad = ValueError("resources.infra: expected CLOUD[/REGION[/ZONE]], k8s/CONTEXT, ssh/POOL or "
                     f"local, got '{value}'")
    value = value.strip(" \t")
    if not value or any(c in value for c in " \t\n"):
        raise bad
    cloud, slash, rest = value.partition("/")
    if not cloud:
        raise bad
    cloud = cloud.lower()
    rest = slash + rest
    if rest:
        if len(rest) == 1:
            raise bad
        if cloud not in ("k8s", "kubernetes") and ("//" in rest or rest.endswith("/") or
                                                   rest.count("/") > 2):
            raise bad
    return cloud + rest


_VAR = re.compile(r"\$(?:\{([^}]*)\}|([A-Za-z_][A-Za-z0-9_]*))")


def _substitute(field: str, text: str, envs: Dict[str, str]) -> str:
    """SubstituteVars: $NAME and ${NAME} from the task's envs, then this environment."""
    if "${" in text and "}" not in text[text.rindex("${"):]:
        raise ValueError(f"{field}: unterminated '${{' in '{text}'")

    def value(m: "re.Match[str]") -> str:
        name = m.group(1) if m.group(1) is not None else m.group(2)
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            raise ValueError(f"{field}: '${{{name}}}' is not a valid variable reference")
        if name in envs:
            return envs[name]
        if name in os.environ:
            return os.environ[name]
        raise ValueError(f"{field}: variable {name} is not set: define it in envs or pass "
                         f"--env {name}=VALUE")

    return _VAR.sub(value, text)


def encode_task(task: Any) -> Tuple[Dict[str, Any], Dict[str, str]]:
    """The herd.Task as EncodeTask writes the parsed task (every field, in its order), and its
    secrets (sent apart). Raises ValueError where `herd launch TASK.yaml` would refuse it."""
    config = task.to_yaml_config()
    name = config.get("name") or ""
    if len(name.encode()) > MAX_TASK_NAME_BYTES:
        raise ValueError(f"name: at most {MAX_TASK_NAME_BYTES} bytes, got "
                         f"{len(name.encode())}")
    num_nodes = config.get("num_nodes", 1)
    if num_nodes > MAX_TASK_NODES:
        raise ValueError(f"num_nodes: at most {MAX_TASK_NODES} nodes, got {num_nodes}")
    envs: Dict[str, str] = {}
    secrets: Dict[str, str] = {}
    for field, out in (("envs", envs), ("secrets", secrets)):
        for k, v in config.get(field, {}).items():
            if v is None:
                hint = f"--env {k}=VALUE" if field == "envs" else f"--secret {k}=VALUE"
                raise ValueError(f"{field}.{k} is required: pass {hint}")
            out[k] = v
    workdir = _substitute("workdir", config.get("workdir") or "", envs)
    mounts: Dict[str, str] = {}
    for remote, local in config.get("file_mounts", {}).items():
        path = f"file_mounts.{remote}"
        if not local:
            raise ValueError(f"{path}: expected a local path, got an empty string")
        r = _substitute(path, remote, envs)
        if r in mounts:
            raise ValueError(f"{path}: mounts to '{r}' twice: keep one")
        mounts[r] = _substitute(path, local, envs)
    res = config.get("resources", {})
    resources: Dict[str, Any] = {}
    if "cpus" in res:
        value, at_least = _amount("cpus", res["cpus"], False)
        resources["cpus"] = _number(value)
    else:
        at_least = False
    resources["cpus_at_least"] = at_least
    if "memory" in res:
        value, at_least = _amount("memory", res["memory"], True)
        resources["memory_gb"] = _number(value)
    else:
        at_least = False
    resources["memory_at_least"] = at_least
    accelerator, count = "", 0.0
    acc = res.get("accelerators")
    alternatives = []
    if acc is not None:
        choices = [acc] if isinstance(acc, str) else list(acc)
        if not choices:
            raise ValueError("resources.accelerators: expected an accelerator such as L4:4, "
                             "got an empty list")
        accelerator, count = _accelerator(choices[0])
        alternatives = [_accelerator(c) for c in choices] if len(choices) > 1 else []
    resources["accelerator"] = accelerator
    resources["accelerator_count"] = _number(count)
    resources["infra"] = _infra(res["infra"]) if res.get("infra") is not None else ""
    ports = res.get("ports")
    ports = [] if ports is None else ports if isinstance(ports, list) else [ports]
    resources["ports"] = [_port(p) for p in ports]
    if "disk_size" in res:
        resources["disk_size"] = res["disk_size"]
    resources["use_spot"] = bool(res.get("use_spot", False))
    resources["instance_type"] = ""
    image_id = res.get("image_id")
    if isinstance(image_id, str) and image_id.startswith(_DOCKER_PREFIX):
        resources["container_image"] = _container_image(image_id)
    resources["any_of"] = []
    resources["ordered"] = []
    # Several accelerators are candidates, as herd's parser makes them: a list in the user's
    # order (ordered), a set or mapping any of them (any_of); each inherits the other fields.
    for acc_name, acc_count in alternatives:
        candidate = dict(resources, accelerator=acc_name, accelerator_count=_number(acc_count),
                         any_of=[], ordered=[])
        resources["ordered" if isinstance(acc, (list, tuple)) else "any_of"].append(candidate)
    encoded = {
        "name": name,
        "workdir": workdir,
        "num_nodes": num_nodes,
        "resources": resources,
        "envs": dict(sorted(envs.items())),
        "file_mounts": dict(sorted(mounts.items())),
        "setup": config.get("setup") or "",
        "run": config.get("run") or "",
    }
    return encoded, dict(sorted(secrets.items()))


# ---- uploads


def _tar(directory: str, member: str) -> bytes:
    """`tar -C directory -cf - member` in memory: "." (the directory's contents) or one file."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tar:
        tar.add(os.path.join(directory, member), arcname=member, recursive=True)
    data = buf.getvalue()
    if len(data) > MAX_UPLOAD_BYTES:
        raise ApiError(f"{directory} is {len(data) >> 20} MiB as an archive; the server takes at "
                       f"most {MAX_UPLOAD_BYTES >> 20} MiB per upload", EXIT_USAGE)
    return data


def _upload(client: Client, archive: bytes) -> str:
    raw = client.request("POST", "/api/v1/uploads", archive, "application/x-tar")
    try:
        return str(json.loads(raw)["id"])
    except (ValueError, KeyError, TypeError) as e:
        raise ApiError(f"the server's answer to an upload: {e}", EXIT_ERROR) from None


def upload_files(client: Client, task_json: Dict[str, Any]) -> Dict[str, str]:
    """Uploads the task's workdir ("workdir") and file mounts ("mounts/N", in the order of their
    remote paths) and points task_json at those places, as remote.cpp's UploadFiles."""
    uploads: Dict[str, str] = {}
    workdir = task_json["workdir"]
    if workdir:
        if not os.path.isdir(workdir):
            raise ApiError(f"workdir: {workdir} is not a directory", EXIT_USAGE)
        uploads["workdir"] = _upload(client, _tar(os.path.abspath(workdir), "."))
        task_json["workdir"] = "workdir"
    mounts = task_json["file_mounts"]
    for i, remote in enumerate(list(mounts)):
        local = mounts[remote]
        if not os.path.exists(local):
            raise ApiError(f"file_mounts.{remote}: {local} does not exist", EXIT_USAGE)
        path = os.path.normpath(os.path.abspath(local))
        place = f"mounts/{i}"
        if os.path.isdir(path):
            archive = _tar(path, ".")
            mounts[remote] = place
        else:
            archive = _tar(os.path.dirname(path), os.path.basename(path))
            mounts[remote] = f"{place}/{os.path.basename(path)}"
        uploads[place] = _upload(client, archive)
    return uploads


# ---- a command on the server


@dataclasses.dataclass
class RunCall:
    """What POST /api/v1/run takes: the command's args and, for launch/exec/jobs launch, the
    task (a herd.Task; its JSON, secrets and uploads are made when the call runs)."""
    args: List[str]
    cluster: str = ""
    task: Any = None


def run(config: ApiConfig, call: RunCall, on_output: Callable[[str, bytes], None],
        should_stop: Callable[[], bool] = lambda: False,
        on_connection: Callable[[Any], None] = lambda conn: None) -> int:
    """Runs the command on the server, calling on_output("O"|"E", bytes) as its output comes;
    returns its exit code. Failures before the command runs raise ApiError with the CLI's exit
    code for them."""
    client = Client(config)
    body: Dict[str, Any] = {}
    args = list(call.args)
    if call.cluster:
        body["cluster"] = call.cluster
    if call.task is not None:
        try:
            task_json, secrets = encode_task(call.task)
        except ValueError as e:
            raise ApiError(str(e), EXIT_USAGE) from None
        uploads = upload_files(client, task_json)
        body["task"] = json.dumps(task_json, separators=(",", ":"))
        if uploads:
            body["uploads"] = uploads
        if secrets:
            body["secrets"] = secrets
        args += ["--task-json", "task.json"]
    body["args"] = args
    conn, response = client.open("POST", "/api/v1/run", json.dumps(body).encode())
    on_connection(conn)
    exit_code: List[int] = []

    def frame(tag: str, payload: bytes) -> None:
        if tag in ("O", "E"):
            if payload:  # empty stdout frames are the server's heartbeats
                on_output(tag, payload)
        elif tag == "X":
            try:
                exit_code.append(int(payload.decode()))
            except ValueError:
                raise ValueError(f"an exit code frame {payload[:20]!r}") from None

    decoder = FrameDecoder(frame)
    try:
        while not should_stop():
            try:
                piece = response.read1(64 << 10)
            except (OSError, http.client.HTTPException, ValueError, AttributeError) as e:
                if should_stop():
                    break
                raise client._fail(e) from None
            if not piece:
                break
            try:
                decoder.feed(piece)
            except ValueError as e:
                raise ApiError(f"the server's stream: {e}", EXIT_ERROR) from None
    finally:
        conn.close()
    if should_stop():
        return EXIT_NOT_FINISHED
    if not exit_code:
        raise ApiError("the server ended the stream before the command's exit code (it stopped "
                       "or restarted; see `herd api requests`)", EXIT_ERROR)
    return exit_code[-1]


def whoami(config: ApiConfig) -> Dict[str, Any]:
    who = Client(config).json("GET", "/api/v1/whoami")
    if not isinstance(who, dict):
        raise ApiError("the server's answer to whoami is not an object", EXIT_ERROR)
    return who
