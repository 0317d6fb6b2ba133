"""One model's kept traffic on disk (measure/traffic/store.py keeps it): the file's format, a line
added per request, compaction past its bounds, and the file read back.

The file is JSON lines: a head (`{"version": 2, "model", "keep", "skipped"}`), then a line per
request, added at the end (`add` writes one line, not the file: a gateway keeps every request),
each an `Request` (the allow-list traffic.py copies from a body). Bounds: a request takes at
most MAX_REQUEST bytes as kept (256 KiB, about 64k tokens of text); a larger one is not kept
(its text cut would replay another prompt) but counted as `skipped` (a `{"skipped":1}` line
until the next compaction). The file never passes MAX_FILE bytes (8 MiB), nor its keep (the
profile's N, up to 10,000) by more than an eighth (`margin`): a line that would pass either
compacts it first, rewritten whole and atomically (temp file, fsync, rename) with its newest
`keep` requests within 7/8 of MAX_FILE, the oldest going first. A reader sees the newest `keep`
(the last N requests). So a request costs a line's write, and a compaction (a rewrite of the
file) comes once per keep/8 requests or MAX_FILE/8 bytes at most.

The caller holds traffic.locked() around each call. A file read back is untrusted input: every
line validated by the models it was written with (on every read, and by a writer the first time
it sees the file or after another process changed it); one that fails is set aside as
`MODEL.jsonl.corrupt` and said in one line. A last line torn by a crash is left out and the
file compacted before the next line is added.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, field_validator

from specctl.orchestrator.errors import StateError, first_problem
from specctl.orchestrator.files import (
    NAME_PATTERN,
    check_owned,
    open_private,
    read_back,
    write_atomic,
)
from specctl.orchestrator.measure.results.record import Record

MAX_REQUEST = 256 << 10
MAX_FILE = 8 << 20
MAX_KEEP = 10_000  # the profile's keep_traffic is at most this
MAX_MESSAGES = 512
MAX_TOKENS = 1 << 24
MAX_SKIPPED = 1 << 40
MARGIN = 8  # the file may hold keep + keep/8 lines before it is compacted to keep
SLACK = 8  # compacted, it holds at most MAX_FILE less an eighth
SKIP = '{"skipped":1}'  # a request not kept (over MAX_REQUEST), counted
Count = Annotated[int, Field(ge=0, le=MAX_TOKENS)]


class _Model(Record):
    model_config = ConfigDict(strict=True)  # over Record's: types as written, no coercion


class Message(_Model):
    role: Literal["system", "user", "assistant"]
    content: str = Field(max_length=MAX_REQUEST)


class Params(_Model):
    """The sampling parameters kept: each a valid value or absent."""

    temperature: float | None = Field(None, ge=0, le=100)
    top_p: float | None = Field(None, ge=0, le=1)
    max_tokens: int | None = Field(None, ge=1, le=MAX_TOKENS)
    seed: int | None = Field(None, ge=-(1 << 63), lt=1 << 64)
    stop: str | list[Annotated[str, Field(max_length=256)]] | None = Field(
        None, max_length=256)
    n: int | None = Field(None, ge=1, le=128)

    @field_validator("temperature", "top_p", mode="before")
    @classmethod
    def _number(cls, value: Any) -> Any:
        """JSON writes 1 for 1.0: a whole number is a number here (never a bool)."""
        return float(value) if isinstance(value, int) and not isinstance(value, bool) else value


class Request(_Model):
    """One kept request."""

    at: float = Field(ge=0)  # seconds since the epoch (UTC)
    kind: str = Field(pattern=r"^[a-z0-9_-]{1,32}$")  # the router's
    tokens_in: Count
    tokens_out: Count
    messages: list[Message] = Field(min_length=1, max_length=MAX_MESSAGES)
    params: Params = Params()

    @field_validator("at", mode="before")
    @classmethod
    def _number(cls, value: Any) -> Any:
        return float(value) if isinstance(value, int) and not isinstance(value, bool) else value


class Head(_Model):
    """A model's file's first line."""

    version: Literal[2] = 2
    model: str = Field(pattern=NAME_PATTERN)
    keep: int = Field(ge=1, le=MAX_KEEP)  # the profile's keep_traffic when it was written
    skipped: int = Field(0, ge=0, le=MAX_SKIPPED)  # requests over MAX_REQUEST, not kept


class Kept(_Model):
    """A model's kept requests, as read (the newest `keep` of its file)."""

    model: str = Field(pattern=NAME_PATTERN)
    skipped: int = Field(0, ge=0, le=MAX_SKIPPED)  # requests over MAX_REQUEST, not kept
    requests: list[Request] = Field(default_factory=list, max_length=MAX_KEEP)


def margin(keep: int) -> int:
    """How many lines past `keep` the file may hold before it is compacted."""
    return max(1, keep // MARGIN)


@dataclass(frozen=True)
class _Seen:
    """The file as this process last wrote or read it: its identity, and what a line added
    needs to know (its lines after the head, the head's keep)."""

    ino: int
    size: int
    mtime_ns: int
    lines: int
    keep: int


_SEEN: dict[Path, _Seen] = {}  # under traffic.locked()


def add(path: Path, model: str, keep: int, line: str) -> str | None:
    """`line` added at the end of the file where it is as this process left it (or, read and
    found valid, as another left it) and within its bounds; else the file compacted with it
    (new, torn, past its bounds or its keep changed; or corrupt: set aside, said in the note
    returned, and a new file begun)."""
    seen, parsed, note = _current(path), None, None
    if seen is None:
        try:
            parsed = read(path, model)
        except StateError as exc:
            note = str(exc)
        if parsed is not None and not parsed.torn:
            seen = _remember(path, parsed)
    if seen is not None and seen.keep == keep and seen.lines < keep + margin(keep) \
            and seen.size + len(line.encode()) + 1 <= MAX_FILE:
        _append(path, seen, line)
        return note
    if parsed is None and seen is not None:
        try:
            parsed = read(path, model)
        except StateError as exc:
            note = str(exc)
    _compact(path, parsed or Parsed(Head(model=model, keep=keep)), keep, line)
    return note


def _current(path: Path) -> _Seen | None:
    """What this process knows of the file, where it is still so (None: unknown, changed by
    another process, or gone)."""
    seen = _SEEN.get(path)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        _SEEN.pop(path, None)
        return None
    if seen is None or (st.st_ino, st.st_size, st.st_mtime_ns) != (seen.ino, seen.size,
                                                                     seen.mtime_ns):
        return None
    return seen


def _append(path: Path, seen: _Seen, line: str) -> None:
    """`line` at the end of the file (0600, ours, a regular file, not a link)."""
    data = (line + "\n").encode()
    fd = open_private(path)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise StateError(f"{path} is not a file; left alone")
        check_owned(path, st)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        st = os.fstat(fd)
    finally:
        os.close(fd)
    _SEEN[path] = _Seen(st.st_ino, st.st_size, st.st_mtime_ns, seen.lines + 1, seen.keep)


def _compact(path: Path, parsed: Parsed, keep: int, line: str) -> None:
    """The file rewritten whole (atomically: temp file, fsync, rename) with `line`: its newest
    `keep` requests that fit in 7/8 of MAX_FILE, the skipped ones counted in its head."""
    skipped = parsed.head.skipped + parsed.skips + (line == SKIP)
    head = Head(model=parsed.head.model, keep=keep, skipped=min(skipped, MAX_SKIPPED))
    top = head.model_dump_json()
    texts = [*parsed.texts, *([] if line == SKIP else [line])][-keep:]
    texts = _fit(texts, MAX_FILE - MAX_FILE // SLACK - len(top) - 1)
    write_atomic(path, "".join(f"{t}\n" for t in [top, *texts]))
    st = os.stat(path)
    _SEEN[path] = _Seen(st.st_ino, st.st_size, st.st_mtime_ns, len(texts), keep)


def _remember(path: Path, parsed: Parsed) -> _Seen:
    st = os.stat(path)
    found = _SEEN[path] = _Seen(st.st_ino, st.st_size, st.st_mtime_ns,
                                len(parsed.texts) + parsed.skips, parsed.head.keep)
    return found


def _fit(texts: list[str], room: int) -> list[str]:
    """The newest of `texts` whose lines fit `room` bytes (the oldest go first)."""
    total, start = sum(len(t.encode()) + 1 for t in texts), 0
    while total > room and start < len(texts) - 1:
        total -= len(texts[start].encode()) + 1
        start += 1
    return texts[start:]


@dataclass
class Parsed:
    """A file as read: its head, each kept request's line (as written: not dumped again), the
    skipped requests' lines, and whether its last line was torn (a crash while it was added:
    left out, and the file compacted before another is added)."""

    head: Head
    texts: list[str] = field(default_factory=list)
    entries: list[Request] = field(default_factory=list)
    skips: int = 0
    torn: bool = False

    def kept(self) -> Kept:
        return Kept(model=self.head.model, skipped=min(self.head.skipped + self.skips,
                                                       MAX_SKIPPED),
                    requests=self.entries[-self.head.keep:])


def _parse(text: str, model: str) -> Parsed:
    """The file's lines, each validated (ValueError: the file is corrupt)."""
    lines = text.split("\n")
    torn = lines.pop() != ""  # after the last newline: empty, or a line torn by a crash
    if not lines:
        raise ValueError("it has no head line")
    head = Head.model_validate_json(lines[0], strict=True)
    if head.model != model:
        raise ValueError(f"it holds the traffic of {head.model!r}")
    if len(lines) - 1 > head.keep + margin(head.keep):
        raise ValueError(f"it holds {len(lines) - 1} lines for a keep of {head.keep}")
    found = Parsed(head, torn=torn)
    for n, line in enumerate(lines[1:], 2):
        if line == SKIP:
            found.skips += 1
            continue
        try:
            found.entries.append(Request.model_validate_json(line, strict=True))
        except ValueError as exc:
            raise ValueError(f"line {n}: {first_problem(exc)}") from None
        found.texts.append(line)
    return found


def read(path: Path, model: str) -> Parsed | None:
    """The file read and validated (None: there is none); one that fails is set aside and
    said in one line (StateError)."""
    return read_back(path, lambda text: _parse(text, model), "kept traffic",
                     "It starts again from the next request", limit=MAX_FILE + MAX_REQUEST)


def load_path(path: Path, model: str) -> Kept | None:
    """A model's kept requests (None when there are none); a file that fails validation is
    set aside and said in one line (StateError)."""
    found = read(path, model)
    return None if found is None else found.kept()
