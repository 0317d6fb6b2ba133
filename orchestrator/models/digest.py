"""A model file's SHA-256, read where it was already computed when the file arrived.

Saved results (tuned settings, losslessness certificates) are keyed by the models' SHA-256, so a
copy of the same file finds them and a changed one does not. Hashing a 3.3 GiB file takes
seconds (a 40 GiB one about a minute), so the digest is taken where the file arrives and read
back after: a testbed model's `<file>.sha256` marker (written when its pinned hash was checked,
holding the hash, size and mtime), and a Hugging Face cache file's blob, which is named by its
SHA-256 (`blobs/<sha256>`; `models pull` checks it on download). Only a file known by neither
is read, once (measure/results/tuned.py remembers it by path, size and mtime).
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

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
