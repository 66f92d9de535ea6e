"""`import sky` for SkyPilot SDK scripts, on herd (opt-in: see herd/sky_shim.py).

This directory's parent is put on sys.path only by `python3 -m herd.sky_shim` or by a user who
adds it to PYTHONPATH. Even then a real SkyPilot wins: when another `sky` package is importable
from the rest of sys.path, that one is loaded in this module's place (with a warning), so a
SkyPilot install is never shadowed.

The calls are herd's SDK under SkyPilot's names: Task, Resources, launch (a request),
stream_and_get / get ((job_id, handle) for launch and exec), tail_logs (the job's exit code as
SkyPilot's), exec, status, queue, job_status, cancel, down, stop, start, and jobs.launch /
jobs.queue / jobs.cancel. They run the herd CLI, or go to herd's team API server when one is
configured (`herd api login`).
"""

import importlib.machinery
import importlib.util
import os
import sys
import warnings

_SHIM_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _real_skypilot():
    """The spec of a `sky` package on sys.path other than this one, or None."""
    paths = []
    for entry in sys.path:
        try:
            if os.path.abspath(entry or os.getcwd()) == _SHIM_ROOT:
                continue
        except (TypeError, ValueError):
            continue
        paths.append(entry)
    try:
        return importlib.machinery.PathFinder.find_spec("sky", paths)
    except (ImportError, ValueError):
        return None


_real = None if os.environ.get("HERD_SKY_SHIM_FORCE") == "1" else _real_skypilot()
if _real is not None and _real.loader is not None:
    warnings.warn(f"herd's `sky` compatibility module is on the path, but SkyPilot is installed "
                  f"({_real.origin}): using SkyPilot", RuntimeWarning, stacklevel=2)
    _module = importlib.util.module_from_spec(_real)
    sys.modules[__name__] = _module
    _real.loader.exec_module(_module)
else:
    try:
        import herd as _herd
    except ImportError:  # the shim of a checkout: herd is the package around this directory
        sys.path.append(os.path.dirname(os.path.dirname(_SHIM_ROOT)))
        import herd as _herd

    from herd import (JOB_CANCELLED, JOB_FAILED, JOB_NOT_FINISHED, JOB_NOT_FOUND,  # noqa: F401
                      JOB_SUCCEEDED, ClusterHandle, HerdError, Request, Resources, Task,
                      api_info, api_login, api_logout, cancel, down, exec, get, job_status, jobs,
                      launch, queue, start, status, stop, stream_and_get, tail_logs)

    # SkyPilot's names for the exception and the job states.
    SkyError = HerdError
    __herd_shim__ = True
    __version__ = f"herd-shim-{getattr(_herd, '__version__', '0')}"

    __all__ = [
        "Task", "Resources", "launch", "exec", "stream_and_get", "get", "tail_logs", "down",
        "stop", "start", "status", "queue", "job_status", "cancel", "jobs", "api_login",
        "api_logout", "api_info", "Request", "ClusterHandle", "HerdError", "SkyError"
    ]
