"""Running the herd CLI: finding the binary, capturing or streaming its output, and turning its
failures into HerdError."""

import codecs
import os
import signal
import subprocess
import sys
import threading
from typing import IO, List, Optional, Sequence

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


def start(args: Sequence[str]) -> subprocess.Popen:
    """Starts `herd ARGS` with its stdout and stderr on pipes and no stdin (nothing may
    prompt)."""
    argv = [binary(), *args]
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

    def __init__(self, pipe: IO[bytes], keep: Optional[int] = None):
        self._pipe = pipe
        self._keep = keep
        self._chunks: List[bytes] = []
        self._size = 0
        self._sink: Optional[IO[str]] = None
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


def interrupt(proc: subprocess.Popen) -> None:
    """After Ctrl-C: lets the CLI child detach (it normally got the SIGINT from the terminal too),
    then kills it if it is still there."""
    try:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
        proc.wait(timeout=INTERRUPT_GRACE_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def run_captured(args: Sequence[str]) -> str:
    """Runs `herd ARGS` to its end and returns its stdout; raises HerdError when it fails."""
    proc = start(args)
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
    out = Pump(proc.stdout, keep=0)
    err = Pump(proc.stderr, keep=STDERR_KEPT_BYTES)
    # Looked up now, not at import: callers (and tests) may have replaced them.
    out.attach(sys.stdout)
    err.attach(sys.stderr)
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
