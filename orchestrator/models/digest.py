"""A model file's SHA-256, read where it was already computed when the file arrived.

Saved results (tuned settings, losslessness certificates) are keyed by the models' SHA-256, so a
copy of the same file finds them and a changed one does not. Hashing a 3.3 GiB file takes
seconds (a 40 GiB one about a minute), so the digest is taken where the file arrives and read
back after: a testbed model's `<file>.sha256` marker (written when its pinned hash was checked,
holding the hash, size and mtime), and a Hugging Face cache file's blob, which is named by its
SHA-256 (`blobs/<sha256>`; `models pull` checks it on download). Only a file known by neither
is read, once, and remembered by path, size and mtime in the state dir (`file_sha`, in
`cache_of(state)`), for every record keyed by it.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path
from typing import Annotated

from pydantic import Field, TypeAdapter

from specctl.orchestrator.contract.model import ModelInfo
from specctl.orchestrator.files import UnreadableError, read_text, write_atomic
from specctl.orchestrator.humanize import Say
from specctl.orchestrator.humanize import size as human_size

_SHA = re.compile(r"[0-9a-f]{64}")


def sha256_file(path: Path, chunk: int = 8 << 20) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while block := fh.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def marker_stamp(sha: str, st: os.stat_result) -> str:
    """What a `<file>.sha256` marker holds: the hash, the size and the mtime it was taken at."""
    return f"{sha} {st.st_size} {st.st_mtime_ns}"


def known(path: Path) -> str | None:
    """The file's SHA-256 where it was taken on arrival (a marker that matches the file's size
    and mtime, or a Hugging Face blob's name), else None: nothing is read but a name."""
    try:
        st = path.stat()
        marker = path.with_name(path.name + ".sha256")
        if marker.is_file() and marker.stat().st_size < 256:
            sha, _, _ = (text := marker.read_text(errors="replace")).partition(" ")
            if _SHA.fullmatch(sha) and text.strip() == marker_stamp(sha, st):
                return sha
        blob = path.resolve()
        if blob.parent.name == "blobs" and _SHA.fullmatch(blob.name) and \
                blob.stat().st_size == st.st_size:
            return blob.name
    except (OSError, ValueError):
        return None
    return None


def cache_of(state: Path) -> Path:
    """The (path, size, mtime) -> SHA-256 cache in the state dir, shared by every record keyed
    by a model's SHA (tuned results, certificates)."""
    return state / "model-sha256.json"


_SHAS = TypeAdapter(dict[str, Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]])


LOUD_BYTES = 256 << 20  # a file this large takes a noticeable while to hash: it is said first


def file_sha(path: Path, cache_file: Path, say: Say | None = None) -> str:
    """The file's SHA-256: taken on arrival (`known`), remembered by path, size and mtime in
    `cache_file`, or read now (once; said first when the file is large)."""
    arrived = known(path)
    if arrived is not None:
        return arrived
    st = path.stat()
    stamp = f"{path.resolve()}|{st.st_size}|{st.st_mtime_ns}"
    try:
        seen = _SHAS.validate_json(read_text(cache_file))
    except (OSError, ValueError, UnreadableError):  # missing or not a cache: hash anew
        seen = {}
    if stamp not in seen:
        if say is not None and st.st_size >= LOUD_BYTES:
            say(f"reading {path.name} ({human_size(st.st_size)}) once for its SHA-256, which "
                "keys its saved tune and certificates (remembered by its size and time)")
        seen[stamp] = sha256_file(path)
        write_atomic(cache_file, json.dumps(seen, indent=1))
    return seen[stamp]


def model_id(info: ModelInfo | None, cache_file: Path, say: Say | None = None) -> str:
    """What keys a model in a saved record: its file's SHA-256, "-" for none (no draft), or
    its reference where it is not on disk (a plan for another machine)."""
    if info is None:
        return "-"
    if info.path is not None and info.path.is_file():
        return file_sha(info.path, cache_file, say)
    return f"ref:{info.ref}"  # not on disk (planning elsewhere): the reference stands in
