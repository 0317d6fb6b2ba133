"""Which backend is fastest for a profile on this machine, as `bench --backends` measured it.

One file per (profile, machine), read back like any other file: validated, set aside when it
fails. `plan` prefers the measured winner among the profile's backends and says why; without a
measurement the per-hardware default stands and the plan says it is a default.
"""

from __future__ import annotations

import hashlib
import time
from pathlib import Path

from pydantic import Field

from specctl.orchestrator.files import inside, read_back, write_atomic
from specctl.orchestrator.measure.results.record import Record


class Speed(Record):
    backend: str = Field(max_length=40)
    setting: str = Field(max_length=200)  # the speculation it was measured with
    tps: float = Field(ge=0, le=1e7)  # the workload's decode tokens/s
    speedup: float = Field(ge=0, le=1e6)  # over its own no-draft baseline


class FastestBackend(Record):
    profile: str = Field(max_length=64)
    machine: str = Field(max_length=64)
    speeds: tuple[Speed, ...] = Field(min_length=2, max_length=16)
    measured: str = Field(max_length=40)
    report: str = Field("", max_length=1000)

    @property
    def best(self) -> Speed:
        return max(self.speeds, key=lambda s: s.tps)

    def why(self) -> str:
        best = self.best
        others = [s for s in self.speeds if s is not best]
        than = "; ".join(f"{best.tps / s.tps:.2f}x faster than {s.backend}"
                         for s in others if s.tps > 0)
        return (f"{best.backend} ({best.setting}) {than} here, measured {self.measured} by "
                "`specctl bench --backends`")


def key(profile: str, machine_fingerprint: str) -> str:
    return hashlib.sha256(f"{profile}|{machine_fingerprint}".encode()).hexdigest()[:20]


def save(folder: Path, winner: FastestBackend, fingerprint: str) -> Path:
    path = inside(folder, key(winner.profile, fingerprint), ".json", "backend choice key")
    write_atomic(path, winner.model_dump_json(indent=2) + "\n")
    return path


def load(folder: Path, profile: str, fingerprint: str) -> FastestBackend | None:
    path = inside(folder, key(profile, fingerprint), ".json", "backend choice key")
    return read_back(path, lambda text: FastestBackend.model_validate_json(text, strict=True),
                     "backend choice", "Measure again with `specctl bench --backends`.")


def now() -> str:
    return time.strftime("%Y-%m-%d %H:%M")
