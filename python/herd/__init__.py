"""herd's Python SDK: SkyPilot's `sky` calls on top of the herd CLI.

    import herd
    task = herd.Task(name="train", resources=herd.Resources(cpus=4, accelerators="L4:4"),
                     num_nodes=2, setup=["pip install -r requirements.txt"],
                     run=["torchrun ... main.py"], workdir=".")
    job_id, handle = herd.stream_and_get(herd.launch(task, cluster_name="mingpt"))
    exit_code = herd.tail_logs("mingpt", job_id, follow=True)
    herd.down("mingpt")

Every call runs the CLI named by $HERD (default: `herd` on PATH) and needs nothing beyond the
standard library. Failures raise HerdError with the CLI's message and exit code.
"""

from herd.errors import HerdError
from herd.sdk import (JOB_CANCELLED, JOB_FAILED, JOB_NOT_FINISHED, JOB_NOT_FOUND, JOB_SUCCEEDED,
                      TERMINAL_JOB_STATES, ClusterHandle, Request, cancel, down, exec, get,
                      job_status, launch, queue, start, status, stop, stream_and_get, tail_logs)
from herd.task import Resources, Task

__all__ = [
    "HerdError", "Task", "Resources", "Request", "ClusterHandle", "launch", "exec",
    "stream_and_get", "get", "tail_logs", "queue", "job_status", "status", "cancel", "down",
    "stop", "start", "JOB_SUCCEEDED", "JOB_FAILED", "JOB_NOT_FINISHED", "JOB_NOT_FOUND",
    "JOB_CANCELLED", "TERMINAL_JOB_STATES"
]
