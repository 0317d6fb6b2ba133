"""The user's own traffic: the last N requests to each model, kept where a profile opts in
(`[gateway] keep_traffic = N`; 0, the default, keeps nothing), to summarise (`specctl traffic`)
and to replay (`--prompts traffic`, measure/traffic/replay.py).

One file per model, `STATE/traffic/MODEL.jsonl`, created 0600 in a 0700 folder and kept so.
What a request leaves there is an allow-list, copied field by field from its body:

- its messages: role (system, user, assistant; developer is kept as system) and text content
  (a list of parts: its text parts); tool messages, tool calls, images, names are dropped. A
  completion's `prompt` is kept as one user message. A request of another API is kept as the
  chat request it amounts to (measure/prompts/bodies.py): Anthropic Messages' system and text
  blocks, OpenAI Responses' instructions and input messages, each as a message (tool calls
  and results dropped, as chat's); a fill-in-the-middle request is not kept (no conversation:
  replayed as chat it would measure another request), nor a request that generates nothing
  (a token count, embeddings);
- the sampling parameters temperature, top_p, max_tokens (or max_completion_tokens), seed,
  stop and n, each kept only when it is a valid value;
- the router's kind, the tokens in and out, the time it was kept.

Nothing else: no key, no header, no client address, no user id, no other field of the body
(the gateway passes the body alone; this module never sees the headers).

The file (measure/traffic/kept.py: its format, bounds and compaction) is JSON lines: a head, then a
line per request, added at the end; past its bounds (MAX_FILE bytes, the profile's N by more
than an eighth) it is compacted to its newest N, atomically. A reader sees the last N.

`record` is safe from several threads and processes at once: a lock, and an advisory lock on
the folder (`specctl traffic forget` takes it too), around each addition or compaction. It does
file work: the gateway calls it off its event loop (gateway/keep.py). A file read back is
untrusted input: validated by the models it was written with; one that fails is set aside as
`MODEL.jsonl.corrupt` and said in one line.
"""

from __future__ import annotations

import contextlib
import difflib
import os
import re
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from specctl.orchestrator.contract.dirs import Dirs
from specctl.orchestrator.errors import ProfileError, StateError
from specctl.orchestrator.files import NAME_PATTERN, inside, private_dir, remove_own
from specctl.orchestrator.measure.prompts import bodies, formats
from specctl.orchestrator.measure.traffic import kept
from specctl.orchestrator.measure.traffic.kept import MAX_KEEP as MAX_KEEP
from specctl.orchestrator.measure.traffic.kept import MAX_MESSAGES, SKIP
from specctl.orchestrator.measure.traffic.kept import MAX_REQUEST as MAX_REQUEST
from specctl.orchestrator.measure.traffic.kept import Kept as Kept
from specctl.orchestrator.measure.traffic.kept import Params as Params
from specctl.orchestrator.measure.traffic.kept import Request as Request

try:
    import fcntl
except ImportError:  # pragma: no cover (Windows: the lock within this process only)
    fcntl = None  # type: ignore[assignment]

FOLDER = "traffic"
SUFFIX = ".jsonl"
_LOCK = threading.Lock()  # and kept's record of the files it wrote
_ROLES = {"user": "user", "assistant": "assistant", "system": "system", "developer": "system"}


@dataclass(frozen=True)
class Recorded:
    kept: bool
    note: str | None = None  # one line to say: a file set aside, or why it was not kept
    skipped: bool = False  # over MAX_REQUEST: counted, not kept


def folder(dirs: Dirs) -> Path:
    return dirs.state / FOLDER


def path_of(dirs: Dirs, model: str) -> Path:
    return inside(folder(dirs), model, SUFFIX, "model")


def entry(body: Mapping[str, Any], kind: str, tokens_in: int, tokens_out: int,
          at: float | None = None) -> Request | None:
    """What is kept of a request's body (the allow-list above); None when it has no user text
    or its kind and counts are not valid."""
    return _entry(_messages(body), body, kind, tokens_in, tokens_out, at)


def _entry(messages: list[dict[str, str]], body: Mapping[str, Any], kind: str, tokens_in: int,
           tokens_out: int, at: float | None) -> Request | None:
    if not any(m["role"] == "user" for m in messages):
        return None
    params = {}
    for name in Params.model_fields:
        value = body.get("max_completion_tokens", body.get(name)) if name == "max_tokens" \
            else body.get(name)
        with contextlib.suppress(ValidationError):
            params[name] = getattr(Params.model_validate({name: value}), name)
    try:
        return Request.model_validate({
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
           tokens_out: int, *, keep: int, fmt: str = bodies.CHAT) -> Recorded:
    """Keep this request (a body of format `fmt`, measure/prompts/bodies.py) among the model's
    last `keep` (the profile's keep_traffic); `keep` 0 keeps nothing. A file found corrupt is
    set aside and a new one begun (said in `note`)."""
    if keep <= 0:
        return Recorded(False)
    if fmt not in (bodies.CHAT, bodies.COMPLETIONS):
        chat = bodies.conversation(fmt, body).as_chat()
        if chat is None:
            return Recorded(False, f"a {fmt} request is not kept")
        body = chat
    path = path_of(dirs, model)
    messages = _messages(body)
    large = sum(len(m["content"].encode()) for m in messages) > MAX_REQUEST
    found = None if large else _entry(messages, body, kind, tokens_in, tokens_out, None)
    if found is None and not large:
        return Recorded(False, "no user message with text")
    text = found.model_dump_json() if found is not None else ""
    skip = large or len(text.encode()) > MAX_REQUEST
    with locked(dirs):
        note = kept.add(path, model, min(keep, MAX_KEEP), SKIP if skip else text)
    if skip:
        said = f"a request over {MAX_REQUEST >> 10} KiB was not kept"
        return Recorded(False, f"{note}; {said}" if note else said, skipped=True)
    return Recorded(True, note)


def load(dirs: Dirs, model: str) -> Kept | None:
    """A model's kept requests, None when there are none (StateError: set aside)."""
    path = path_of(dirs, model)
    with locked(dirs, create=False):
        return kept.load_path(path, model)


def models(dirs: Dirs) -> list[str]:
    """The models with kept traffic."""
    try:
        names = sorted(p.name for p in folder(dirs).iterdir())
    except OSError:
        return []
    return [n.removesuffix(SUFFIX) for n in names if n.endswith(SUFFIX)
            and re.fullmatch(NAME_PATTERN, n.removesuffix(SUFFIX))]


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
            if model is None or p.name in (f"{model}{SUFFIX}", f"{model}{SUFFIX}.corrupt") or \
                    p.name.startswith(f".{model}{SUFFIX}."):
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
    names, near = models(dirs), close(dirs, model)
    hint = (f"; did you mean {', '.join(near)}?" if near else
            f" (kept: {', '.join(names)})" if names else
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
