"""Files specctl writes and reads back. Writes are atomic and user-only.

The one place where a name becomes a path (`inside`), and where files read back from disk are
read (`read_text`): bounded, regular UTF-8 files only, so a FIFO, a device or a huge file is a
clear error, never a hang. Files specctl wrote are read back through `read_back`, validated by
the same model as fresh values; what fails is set aside (`set_aside`) and reported, never trusted.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import os
import re
import stat
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

from specctl.orchestrator.errors import (
    BadPathError,
    NameRefusedError,
    ReadOnlyError,
    StateError,
    first_problem,
)

T = TypeVar("T")
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"
NAME_RULE = "letters, digits, '.', '_' and '-', starting with a letter or digit, 64 at most"
_NAME = re.compile(NAME_PATTERN)
_AFFIX = re.compile(r"[A-Za-z0-9._-]*")
MAX_BYTES = 4 << 20  # specctl's files, profiles and recorded machines are KBs


class UnreadableError(StateError):
    """A file that is not a regular, bounded, UTF-8 text file."""


class NotOursError(StateError):
    """A file specctl would trust (state, a handoff) that the user running it does not own."""


def _euid() -> int | None:
    return os.geteuid() if hasattr(os, "geteuid") else None


def check_owned(path: Path, st: os.stat_result) -> None:
    """Trust a file only when it and its folder belong to the user running specctl: a state
    file another user could write would direct our signals and our API keys."""
    euid = _euid()
    if euid is None:
        return
    try:
        folder = os.stat(path.parent)
    except (OSError, ValueError) as exc:
        raise NotOursError(f"{path.parent}: {getattr(exc, 'strerror', None) or exc}") from None
    for what, owner in ((path, st.st_uid), (path.parent, folder.st_uid)):
        if owner != euid:
            raise NotOursError(f"{what} belongs to uid {owner}, not to you (uid {euid}); "
                               "specctl trusts only its own files: check SPECCTL_STATE_DIR")


def remove_own(path: Path, folder: Path) -> None:
    """Remove `path` only if it is a regular file (not a link) of this user directly in
    `folder`; anything else is refused, never removed."""
    try:
        st = os.lstat(path)
        same = os.path.realpath(path.parent) == os.path.realpath(folder)
    except (OSError, ValueError) as exc:
        raise StateError(f"{path}: {getattr(exc, 'strerror', None) or exc}") from None
    if not same or not stat.S_ISREG(st.st_mode):
        raise StateError(f"{path} is not a file of specctl's in {folder}; left alone")
    check_owned(path, st)
    os.unlink(path)


def private_dir(folder: Path) -> Path:
    """`folder`, made if missing, readable by this user only: one made earlier with looser
    modes (755, 777) is tightened to 700 when it is ours (logs and state are private)."""
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    st = os.stat(folder)
    if st.st_mode & 0o077 and st.st_uid == _euid():
        os.chmod(folder, 0o700)
    return folder


def open_private(path: Path) -> int:
    """A file descriptor to append to `path` (a log), created 0600, tightened if looser; a
    link at the path is refused (O_NOFOLLOW)."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_CLOEXEC", 0)
                 | getattr(os, "O_NOFOLLOW", 0), 0o600)
    if os.fstat(fd).st_mode & 0o077:
        os.fchmod(fd, 0o600)
    return fd


def write_atomic(path: Path, text: str) -> None:
    """Write via a temp file in the same dir, fsync, rename; mode 0600. Never a half file."""
    try:
        private_dir(path.parent)
    except OSError as exc:
        if exc.errno == errno.EROFS:
            raise ReadOnlyError(path.parent) from None
        raise StateError(f"cannot write {path}: {exc.strerror or exc}; set SPECCTL_STATE_DIR "
                         "to a writable place") from None
    _replace(path, text.encode("utf-8"), "free some disk space or set SPECCTL_STATE_DIR to a "
             "writable place")


def _replace(path: Path, data: bytes, then: str) -> None:
    """`data` into a temp file beside `path`, fsync'd, renamed over it (mode 0600)."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if exc.errno == errno.EROFS:
            raise ReadOnlyError(path) from None
        raise StateError(f"cannot write {path}: {exc.strerror or exc}; {then}") from None


def output_path(text: str | os.PathLike[str]) -> Path:
    """A file the user named for specctl to write (`doctor --record`, `bench --output`,
    `--plot`), checked before any work is done for it: its folder exists (nothing is made for
    a typo), the name is not a folder's (a trailing '/', '.', a directory) and what is there
    already is a regular file (a FIFO or device would hang or swallow it). One line if not."""
    raw = os.fspath(text)
    if not raw.strip():
        raise BadPathError("cannot write to an empty path; name a file")
    if raw.endswith(("/", os.sep)) or Path(raw).name in ("", ".", ".."):
        raise BadPathError(f"cannot write {raw!r}: it names a folder; name a file in it")
    path = Path(raw)
    try:
        folder = os.stat(path.parent)
    except FileNotFoundError:
        raise BadPathError(f"cannot write {path}: the folder {path.parent} does not exist; "
                         "create it first or name another") from None
    except (OSError, ValueError) as exc:
        raise BadPathError(f"cannot write {path}: {getattr(exc, 'strerror', None) or exc}"
                         ) from None
    if not stat.S_ISDIR(folder.st_mode):
        raise BadPathError(f"cannot write {path}: {path.parent} is {_kind(folder.st_mode)}, "
                         "not a folder")
    try:
        st: os.stat_result | None = os.stat(path)
    except FileNotFoundError:
        st = None  # a new file (or a dangling link, replaced by the file)
    except (OSError, ValueError) as exc:
        raise BadPathError(f"cannot write {path}: {getattr(exc, 'strerror', None) or exc}"
                         ) from None
    if st is not None and not stat.S_ISREG(st.st_mode):
        raise BadPathError(f"cannot write {path}: it is {_kind(st.st_mode)}; name a file")
    return path


def write_output(path: str | os.PathLike[str], data: str | bytes) -> Path:
    """A file the user asked for, checked as `output_path` does, written atomically into its
    existing folder (whose mode is left as it is: it is the user's, not specctl's)."""
    checked = output_path(path)
    _replace(checked, data.encode("utf-8") if isinstance(data, str) else data,
             "check the folder's permissions and free space")
    return checked


def expand_user(path: str | os.PathLike[str]) -> Path:
    """`path` with a leading `~` or `~user` expanded as a shell does it: left as written when
    that user (or a home) does not exist, never an exception (`~nosuchuser/x.gguf` in a
    profile is a path that is not found, said as such)."""
    try:
        return Path(path).expanduser()
    except RuntimeError:  # pathlib: "Could not determine home directory."
        return Path(path)


def check_name(name: str, what: str = "name") -> str:
    """`name` if it is a strict identifier (a profile, a run, a tuning key), else refused."""
    if not _NAME.fullmatch(name):
        raise NameRefusedError(f"{what} {name!r} is not a valid name ({NAME_RULE})")
    return name


def inside(folder: Path, name: str, suffix: str = "", what: str = "name",
           prefix: str = "") -> Path:
    """The path of `prefix` + `name` + `suffix` in `folder`; refused unless `name` is a strict
    identifier and the path stays inside `folder` (symlinks followed)."""
    if not _AFFIX.fullmatch(suffix) or not _AFFIX.fullmatch(prefix):
        raise ValueError(f"affix {prefix!r} {suffix!r}")  # ours, never the user's: a bug
    path = folder / f"{prefix}{check_name(name, what)}{suffix}"
    try:  # realpath: a symlink loop is no error here
        real, base = Path(os.path.realpath(path)), os.path.realpath(folder)
    except ValueError:  # a NUL, or text no file system name can hold
        raise NameRefusedError(f"{str(folder)!r} cannot be a folder") from None
    if path.parent != folder or not real.is_relative_to(base):
        raise NameRefusedError(f"{what} {name!r} leads outside {folder}")
    return path


MAX_DEPTH = 12  # folders below a models dir (the HF cache's snapshots are 4 deep)
MAX_ENTRIES = 200_000  # entries looked at per models dir


def walk(folder: Path, max_depth: int = MAX_DEPTH, max_entries: int = MAX_ENTRIES
         ) -> Iterator[tuple[Path, list[os.DirEntry[str]]]]:
    """Each folder under `folder` (itself first; links to folders not followed) with its
    entries, sorted: at most `max_depth` deep and `max_entries` in all, an unreadable folder
    skipped. A models dir 1500 levels deep or a huge one is walked so far, never into a
    RecursionError, a name too long or a hang."""
    pending, seen = [(folder, 0)], 0
    while pending and seen < max_entries:
        here, depth = pending.pop()
        try:
            with os.scandir(here) as it:
                entries = sorted(itertools.islice(it, max_entries - seen), key=lambda e: e.name)
        except (OSError, ValueError):
            continue
        seen += len(entries)
        yield here, entries
        if depth < max_depth:
            for entry in reversed(entries):
                with contextlib.suppress(OSError):
                    if entry.is_dir(follow_symlinks=False):
                        pending.append((Path(entry.path), depth + 1))


def is_file(entry: os.DirEntry[str]) -> bool:
    """A regular file, or a link to one (the HF cache links snapshots into blobs)."""
    try:
        return entry.is_file()
    except OSError:
        return False


def _kind(mode: int) -> str:
    for test, kind in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return kind
    return "a special file"


def read_text(path: Path, limit: int = MAX_BYTES, owned: bool = False) -> str:
    """A regular UTF-8 text file of at most `limit` bytes. FileNotFoundError when missing;
    UnreadableError (one line) for a directory, FIFO, device, huge or binary file: never a hang
    (the open does not block) and never an unbounded read. `owned`: a file specctl wrote,
    trusted only when it and its folder are the user's (NotOursError) and not a link."""
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    if owned:
        flags |= getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise
    except (OSError, ValueError) as exc:  # ValueError: a NUL in the path
        raise UnreadableError(f"{path!s}: {getattr(exc, 'strerror', None) or exc}") from None
    try:
        st = os.fstat(fd)
        mode = st.st_mode
        if not stat.S_ISREG(mode):
            raise UnreadableError(f"{path} is {_kind(mode)}, not a file")
        if owned:
            check_owned(path, st)
        data = os.read(fd, limit + 1)
        while len(data) <= limit and (more := os.read(fd, limit + 1 - len(data))):
            data += more
    except OSError as exc:
        raise UnreadableError(f"{path}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    if len(data) > limit:
        raise UnreadableError(f"{path} is larger than {limit >> 10} KB")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UnreadableError(f"{path} is not UTF-8 text (byte {exc.start})") from None


def set_aside(path: Path) -> Path | None:
    """Rename a file that failed validation to `NAME.corrupt` (kept for the user to look at)."""
    aside = path.with_name(f"{path.name}.corrupt")
    try:
        os.replace(path, aside)
    except OSError:
        return None
    return aside


def read_back(path: Path, parse: Callable[[str], T], what: str, then: str,
              limit: int = MAX_BYTES) -> T | None:
    """A file specctl wrote earlier, validated by `parse` (the model fresh values go through).
    None when there is none; one that fails is set aside and reported in one line (StateError),
    never trusted."""
    try:
        return parse(read_text(path, limit, owned=True))
    except FileNotFoundError:
        return None
    except NotOursError as exc:  # not ours to trust, nor to move
        raise StateError(f"{what} {exc}") from None
    except (UnreadableError, ValueError, RecursionError) as exc:  # JSON and pydantic errors
        why = str(exc).removeprefix(f"{path}").lstrip(": ") if isinstance(
            exc, UnreadableError) else first_problem(exc)
        aside = set_aside(path)
        where = f"moved it to {aside.name}" if aside else "it could not be moved aside"
        raise StateError(f"{what} {path} was unreadable ({why}); {where}. {then}") from None
