"""The calls of the SDK; each is one run of the herd CLI."""

import atexit
import dataclasses
import json
import os
import secrets
import shutil
import sys
import tempfile
import threading
from typing import IO, Any, Dict, Iterable, List, Optional, Sequence, Set, Tuple, Union

from herd import _api, _process
from herd.errors import HerdError
from herd.task import Task

# Exit codes of `herd logs` (and so of tail_logs), as SkyPilot's.
JOB_SUCCEEDED = 0
JOB_FAILED = 100
JOB_NOT_FINISHED = 101
JOB_NOT_FOUND = 102
JOB_CANCELLED = 103
_LOG_EXIT_CODES = (JOB_SUCCEEDED, JOB_FAILED, JOB_NOT_FINISHED, JOB_NOT_FOUND, JOB_CANCELLED)

# Job states after which nothing changes (REFERENCE: sky/skylet/job_lib.py).
TERMINAL_JOB_STATES = frozenset(
    {"SUCCEEDED", "FAILED", "FAILED_SETUP", "FAILED_DRIVER", "CANCELLED"})


@dataclasses.dataclass(frozen=True)
class ClusterHandle:
    """Where a job went: the cluster's name and its head node's address."""
    cluster_name: str
    head_ip: Optional[str]


# Requests whose CLI run has not been waited for: waited for at exit, so a script that ends
# without stream_and_get does not cut a launch off half-way (in SkyPilot the API server would
# carry it on).
_unfinished: Set["Request"] = set()
_unfinished_lock = threading.Lock()


class Request:
    """A launch or exec in progress: the CLI runs in the background from the moment the request
    is made. Pass it to stream_and_get (shows the CLI's progress) or get (quiet)."""

    def __init__(self, args: Sequence[str], task_dir: Optional[str], cluster_name: str,
                 task: Optional[Task] = None, remote: Optional[_api.ApiConfig] = None):
        self.cluster_name = cluster_name
        self._task_dir = task_dir
        try:
            if remote is not None:
                self._proc = _process.RemoteProcess(remote, args, task, cluster_name)
            else:
                self._proc = _process.start(args)
        except HerdError:
            self._remove_task_dir()
            raise
        self._stdout = _process.Pump(self._proc.stdout)
        self._stderr = _process.Pump(self._proc.stderr, keep=_process.STDERR_KEPT_BYTES)
        self._lock = threading.Lock()
        self._outcome: Optional[Tuple[Any, Optional[HerdError]]] = None
        self._streamed = False
        with _unfinished_lock:
            _unfinished.add(self)

    @property
    def argv(self) -> List[str]:
        return list(self._proc.args)

    def done(self) -> bool:
        """Whether the CLI has exited (its result may still be unread)."""
        return self._proc.poll() is not None

    def _stream(self, sink: IO[str]) -> None:
        self._streamed = True
        self._stderr.attach(sink)

    def _finish(self) -> Tuple[int, ClusterHandle]:
        with self._lock:
            if self._outcome is None:
                try:
                    self._stdout.join()
                    self._stderr.join()
                    returncode = self._proc.wait()
                except KeyboardInterrupt:
                    _process.interrupt(self._proc)
                    self._forget()
                    raise
                self._forget()
                self._outcome = self._parse(returncode)
        result, error = self._outcome
        if error is not None:
            raise error
        return result

    def _remove_task_dir(self) -> None:
        if self._task_dir is not None:
            shutil.rmtree(self._task_dir, ignore_errors=True)

    def _forget(self) -> None:
        self._remove_task_dir()
        with _unfinished_lock:
            _unfinished.discard(self)

    def _parse(self, returncode: int) -> Tuple[Any, Optional[HerdError]]:
        argv = self.argv
        if returncode != 0:
            return None, _process.failure(argv, returncode, self._stderr.text(), self._streamed)
        stdout = self._stdout.text().strip()
        try:
            try:
                reply = json.loads(stdout)
            except ValueError:
                # Should anything precede the object, the object is the last line.
                reply = json.loads(stdout.splitlines()[-1] if stdout else "")
            job_id = reply["job_id"]
            if isinstance(job_id, bool) or not isinstance(job_id, int):
                raise TypeError("job_id is not an integer")
        except (ValueError, KeyError, TypeError, IndexError) as e:
            return None, HerdError(
                f"herd {argv[1]} printed no job (expected a JSON object with job_id on stdout, "
                f"got {stdout[:200]!r}: {e})", returncode, argv, self._stderr.text())
        head_ip = reply.get("head_ip")
        handle = ClusterHandle(str(reply.get("cluster") or self.cluster_name),
                               None if head_ip is None else str(head_ip))
        return (job_id, handle), None

    def __repr__(self) -> str:
        return f"Request({' '.join(self.argv[1:])!s})"


def _wait_for_unfinished() -> None:
    with _unfinished_lock:
        pending = list(_unfinished)
    for request in pending:
        print(f"herd: waiting for `herd {request.argv[1]}` of cluster {request.cluster_name} "
              "to finish before exiting", file=sys.stderr)
        try:
            stream_and_get(request)
        except HerdError as e:
            print(f"herd: {e}", file=sys.stderr)


atexit.register(_wait_for_unfinished)


def _as_task(task: Union[Task, str]) -> Task:
    if isinstance(task, str):  # a command, as `herd launch -c NAME 'echo hi'`
        return Task(run=task)
    if not isinstance(task, Task):
        raise TypeError(f"expected a herd.Task or a command string, got {task!r}")
    return task


def _check_cluster(cluster_name: Any) -> str:
    if not isinstance(cluster_name, str) or not cluster_name:
        raise ValueError(f"a cluster name is required, got {cluster_name!r}")
    return cluster_name


def _submit(verb: str, task: Union[Task, str], cluster_name: str,
            flags: Sequence[str]) -> Request:
    task = _as_task(task)
    config = _process.api_config()
    if config is not None:
        # The CLI's remote mode: the task goes in the request (remote.cpp), not in a file.
        if verb == "launch":
            args = ["launch", "-c", cluster_name, "-d", *flags, "-o", "json"]
        else:
            args = ["exec", cluster_name, "-d", "-o", "json"]
        return Request(args, None, cluster_name, task, config)
    # Private directory: the file holds the task's secrets.
    task_dir = tempfile.mkdtemp(prefix="herd-sdk-")
    try:
        path = os.path.join(task_dir, "task.yaml")
        task.to_yaml(path)
    except BaseException:
        shutil.rmtree(task_dir, ignore_errors=True)
        raise
    if verb == "launch":
        args = ["launch", "-c", cluster_name, path, "-d", "-y", *flags, "-o", "json"]
    else:
        args = ["exec", cluster_name, path, "-d", *flags, "-o", "json"]
    return Request(args, task_dir, cluster_name)


def launch(task: Union[Task, str], cluster_name: Optional[str] = None, *,
           idle_minutes_to_autostop: Optional[int] = None, down: bool = False,
           no_setup: bool = False) -> Request:
    """Brings up cluster_name (or reuses it), runs setup, and submits the task as a job
    (`herd launch -c NAME TASK.yaml -d -y -o json`). Returns at once; stream_and_get(request)
    gives (job_id, handle). Without a name, one is made up (handle.cluster_name tells it)."""
    if cluster_name is None:
        cluster_name = f"herd-{secrets.token_hex(3)}"
    flags: List[str] = []
    if idle_minutes_to_autostop is not None:
        if isinstance(idle_minutes_to_autostop, bool) or not isinstance(
                idle_minutes_to_autostop, int) or idle_minutes_to_autostop < 0:
            raise ValueError("idle_minutes_to_autostop takes a number of minutes (>= 0), got "
                             f"{idle_minutes_to_autostop!r}")
        flags += ["-i", str(idle_minutes_to_autostop)]
    if down:
        flags.append("--down")
    if no_setup:
        flags.append("--no-setup")
    return _submit("launch", task, _check_cluster(cluster_name), flags)


def exec(task: Union[Task, str], cluster_name: str) -> Request:  # noqa: A001 (sky.exec)
    """Submits the task to an UP cluster without provisioning or setup, after syncing its
    workdir (`herd exec NAME TASK.yaml -d -o json`). Returns a Request like launch."""
    return _submit("exec", task, _check_cluster(cluster_name), [])


def stream_and_get(request: Any, output: Optional[IO[str]] = None) -> Any:
    """Waits for a request, copying the CLI's progress to output (sys.stderr by default), and
    returns its result: (job_id, ClusterHandle) for launch and exec. Raises HerdError when the
    CLI failed. Anything that is not a Request is returned as it is, so
    stream_and_get(down(...)) works as in SkyPilot."""
    if not isinstance(request, Request):
        return request
    request._stream(output if output is not None else sys.stderr)
    return request._finish()


def get(request: Any) -> Any:
    """stream_and_get without showing progress; the error keeps all of the CLI's stderr."""
    if not isinstance(request, Request):
        return request
    return request._finish()


def tail_logs(cluster_name: str, job_id: Optional[int] = None, follow: bool = True) -> int:
    """Streams a job's log to sys.stdout (`herd logs NAME JOB`; the latest job without job_id)
    until it ends, or only what is there with follow=False. Returns the CLI's exit code:
    JOB_SUCCEEDED (0), JOB_FAILED (100), JOB_NOT_FINISHED (101), JOB_NOT_FOUND (102) or
    JOB_CANCELLED (103). Any other failure (say, no such cluster) raises HerdError."""
    args = ["logs", _check_cluster(cluster_name)]
    if job_id is not None:
        args.append(str(_job_id(job_id)))
    if not follow:
        args.append("--no-follow")
    return _process.run_streamed(args, _LOG_EXIT_CODES)


def _job_id(job_id: Any) -> int:
    if isinstance(job_id, bool) or not isinstance(job_id, int) or job_id < 0:
        raise ValueError(f"a job id is a non-negative integer, got {job_id!r}")
    return job_id


def _json_list(args: Sequence[str]) -> List[Dict[str, Any]]:
    stdout = _process.run_captured(args)
    try:
        rows = json.loads(stdout)
    except ValueError as e:
        raise HerdError(f"herd {args[0]} printed no JSON ({e}): {stdout[:200]!r}", 0,
                        [_process.binary(), *args]) from None
    if not isinstance(rows, list):
        raise HerdError(f"herd {args[0]} printed {type(rows).__name__}, expected a list", 0,
                        [_process.binary(), *args])
    return rows


def queue(cluster_name: str, skip_finished: bool = False) -> List[Dict[str, Any]]:
    """The cluster's jobs (`herd queue NAME -o json`): dicts with id, name, status, exit_codes,
    first_failed_rank, first_failed_node, message, ... With skip_finished, only the jobs that are
    still pending or running."""
    jobs = _json_list(["queue", _check_cluster(cluster_name), "-o", "json"])
    if skip_finished:
        jobs = [j for j in jobs if j.get("status") not in TERMINAL_JOB_STATES]
    return jobs


def job_status(cluster_name: str,
               job_ids: Optional[Iterable[int]] = None) -> Dict[int, Optional[str]]:
    """{job_id: status} for the given jobs (None for a job the cluster does not know), or for
    its latest job when job_ids is None."""
    jobs = {j.get("id"): j.get("status") for j in queue(cluster_name)}
    if job_ids is None:
        ids = [max(jobs)] if jobs else []
    else:
        ids = [_job_id(j) for j in job_ids]
    return {i: jobs.get(i) for i in ids}


def status(cluster_names: Union[None, str, Iterable[str]] = None) -> List[Dict[str, Any]]:
    """The clusters (`herd status -o json`): dicts with name, status ("UP", "STOPPED", ...),
    nodes, ... Only those named when cluster_names is given."""
    clusters = _json_list(["status", "-o", "json"])
    if cluster_names is None:
        return clusters
    wanted = {cluster_names} if isinstance(cluster_names, str) else set(cluster_names)
    return [c for c in clusters if c.get("name") in wanted]


def cancel(cluster_name: str, job_ids: Union[None, int, Iterable[int]] = None,
           all: bool = False) -> None:  # noqa: A002 (sky.cancel's name)
    """Cancels jobs (`herd cancel NAME JOB... -y`), or every job of the cluster with all=True."""
    args = ["cancel", _check_cluster(cluster_name)]
    if all:
        if job_ids is not None:
            raise ValueError("cancel: give job_ids or all=True, not both")
        args.append("-a")
    else:
        if job_ids is None:
            raise ValueError("cancel: give the job_ids to cancel, or all=True")
        ids = [job_ids] if isinstance(job_ids, int) else list(job_ids)
        if not ids:
            raise ValueError("cancel: job_ids is empty")
        args += [str(_job_id(j)) for j in ids]
    _process.run_captured([*args, "-y"])


def down(cluster_name: str) -> None:
    """Tears the cluster down (`herd down NAME -y`): its machines and its ssh config go."""
    _process.run_captured(["down", _check_cluster(cluster_name), "-y"])


def stop(cluster_name: str) -> None:
    """Stops the cluster's machines, keeping their disks (`herd stop NAME -y`)."""
    _process.run_captured(["stop", _check_cluster(cluster_name), "-y"])


def start(cluster_name: str) -> None:
    """Starts a stopped cluster again (`herd start NAME -y`)."""
    _process.run_captured(["start", _check_cluster(cluster_name), "-y"])


# ---- managed jobs (`herd jobs`): relaunched on new nodes after node loss


def jobs_launch(task: Union[Task, str], *, infra: Optional[str] = None) -> int:
    """Starts a managed job (`herd jobs launch TASK.yaml -d -y`) and returns its id."""
    task = _as_task(task)
    flags = [] if infra is None else ["--infra", infra]
    if _process.api_config() is not None:
        stdout = _process.run_captured(["jobs", "launch", *flags, "-d"], task=task)
    else:
        task_dir = tempfile.mkdtemp(prefix="herd-sdk-")
        try:
            path = os.path.join(task_dir, "task.yaml")
            task.to_yaml(path)
            stdout = _process.run_captured(["jobs", "launch", path, *flags, "-d", "-y"])
        finally:
            shutil.rmtree(task_dir, ignore_errors=True)
    for line in stdout.splitlines():
        if line.startswith("Managed job ID:"):
            try:
                return int(line.split(":", 1)[1])
            except ValueError:
                break
    raise HerdError(f"herd jobs launch printed no job id: {stdout[:200]!r}", 0,
                    ["herd", "jobs", "launch"])


def jobs_queue(skip_finished: bool = False) -> List[Dict[str, Any]]:
    """The managed jobs (`herd jobs queue -o json`): dicts with id, name, status, cluster,
    recoveries, ... With skip_finished, only those that have not ended."""
    return _json_list(["jobs", "queue", *(["-s"] if skip_finished else []), "-o", "json"])


def jobs_cancel(job_ids: Union[None, int, Iterable[int]] = None,
                all: bool = False) -> None:  # noqa: A002 (sky.jobs.cancel's name)
    """Cancels managed jobs (`herd jobs cancel ID... -y`), or all of them with all=True."""
    args = ["jobs", "cancel"]
    if all:
        if job_ids is not None:
            raise ValueError("jobs_cancel: give job_ids or all=True, not both")
        args.append("-a")
    else:
        if job_ids is None:
            raise ValueError("jobs_cancel: give the job_ids to cancel, or all=True")
        ids = [job_ids] if isinstance(job_ids, int) else list(job_ids)
        if not ids:
            raise ValueError("jobs_cancel: job_ids is empty")
        args += [str(_job_id(j)) for j in ids]
    _process.run_captured([*args, "-y"])


class jobs:  # noqa: N801 (a namespace, as sky.jobs)
    """herd.jobs.launch / queue / cancel: the managed-job calls under SkyPilot's names."""
    launch = staticmethod(jobs_launch)
    queue = staticmethod(jobs_queue)
    cancel = staticmethod(jobs_cancel)


# ---- the team API server


def api_login(endpoint: str, token: str, ca_cert: Optional[str] = None) -> Dict[str, Any]:
    """Logs in to a team API server as `herd api login -e ENDPOINT --token TOKEN --ca-cert CA`:
    checks the token (GET /api/v1/whoami), then writes <herd home>/config.yaml (0600). From then
    on every call (of the SDK and of the CLI) runs on the server. Returns the server's
    whoami answer ({"name", "role", ...}). api_logout() goes back to local mode."""
    config = _api.ApiConfig(endpoint, token,
                            os.path.abspath(ca_cert) if ca_cert else "")
    try:
        who = _api.whoami(config)
    except _api.ApiError as e:
        raise HerdError(f"herd api login failed: herd: {e.message}", e.returncode,
                        ["herd", "api", "login"]) from None
    _api.save_config(config)
    return who


def api_logout() -> None:
    """Back to local mode: removes the api_server section (config.yaml) as `herd api logout`."""
    try:
        os.unlink(_api.config_path())
    except FileNotFoundError:
        pass


def api_info() -> Optional[Dict[str, str]]:
    """The server the calls go to ({"endpoint", "ca_cert"}), or None in local mode."""
    config = _process.api_config()
    if config is None:
        return None
    return {"endpoint": config.endpoint, "ca_cert": config.ca_cert}
