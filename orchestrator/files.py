"""Files specctl writes and reads back. Writes are atomic and user-only.

The one place where a name becomes a path (`inside`), and where files read back from disk are
read (`read_text`): bounded, regular files only, so a FIFO, a device or a huge file is a clear
error, never a hang; what fails validation is set aside (`set_aside`), never trusted.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

from specctl.orchestrator.errors import StateError


def write_atomic(path: Path, text: str) -> None:
    """Write via a temp file in the same dir, fsync, rename; mode 0600. Never a half file."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise StateError(f"cannot write {path}: {exc.strerror or exc}; free some disk space or "
                         "set SPECCTL_STATE_DIR to a writable place") from None
