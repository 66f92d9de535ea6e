"""herd's Python SDK: SkyPilot's `sky` calls on top of the herd CLI.

    import herd
    task = herd.Task(name="train", resources=herd.Resources(cpus=4, accelerators="L4:4"),
                     num_nodes=2, setup=["pip install -r requirements.txt"],
                     run=["torchrun ... main.py"], workdir=".")
    job_id, handle = herd.stream_and_get(herd.launch(task, cluster_name="mingpt"))
    exit_code = herd.tail_logs("mingpt", job_id, follow=True)
    herd.down("mingpt")

In local mode every call runs the CLI named by $HERD (default: `herd` on PATH). When a team API
server is configured (herd.api_login(...) or `herd api login`: <herd home>/config.yaml, or
HERD_API_SERVER / HERD_API_TOKEN / HERD_API_CA_CERT; HERD_API_SERVER=local forces local mode),
every call goes to the server over HTTPS instead, with no CLI process, and returns the same
values. Needs nothing beyond the standard library. Failures raise HerdError with the CLI's
message and exit code.

SkyPilot scripts (`import sky`) run unchanged through the opt-in compatibility module: run them
with `python3 -m herd.sky_shim script.py ARGS...`, or put the directory that
`python3 -m herd.sky_shim --path` prints on PYTHONPATH. It is never used when a real SkyPilot
(`sky`) is installed: that one is imported, with a warning.
"""

from herd.errors import HerdError
from herd.sdk import (JOB_CANCELLED, JOB_FAILED, JOB_NOT_FINISHED, JOB_NOT_FOUND, JOB_SUCCEEDED,
                      TERMINAL_JOB_STATES, ClusterHandle, Request, cancel, down, exec, get,
                      api_info, api_login, api_logout, job_status, jobs, jobs_cancel, jobs_launch,
                      jobs_queue, launch, queue, start, status, stop, stream_and_get, tail_logs)
from herd.task import Resources, Task

__all__ = [
    "HerdError", "Task", "Resources", "Request", "ClusterHandle", "launch", "exec",
    "stream_and_get", "get", "tail_logs", "queue", "job_status", "status", "cancel", "down",
    "stop", "start", "jobs", "jobs_launch", "jobs_queue", "jobs_cancel", "api_login",
    "api_logout", "api_info", "JOB_SUCCEEDED", "JOB_FAILED", "JOB_NOT_FINISHED", "JOB_NOT_FOUND",
    "JOB_CANCELLED", "TERMINAL_JOB_STATES"
]
