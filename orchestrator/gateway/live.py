"""Live truth for routed models: per kind of request, the speed and acceptance the served
setting gets on real traffic, against the baseline's speed that `tune` measured on that kind.

A kind whose live decode speed on a setting (the median of its last REQUESTS requests there,
once MIN_REQUESTS have finished: a route may send a kind's long prompts to another setting) falls
below its baseline's is routed to a server without a draft from then on,
until a new tune changes the route (the table starts again). What `/gateway/status` shows, and
`specctl status` from the gateway's state file (gateway/owned.py) while it runs.
"""

from __future__ import annotations

import statistics
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

REQUESTS = 16
MIN_REQUESTS = 8


@dataclass
class Tally:
    setting: str = ""  # the last request's
    requests: int = 0
    tokens: int = 0
    drafted: int = 0
    accepted: int = 0
    windows: dict[str, deque[float]] = field(default_factory=dict)  # the last speeds, by
    # setting: a route sends a kind's long prompts to another server (measure/route/choose.choose)
    demoted: str = ""  # why it now goes to no draft

    @property
    def recent(self) -> deque[float]:
        """The last request's setting's window."""
        return self.windows.get(self.setting, deque())

    @property
    def live_tps(self) -> float | None:
        return statistics.median(self.recent) if self.recent else None

    @property
    def acceptance(self) -> float | None:
        return self.accepted / self.drafted if self.drafted else None


class Live:
    def __init__(self) -> None:
        self.tallies: dict[tuple[str, str], Tally] = {}
        self.baseline: dict[tuple[str, str], float] = {}

    def reset(self, model: str, baseline: dict[str, float]) -> None:
        """A new route for `model`: its table starts again, against these baseline speeds."""
        for key in [k for k in self.tallies if k[0] == model]:
            del self.tallies[key]
        for key in [k for k in self.baseline if k[0] == model]:
            del self.baseline[key]
        self.baseline |= {(model, kind): tps for kind, tps in baseline.items()}

    def observe(self, model: str, kind: str, setting: str, tokens: int, tps: float | None,
                drafted: int, accepted: int) -> None:
        t = self.tallies.setdefault((model, kind), Tally())
        t.setting = setting  # counted per setting: each has its own window
        window = t.windows.setdefault(setting, deque(maxlen=REQUESTS))
        t.requests += 1
        t.tokens += tokens
        t.drafted += drafted
        t.accepted += accepted
        if tps:
            window.append(tps)
        base = self.baseline.get((model, kind))
        live = t.live_tps
        if (not t.demoted and setting != "off" and base and live is not None
                and len(t.recent) >= MIN_REQUESTS and live < base):
            t.demoted = (f"live {live:.1f} tok/s under {setting} is below the baseline's "
                         f"{base:.1f} tok/s: no draft")

    def demoted(self, model: str, kind: str) -> bool:
        t = self.tallies.get((model, kind))
        return t is not None and bool(t.demoted)

    def rows(self, model: str) -> list[dict[str, Any]]:
        out = []
        for (m, kind), t in sorted(self.tallies.items()):
            if m != model:
                continue
            base = self.baseline.get((m, kind))
            live = t.live_tps
            out.append({"kind": kind, "setting": t.setting, "requests": t.requests,
                        "live_tps": round(live, 2) if live is not None else None,
                        "baseline_tps": base, "speedup": round(live / base, 3)
                        if live is not None and base else None,
                        "acceptance": round(t.acceptance, 3) if t.acceptance is not None
                        else None, "demoted": t.demoted})
        return out


class Kind(BaseModel):
    """One row of a published live table (read back by `specctl status`: validated)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False, defer_build=True)

    kind: str = Field(max_length=32)
    setting: str = Field(max_length=200)
    requests: int = Field(ge=0)
    live_tps: float | None = Field(None, ge=0, le=1e7)
    baseline_tps: float | None = Field(None, ge=0, le=1e7)
    speedup: float | None = Field(None, ge=0, le=1e6)
    acceptance: float | None = Field(None, ge=0, le=1)
    demoted: str = Field("", max_length=500)


class Routed(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False, defer_build=True)

    route: str | None = Field(None, max_length=2000)
    why: str = Field("", max_length=2000)
    memory: str | None = Field(None, max_length=500)
    kinds: list[Kind] = Field(default_factory=list, max_length=64)
