"""The one exception type of the SDK."""

from typing import Optional, Sequence


class HerdError(Exception):
    """A herd CLI call failed (or could not be made).

    Attributes:
      message: what went wrong, from the CLI's stderr.
      returncode: the CLI's exit status; 127 when the binary could not be started.
      command: the argv that was run.
      stderr: the CLI's stderr (its last 64 KiB at most).
    """

    def __init__(self, message: str, returncode: Optional[int] = None,
                 command: Sequence[str] = (), stderr: str = ""):
        super().__init__(message)
        self.message = message
        self.returncode = returncode
        self.command = list(command)
        self.stderr = stderr

    def __str__(self) -> str:
        if self.returncode is None:
            return self.message
        return f"{self.message} (exit code {self.returncode})"
