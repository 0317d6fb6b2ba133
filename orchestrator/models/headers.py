"""GGUF headers remembered across commands: a model's metadata read once per file, not once per
command. Walking a 151k-token vocabulary and its merges to reach the keys after them takes
20-40 ms a file; `plan` reads the target's and the draft's.

One JSON file per header in the cache dir (CACHE/gguf-headers/), keyed by the file's path,
size, mtime and inode: a changed or replaced model is read afresh. Only headers read whole with
no array kept are remembered (their arrays are spans in the file, gguf_meta.ArrayInfo). Read
back, an entry is untrusted input, held to the bounds of a header read fresh (keys, string
lengths, array lengths, spans inside the file); one that fails is moved aside and the header is
read again, as if none were remembered.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
from pathlib import Path
from typing import Any

from specctl.orchestrator.errors import SpecctlError, StateError
from specctl.orchestrator.files import read_back, write_atomic
from specctl.orchestrator.models.gguf_meta import (
    MAX_ITEMS,
    MAX_KEYS,
    MAX_STRING,
    ArrayInfo,
    ValueType,
)

VERSION = 1
MAX_ENTRY = 8 << 20  # an entry's bytes: keys and scalars, a chat template of tens of KB
MAX_ENTRIES = 256  # headers remembered (each model file, each version of it)


def stamp(path: Path, st: os.stat_result) -> str:
    return f"{path.resolve()}|{st.st_size}|{st.st_mtime_ns}|{st.st_ino}"


class Headers:
    """The remembered headers in `folder` (gguf_meta.read_metadata asks it first)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def _file(self, key: str) -> Path:
        return self.folder / f"{hashlib.sha256(key.encode()).hexdigest()[:32]}.json"

    def get(self, path: Path, st: os.stat_result) -> dict[str, Any] | None:
        key = stamp(path, st)
        try:
            return read_back(self._file(key), lambda text: _parsed(text, key, st.st_size),
                             "a remembered GGUF header", "It is read again from the model.",
                             MAX_ENTRY)
        except StateError:
            return None  # moved aside: the header is read afresh

    def put(self, path: Path, st: os.stat_result, meta: dict[str, Any]) -> None:
        values = {k: _encoded(v) for k, v in meta.items()}
        if any(v is None for v in values.values()):
            return  # a kept array or a value JSON cannot hold: read it each time
        text = json.dumps({"version": VERSION, "stamp": stamp(path, st), "meta": values},
                          allow_nan=False)
        if len(text) <= MAX_ENTRY:
            with contextlib.suppress(OSError, SpecctlError):  # read-only or full: a saving lost
                write_atomic(self._file(stamp(path, st)), text)
                self._trim()

    def _trim(self) -> None:
        """At most MAX_ENTRIES remembered: the least recently written go first (files that
        moved or changed leave entries no one reads)."""
        entries = sorted(self.folder.glob("*.json"), key=lambda p: p.stat().st_mtime_ns)
        for old in entries[:max(0, len(entries) - MAX_ENTRIES)]:
            old.unlink(missing_ok=True)


def _encoded(value: Any) -> Any:
    if isinstance(value, ArrayInfo):
        return {"array": [int(value.item_type), value.length, value.start, value.end]}
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value if isinstance(value, (bool, int, float, str)) else None


def _parsed(text: str, key: str, size: int) -> dict[str, Any]:
    """An entry, held to the bounds of a fresh header; ValueError where it is not one."""
    data = json.loads(text)
    if not (isinstance(data, dict) and data.get("version") == VERSION
            and data.get("stamp") == key and isinstance(data.get("meta"), dict)):
        raise ValueError("not a remembered header of this file")
    meta: dict[str, Any] = data["meta"]
    if len(meta) > MAX_KEYS:
        raise ValueError(f"more than {MAX_KEYS} keys")
    return {k: _value(k, v, size) for k, v in meta.items()}


def _value(key: str, value: Any, size: int) -> Any:
    if len(key) > MAX_STRING or (isinstance(value, str) and len(value) > MAX_STRING):
        raise ValueError("a string longer than a header holds")
    if isinstance(value, (bool, int, str)) or (isinstance(value, float)
                                               and math.isfinite(value)):
        return value
    span = value.get("array") if isinstance(value, dict) and len(value) == 1 else None
    if (isinstance(span, list) and len(span) == 4 and all(type(n) is int for n in span)
            and span[0] in set(ValueType) - {ValueType.ARRAY} and 0 <= span[1] <= MAX_ITEMS
            and 0 <= span[2] <= span[3] <= size):
        return ArrayInfo(ValueType(span[0]), span[1], span[2], span[3])
    raise ValueError(f"{key[:80]!r} holds no value a header has")
