"""The backend contract: probe what is installed, turn a plan into argv/env, read acceptance.

`launch` is pure: plan and installed dialect in, argv/env/URLs out. I/O lives in `probe` and
`spec_stats`. Adapters never import the CLI.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar, Protocol

from specctl.orchestrator.planning.plan import Plan


@dataclass(frozen=True)
class Installed:
    backend: str
    version: str
    dialect: str
    path: str | None = None
    flags: frozenset[str] = frozenset()
    methods: frozenset[str] = frozenset()
    assumed: bool = False  # not installed here: planning with the newest known dialect

    def describe(self) -> str:
        where = "assumed, not installed here" if self.assumed else self.path or "?"
        return f"{self.backend} {self.version} ({self.dialect} dialect; {where})"


@dataclass(frozen=True)
class HttpCall:
    """A request the supervisor sends once the server is healthy (e.g. Ollama model setup)."""

    method: str
    path: str
    body: Mapping[str, object] = field(default_factory=dict)


@dataclass(frozen=True)
class Launch:
    argv: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)
    health_url: str = ""
    base_url: str = ""
    metrics_url: str | None = None
    # backend variable -> the user's variable it is copied from at spawn time (API keys: the
    # value never enters argv, the plan or a log)
    env_from: Mapping[str, str] = field(default_factory=dict)
    setup: tuple[HttpCall, ...] = ()
    model: str | None = None  # the model name clients should send, when the server needs one


def api_key(env_from: Mapping[str, str], environ: Mapping[str, str]) -> str | None:
    """The API key a launch copies from the user's environment (see Launch.env_from), if any."""
    return next((environ.get(source) for source in env_from.values()), None)


@dataclass(frozen=True)
class Endpoint:
    url: str  # scheme://host:port
    api_key: str | None = None

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}


@dataclass(frozen=True)
class SpecStats:
    """Draft counters. `drafts` = verification steps that had a draft."""

    drafted: int = 0
    accepted: int = 0
    drafts: int = 0
    per_position: tuple[int, ...] = ()
    source: str = ""

    @property
    def acceptance_rate(self) -> float | None:
        return self.accepted / self.drafted if self.drafted else None

    @property
    def mean_accepted_length(self) -> float | None:
        """Accepted draft tokens per verification step (plus one target token each step)."""
        return self.accepted / self.drafts if self.drafts else None

    def __add__(self, other: SpecStats) -> SpecStats:
        n = max(len(self.per_position), len(other.per_position))
        a = self.per_position + (0,) * (n - len(self.per_position))
        b = other.per_position + (0,) * (n - len(other.per_position))
        summed = tuple(x + y for x, y in zip(a, b, strict=True))
        return SpecStats(self.drafted + other.drafted, self.accepted + other.accepted,
                         self.drafts + other.drafts, summed, self.source or other.source)

    def __sub__(self, before: SpecStats) -> SpecStats:
        neg = SpecStats(-before.drafted, -before.accepted, -before.drafts,
                        tuple(-x for x in before.per_position), before.source)
        return self + neg


class Backend(Protocol):
    name: ClassVar[str]
    default_quant: ClassVar[str]  # quantisation assumed for a model named without one
    vocab_rule: ClassVar[str]  # "near" (llama.cpp) or "identical" (vLLM): see orchestrator/compat
    cache_types: ClassVar[tuple[str, ...]]  # KV cache types, preferred first
    runs_on: ClassVar[frozenset[str]]  # hardware kinds: "cuda", "metal", "cpu"
    no_spec_hint: ClassVar[str]  # what to do when this backend cannot speculate
    install_hint: ClassVar[str]  # how to get this backend

    def probe(self) -> Installed | None: ...

    def assumed(self) -> Installed: ...

    def launch(self, plan: Plan, installed: Installed) -> Launch: ...

    def spec_stats(self, endpoint: Endpoint) -> SpecStats: ...
