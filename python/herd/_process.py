"""Running the herd CLI: finding the binary, capturing or streaming its output, and turning its
failures into HerdError."""

import codecs
import os
import signal
import subprocess
import sys
import threading
from typing import IO, Any, List, Optional, Sequence

from herd import _api
from herd.errors import HerdError

# How much of a command's stderr a HerdError keeps (launch progress can be long).
STDERR_KEPT_BYTES = 64 * 1024
# After Ctrl-C, how long a streaming CLI child gets to detach cleanly before it is killed. The
# CLI itself only closes a connection then, well within this.
INTERRUPT_GRACE_S = 5.0
_READ_CHUNK = 64 * 1024


def binary() -> str:
    """The herd CLI: $HERD, else `herd` on PATH. Read on every call, so tests can point it at
    a fake."""
    return os.environ.get("HERD") or "herd"


def api_config() -> Optional[_api.ApiConfig]:
    """The API server the calls go to, or None (local mode: the CLI runs them). A config file
    the SDK cannot read is a HerdError, as it is an error of every CLI command."""
    try:
        return _api.load_config()
    except HerdError as e:
        raise HerdError(f"herd: {e.message}", e.returncode or 2) from None


# The commands whose second word is the cluster they act on (what the CLI's Command::Cluster()
# gives the server, which checks the cluster is the user's).
_CLUSTER_VERBS = ("exec", "queue", "logs", "cancel", "down", "stop", "start", "autostop", "nodes")


def _cluster_of(args: Sequence[str]) -> str:
    if args and args[0] == "launch" and "-c" in args:
        i = list(args).index("-c")
        return args[i + 1] if i + 1 < len(args) else ""
    if len(args) > 1 and args[0] in _CLUSTER_VERBS and not args[1].startswith("-"):
        return args[1]
    return ""


class RemoteProcess:
    """A command run on the API server, looking like the Popen of the CLI that would run it
    locally: its stdout and stderr come on pipes (the frames' bytes; a failure of the exchange
    is a "herd: ..." line on stderr, as the CLI prints it) and its exit code is the command's
    (or the CLI's for that failure). send_signal(SIGINT) closes the stream, which interrupts the
    command on the server as Ctrl-C does."""

    def __init__(self, config: _api.ApiConfig, args: Sequence[str], task: Any = None,
                 cluster: Optional[str] = None):
        self.args = ["herd", *args]
        self.returncode: Optional[int] = None
        self._call = _api.RunCall(list(args), _cluster_of(args) if cluster is None else cluster,
                                  task)
        self._config = config
        out_r, self._out_w = os.pipe()
        err_r, self._err_w = os.pipe()
        self.stdout = os.fdopen(out_r, "rb", buffering=0)
        self.stderr = os.fdopen(err_r, "rb", buffering=0)
        self._stop = threading.Event()
        self._conn: Any = None
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _write(self, fd: int, data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]

    def _on_connection(self, conn: Any) -> None:
        self._conn = conn
        if self._stop.is_set():
            conn.close()

    def _run(self) -> None:
        code = 1
        try:
            code = _api.run(self._config, self._call,
                            lambda tag, data: self._write(self._out_w if tag == "O" else
                                                          self._err_w, data),
                            self._stop.is_set, self._on_connection)
            if self._stop.is_set():
                cluster = self._call.cluster
                self._write(self._err_w, (
                    "\nDetached; the command was interrupted on the server (a job keeps "
                    "running)." + (f" Reattach with: herd logs {cluster}" if cluster else "") +
                    "\n").encode())
        except _api.ApiError as e:
            self._write(self._err_w, f"herd: {e.message}\n".encode())
            code = e.returncode
        except BaseException as e:  # noqa: B036 (the pipes must close, the code must be set)
            self._write(self._err_w, f"herd: {type(e).__name__}: {e}\n".encode())
            code = 1
        finally:
            os.close(self._out_w)
            os.close(self._err_w)
            self.returncode = code
            self._done.set()

    def poll(self) -> Optional[int]:
        return self.returncode if self._done.is_set() else None

    def wait(self, timeout: Optional[float] = None) -> int:
        if not self._done.wait(timeout):
            raise subprocess.TimeoutExpired(self.args, timeout)
        assert self.returncode is not None
        return self.returncode

    def send_signal(self, sig: int) -> None:
        self._stop.set()
        conn = self._conn
        if conn is not None:
            try:
                conn.close()
            except OSError:
                pass

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


def start(args: Sequence[str], task: Any = None, local_args: Optional[Sequence[str]] = None):
    """Starts `herd ARGS`: on the API server when one is configured (a RemoteProcess; task, a
    herd.Task, goes in the request), else the CLI with its stdout and stderr on pipes and no
    stdin (nothing may prompt), with local_args when given (the task in a file)."""
    config = api_config()
    if config is not None:
        return RemoteProcess(config, args, task)
    argv = [binary(), *(args if local_args is None else local_args)]
    try:
        return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE)
    except OSError as e:
        raise HerdError(f"cannot run the herd CLI {argv[0]!r}: {e.strerror or e}; set HERD to "
                        "its path or put it on PATH", 127, argv) from None


def last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else ""


def failure(argv: Sequence[str], returncode: int, stderr: str, streamed: bool) -> HerdError:
    """The error for a failed call. When stderr was already shown to the user, the message is
    its last line (where the CLI puts the error); otherwise all of it."""
    verb = argv[1] if len(argv) > 1 else "command"
    detail = last_line(stderr) if streamed else stderr.strip()
    if not detail:
        detail = (f"killed by signal {-returncode}" if returncode < 0 else "no error message")
    return HerdError(f"herd {verb} failed: {detail}", returncode, argv, stderr)


class _Discard:
    def write(self, text: str) -> None:
        pass

    def flush(self) -> None:
        pass


class Pump:
    """Reads a pipe to its end on a thread: keeps its bytes (all of them, or only the last
    `keep` bytes) and, once `attach`ed to a text stream, also copies them there as they come,
    starting with what arrived before."""

    def __init__(self, pipe: IO[bytes], keep: Optional[int] = None,
                 sink: Optional[IO[str]] = None):
        self._pipe = pipe
        self._keep = keep
        self._chunks: List[bytes] = []
        self._size = 0
        # Given here, the sink sees every byte: with keep=0 nothing that came before an attach
        # would be left to copy.
        self._sink: Optional[IO[str]] = sink
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def attach(self, sink: IO[str]) -> None:
        with self._lock:
            if self._sink is None:
                self._sink = sink
                for chunk in self._chunks:
                    self._write(chunk)

    def _write(self, chunk: bytes) -> None:
        """Copies chunk to the sink. Never raises: the pipe must be drained to its end, or the
        CLI would block on a full pipe."""
        assert self._sink is not None
        text = self._decoder.decode(chunk)
        if not text:
            return
        try:
            try:
                self._sink.write(text)
            except UnicodeEncodeError:  # e.g. an ASCII-only terminal and a log with UTF-8
                encoding = getattr(self._sink, "encoding", None) or "ascii"
                self._sink.write(text.encode(encoding, "replace").decode(encoding))
            self._sink.flush()
        except (OSError, ValueError):  # closed or broken (`| head`): stop copying, keep reading
            self._sink = _Discard()

    def _run(self) -> None:
        fd = self._pipe.fileno()
        while True:
            # os.read returns what is there, so progress lines ending in \r show at once.
            chunk = os.read(fd, _READ_CHUNK)
            if not chunk:
                break
            with self._lock:
                self._chunks.append(chunk)
                self._size += len(chunk)
                if self._sink is not None:
                    self._write(chunk)
                while self._keep is not None and self._size > self._keep and len(
                        self._chunks) > 1:
                    self._size -= len(self._chunks.pop(0))
        self._pipe.close()

    def join(self) -> None:
        self._thread.join()

    def text(self) -> str:
        with self._lock:
            data = b"".join(self._chunks)
        if self._keep is not None and len(data) > self._keep:
            data = data[len(data) - self._keep:]
        return data.decode("utf-8", errors="replace")


def interrupt(proc: Any) -> None:
    """After Ctrl-C: lets the CLI child detach (it normally got the SIGINT from the terminal too),
    then kills it if it is still there."""
    try:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
        proc.wait(timeout=INTERRUPT_GRACE_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def run_captured(args: Sequence[str], task: Any = None,
                 local_args: Optional[Sequence[str]] = None) -> str:
    """Runs `herd ARGS` to its end and returns its stdout; raises HerdError when it fails.
    task and local_args as for start."""
    proc = start(args, task, local_args)
    out = Pump(proc.stdout)
    err = Pump(proc.stderr, keep=STDERR_KEPT_BYTES)
    try:
        out.join()
        err.join()
        returncode = proc.wait()
    except KeyboardInterrupt:
        interrupt(proc)
        raise
    if returncode != 0:
        raise failure(proc.args, returncode, err.text(), streamed=False)
    return out.text()


def run_streamed(args: Sequence[str], ok_codes: Sequence[int]) -> int:
    """Runs `herd ARGS` with its stdout copied to sys.stdout and its stderr to sys.stderr as it
    comes; returns its exit code when it is one of ok_codes, else raises HerdError."""
    proc = start(args)
    # Looked up now, not at import: callers (and tests) may have replaced them.
    out = Pump(proc.stdout, keep=0, sink=sys.stdout)
    err = Pump(proc.stderr, keep=STDERR_KEPT_BYTES, sink=sys.stderr)
    try:
        out.join()
        err.join()
        returncode = proc.wait()
    except KeyboardInterrupt:
        interrupt(proc)
        raise
    if returncode not in ok_codes:
        raise failure(proc.args, returncode, err.text(), streamed=True)
    return returncode
