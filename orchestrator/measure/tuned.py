"""Saved tuning results, keyed by hardware fingerprint, backend build and both models' SHA-256.

A model's SHA is computed once and remembered by (path, size, mtime) in the state dir, so `plan`
and `up` find the result without re-reading gigabytes. A garbage result file is ignored (and
reported by `tune --show`), never trusted.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from specctl.orchestrator.errors import StateError
from specctl.orchestrator.files import write_atomic
from specctl.orchestrator.models.resolve import ModelInfo
from specctl.orchestrator.models.testbed import sha256_file
from specctl.orchestrator.planning.plan import Method, Plan


def file_sha(path: Path, cache_file: Path) -> str:
    st = path.stat()
    stamp = f"{path.resolve()}|{st.st_size}|{st.st_mtime_ns}"
    try:
        known: dict[str, str] = json.loads(cache_file.read_text())
    except (OSError, json.JSONDecodeError):
        known = {}
    if stamp not in known:
        known[stamp] = sha256_file(path)
        write_atomic(cache_file, json.dumps(known, indent=1))
    return known[stamp]


def model_id(info: ModelInfo | None, cache_file: Path) -> str:
    if info is None:
        return "-"
    if info.path is not None and info.path.is_file():
        return file_sha(info.path, cache_file)
    return f"ref:{info.ref}"  # not on disk (planning elsewhere): the reference stands in


def key(plan: Plan, backend_version: str, cache_file: Path) -> str:
    parts = [plan.hardware.fingerprint(), plan.backend, backend_version,
             model_id(plan.target, cache_file), model_id(plan.draft, cache_file)]
    return hashlib.sha256("|".join(parts).encode()).hexdigest()[:20]


@dataclass
class Measured:
    label: str
    method: Method
    k: int
    p_min: float | None
    speedup: float
    tps: float
    acceptance: float | None = None
    seconds: float = 0.0


@dataclass
class Result:
    profile: str
    method: Method  # "none" = speculation off
    k: int
    p_min: float | None
    speedup: float
    summary: str
    alpha: float | None
    cost: float | None
    verify: dict[str, float]
    baseline_tps: float
    predicted: list[dict[str, float]] = field(default_factory=list)
    measured: list[Measured] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # not measured, and why
    seconds: float = 0.0
    created: str = ""
    key: str = ""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Result:
        data = dict(data)
        data["measured"] = [Measured(**m) for m in data.get("measured", [])]
        return cls(**data)


def path_for(folder: Path, key_: str) -> Path:
    return folder / f"{key_}.json"


def save(folder: Path, result: Result) -> Path:
    path = path_for(folder, result.key)
    write_atomic(path, json.dumps(result.to_json(), indent=2) + "\n")
    return path


def load(folder: Path, key_: str) -> Result | None:
    """The saved result, None when there is none; StateError when the file is garbage."""
    path = path_for(folder, key_)
    try:
        return Result.from_json(json.loads(path.read_text()))
    except FileNotFoundError:
        return None
    except (json.JSONDecodeError, TypeError, UnicodeDecodeError, AttributeError) as exc:
        raise StateError(f"tuning result {path} is unreadable ({type(exc).__name__}); delete it "
                         "and run `specctl tune` again") from None
