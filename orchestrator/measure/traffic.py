"""The user's own traffic: the last N requests to each model, kept where a profile opts in
(`[gateway] keep_traffic = N`; 0, the default, keeps nothing), to summarise (`specctl traffic`)
and to replay (`--prompts traffic`, measure/replay.py).

One file per model, `STATE/traffic/MODEL.json`, created 0600 in a 0700 folder and kept so.
What a request leaves there is an allow-list, copied field by field from its body:

- its messages: role (system, user, assistant; developer is kept as system) and text content
  (a list of parts: its text parts); tool messages, tool calls, images, names are dropped. A
  completion's `prompt` is kept as one user message;
- the sampling parameters temperature, top_p, max_tokens (or max_completion_tokens), seed,
  stop and n, each kept only when it is a valid value;
- the router's kind, the tokens in and out, the time it was kept.

Nothing else: no key, no header, no client address, no user id, no other field of the body
(the gateway passes the body alone; this module never sees the headers).

Bounds: a request takes at most MAX_REQUEST bytes as kept (256 KiB, about 64k tokens of text);
a larger one is not kept (its text cut would replay another prompt) but counted as `skipped`. A
model's file holds at most the last N requests (N up to 10,000) and MAX_FILE bytes (8 MiB): the
oldest go first.

`record` is safe from several threads and processes at once: a lock, and an advisory lock on
the folder (`specctl traffic forget` takes it too), around a read, then an atomic rewrite (temp
file, fsync, rename). It does file work: the gateway calls it off its event loop. A file read
back is untrusted input: validated by the models it was written with; one that fails is set
aside as `MODEL.json.corrupt` and said in one line.
"""

from __future__ import annotations

import contextlib
import difflib
import json
import os
import re
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from specctl.orchestrator.config.paths import Dirs
from specctl.orchestrator.errors import ProfileError, StateError
from specctl.orchestrator.files import (
    NAME_PATTERN,
    inside,
    private_dir,
    read_back,
    remove_own,
    write_atomic,
)
from specctl.orchestrator.measure import formats

try:
    import fcntl
except ImportError:  # pragma: no cover (Windows: the lock within this process only)
    fcntl = None  # type: ignore[assignment]

MAX_REQUEST = 256 << 10
MAX_FILE = 8 << 20
MAX_KEEP = 10_000  # the profile's keep_traffic is at most this
MAX_MESSAGES = 512
MAX_TOKENS = 1 << 24
FOLDER = "traffic"
_LOCK = threading.Lock()
_ROLES = {"user": "user", "assistant": "assistant", "system": "system", "developer": "system"}
Count = Annotated[int, Field(ge=0, le=MAX_TOKENS)]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)


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


class Entry(_Model):
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


class Kept(_Model):
    """A model's file."""

    version: Literal[1] = 1
    model: str = Field(pattern=NAME_PATTERN)
    skipped: int = Field(0, ge=0, le=1 << 40)  # requests over MAX_REQUEST, not kept
    requests: list[Entry] = Field(default_factory=list, max_length=MAX_KEEP)


@dataclass(frozen=True)
class Recorded:
    kept: bool
    note: str | None = None  # one line to say: a file set aside, or why it was not kept


def folder(dirs: Dirs) -> Path:
    return dirs.state / FOLDER


def path_of(dirs: Dirs, model: str) -> Path:
    return inside(folder(dirs), model, ".json", "model")


def entry(body: Mapping[str, Any], kind: str, tokens_in: int, tokens_out: int,
          at: float | None = None) -> Entry | None:
    """What is kept of a request's body (the allow-list above); None when it has no user text
    or its kind and counts are not valid."""
    return _entry(_messages(body), body, kind, tokens_in, tokens_out, at)


def _entry(messages: list[dict[str, str]], body: Mapping[str, Any], kind: str, tokens_in: int,
           tokens_out: int, at: float | None) -> Entry | None:
    if not any(m["role"] == "user" for m in messages):
        return None
    params = {}
    for name in Params.model_fields:
        value = body.get("max_completion_tokens", body.get(name)) if name == "max_tokens" \
            else body.get(name)
        with contextlib.suppress(ValidationError):
            params[name] = getattr(Params.model_validate({name: value}), name)
    try:
        return Entry.model_validate({
            "at": time.time() if at is None else at, "kind": kind, "tokens_in": tokens_in,
            "tokens_out": tokens_out, "messages": messages[-MAX_MESSAGES:],
            "params": Params(**params)})
    except ValidationError:
        return None


def _messages(body: Mapping[str, Any]) -> list[dict[str, str]]:
    found = body.get("messages")
    if isinstance(found, list):
        out = []
        for m in found:
            role = m.get("role") if isinstance(m, dict) else None
            text = formats.text_of(m.get("content")) if isinstance(m, dict) else None
            if isinstance(role, str) and role in _ROLES and text and text.strip():
                out.append({"role": _ROLES[role], "content": text})
        return out
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1:
        prompt = prompt[0]
    return [{"role": "user", "content": prompt}] if isinstance(prompt, str) and \
        prompt.strip() else []


def record(dirs: Dirs, model: str, body: Mapping[str, Any], kind: str, tokens_in: int,
           tokens_out: int, *, keep: int) -> Recorded:
    """Keep this request among the model's last `keep` (the profile's keep_traffic); `keep` 0
    keeps nothing. A file found corrupt is set aside and a new one begun (said in `note`)."""
    if keep <= 0:
        return Recorded(False)
    path = path_of(dirs, model)
    messages = _messages(body)
    large = sum(len(m["content"].encode()) for m in messages) > MAX_REQUEST
    found = None if large else _entry(messages, body, kind, tokens_in, tokens_out, None)
    if found is None and not large:
        return Recorded(False, "no user message with text")
    text = found.model_dump_json() if found is not None else ""
    with locked(dirs):
        kept, note = _for_update(path, model)
        if large or len(text.encode()) > MAX_REQUEST:
            _write(path, kept.model_copy(update={"skipped": kept.skipped + 1}), [
                e.model_dump_json() for e in kept.requests])
            said = f"a request over {MAX_REQUEST >> 10} KiB was not kept"
            return Recorded(False, f"{note}; {said}" if note else said)
        older = kept.requests[max(0, len(kept.requests) - (keep - 1)):] if keep > 1 else []
        _write(path, kept, _fit([*(e.model_dump_json() for e in older), text],
                                MAX_FILE - 256))
    return Recorded(True, note)


def _fit(texts: list[str], room: int) -> list[str]:
    """The newest of `texts` whose sum fits `room` bytes (the oldest go first)."""
    total, start = sum(len(t.encode()) + 2 for t in texts), 0
    while total > room and start < len(texts) - 1:
        total -= len(texts[start].encode()) + 2
        start += 1
    return texts[start:]


def _write(path: Path, kept: Kept, texts: list[str]) -> None:
    """The file, whole, from each request's JSON (written once, not dumped again)."""
    head = json.dumps({"version": 1, "model": kept.model, "skipped": kept.skipped})
    write_atomic(path, head[:-1] + ', "requests": [\n' + ",\n".join(texts) + "\n]}\n")


def _for_update(path: Path, model: str) -> tuple[Kept, str | None]:
    try:
        return load_path(path, model) or Kept(model=model), None
    except StateError as exc:  # set aside: a new file begins
        return Kept(model=model), str(exc)


def load_path(path: Path, model: str) -> Kept | None:
    """A model's kept requests (None when there are none); a file that fails validation is
    set aside and said in one line (StateError)."""
    def parse(text: str) -> Kept:
        kept = Kept.model_validate_json(text, strict=True)
        if kept.model != model:
            raise ValueError(f"it holds the traffic of {kept.model!r}")
        return kept

    return read_back(path, parse, "kept traffic", "It starts again from the next request",
                     limit=MAX_FILE + MAX_REQUEST)


def load(dirs: Dirs, model: str) -> Kept | None:
    """A model's kept requests, None when there are none (StateError: set aside)."""
    path = path_of(dirs, model)
    with locked(dirs, create=False):
        return load_path(path, model)


def models(dirs: Dirs) -> list[str]:
    """The models with kept traffic."""
    try:
        names = sorted(p.name for p in folder(dirs).iterdir())
    except OSError:
        return []
    return [n.removesuffix(".json") for n in names if n.endswith(".json")
            and re.fullmatch(NAME_PATTERN, n.removesuffix(".json"))]


def forget(dirs: Dirs, model: str | None) -> list[Path]:
    """Delete a model's kept traffic (with its set-aside copy and any temp file a crash left),
    or every model's; the folder too once empty. The paths deleted."""
    base = folder(dirs)
    if model is not None:
        path_of(dirs, model)  # a name that is no model's is refused before anything
    gone = []
    with locked(dirs, create=False):
        if not base.is_dir():
            return []
        for p in sorted(base.iterdir()):
            if model is None or p.name in (f"{model}.json", f"{model}.json.corrupt") or \
                    p.name.startswith(f".{model}.json."):
                remove_own(p, base)
                gone.append(p)
        if model is None or not any(base.iterdir()):
            with contextlib.suppress(OSError):
                base.rmdir()
    return gone


def close(dirs: Dirs, model: str) -> list[str]:
    """The models with kept traffic whose names are close to `model` (a misspelling)."""
    return difflib.get_close_matches(model, models(dirs), n=3, cutoff=0.6)


def unknown(dirs: Dirs, model: str) -> ProfileError:
    """The error for a model with nothing kept: which models have some, or the one meant."""
    kept, near = models(dirs), close(dirs, model)
    hint = (f"; did you mean {', '.join(near)}?" if near else
            f" (kept: {', '.join(kept)})" if kept else
            " (the gateway keeps a model's requests where its profile sets [gateway] "
            "keep_traffic = N)")
    return ProfileError(f"no traffic kept for {model!r}{hint}")


@contextlib.contextmanager
def locked(dirs: Dirs, create: bool = True) -> Iterator[None]:
    """This process's lock, then an advisory lock on the traffic folder (another process's
    gateway, or `traffic forget`); `create` False: no folder is made to be locked."""
    with _LOCK:
        for _ in range(3):  # a folder removed (forget) while we waited for it: made anew
            base = folder(dirs)
            if not create and not base.is_dir():
                yield
                return
            private_dir(base)
            fd = os.open(base, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
            try:
                if fcntl is not None:
                    fcntl.flock(fd, fcntl.LOCK_EX)
                if os.fstat(fd).st_nlink > 0:
                    yield
                    return
            finally:
                os.close(fd)
        raise StateError(f"{base} keeps being removed; try again")
