"""Runs a SkyPilot SDK script (`import sky`) on herd, opting in to herd's `sky` module:

    python3 -m herd.sky_shim train.py [ARGS...]   # run the script with `import sky` -> herd
    python3 -m herd.sky_shim --path               # the directory to put on PYTHONPATH instead

The `sky` module is never used in place of a real SkyPilot: when a `sky` package is importable
without the shim, the script runs with that one and a warning says so (and the shim's own
__init__ defers the same way when its directory was added to PYTHONPATH by hand).
"""

import importlib.util
import os
import runpy
import sys
import warnings

SHIM_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "sky_compat")


def real_skypilot_origin():
    """Where `import sky` would load SkyPilot from without the shim, or None."""
    saved = list(sys.path)
    try:
        sys.path[:] = [p for p in sys.path
                       if os.path.abspath(p or os.getcwd()) != SHIM_PATH]
        spec = importlib.util.find_spec("sky")
    except (ImportError, ValueError):
        spec = None
    finally:
        sys.path[:] = saved
    if spec is None or getattr(sys.modules.get("sky"), "__herd_shim__", False):
        return None
    return spec.origin or "sky"


def enable():
    """Makes `import sky` import herd's compatibility module, unless SkyPilot is installed
    (then it warns and leaves the path alone). Returns whether the shim is in use."""
    origin = real_skypilot_origin()
    if origin is not None:
        warnings.warn(f"SkyPilot is installed ({origin}): `import sky` uses it, not herd's "
                      "compatibility module", RuntimeWarning, stacklevel=2)
        return False
    if SHIM_PATH not in sys.path:
        sys.path.insert(0, SHIM_PATH)
    return True


def main(argv):
    if argv[:1] == ["--path"]:
        print(SHIM_PATH)
        return 0
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__.strip(), file=sys.stderr)
        return 0 if argv else 2
    script = argv[0]
    enable()
    # As `python3 script.py`: the script's directory first on the path, its argv.
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    sys.argv = list(argv)
    runpy.run_path(script, run_name="__main__")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
