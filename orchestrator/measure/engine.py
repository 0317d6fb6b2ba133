"""How `specctl bench` and `specctl tune` measure: a short-lived server per configuration, one
warm-up request that is not counted, then counted requests, each with the backend's draft
counters for it (read only when the plan speculates) and a hash of its reply."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from specctl.adapters.base import Adapter
from specctl.orchestrator.contract.launch import Endpoint, Installed
from specctl.orchestrator.contract.stats import SpecStats
from specctl.orchestrator.errors import BackendError
from specctl.orchestrator.planning.plan import Plan
from specctl.orchestrator.runtime import client, servers

MARGIN = 0.05  # a configuration must beat another by 5% to count as better: noise is below it
WARM_UP = ("Hello", 8)  # prompt and max_tokens of the request that is not counted


def log_name(label: str) -> str:
    """A label as it names the server's log file: "bench-draft k=4" -> "bench-draftk4"."""
    return label.replace(" ", "").replace("=", "")


def text_sha(text: str) -> str:
    """A short hash of a reply: equal replies, equal hashes."""
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Asked:
    """One counted request: the reply and the draft counters it added."""

    reply: client.Reply
    spec: SpecStats

    @property
    def sha(self) -> str:
        return text_sha(self.reply.text)


@dataclass(frozen=True)
class Round:
    """Concurrent requests: their replies, the wall time of all of them, their draft counters."""

    replies: tuple[client.Reply, ...]
    wall_s: float
    spec: SpecStats

    @property
    def tokens(self) -> int:
        return sum(r.tokens for r in self.replies)


class Served:
    """A server that is up and warmed up. Each `ask` reads the draft counters once, after its
    request: the reading after one request is the one before the next. The reading is this
    server's own, so requests may go to several servers interleaved."""

    def __init__(self, plan: Plan, backend: Adapter, endpoint: Endpoint,
                 model: str | None = None) -> None:
        self.plan, self.backend, self.endpoint, self.model = plan, backend, endpoint, model
        self._seen = SpecStats()

    def reset(self) -> None:
        """Count from now on (after the warm-up)."""
        self._seen = self.counters()

    def counters(self) -> SpecStats:
        """The draft counters so far; not read (all zero) when the plan does not speculate. A
        metrics page that cannot be read counts nothing: a server that drafts shows its counters
        (measure/verdicts.py flags one that did not)."""
        if not self.plan.speculative:
            return SpecStats()
        try:
            return self.backend.spec_stats(self.endpoint)
        except BackendError as exc:
            return SpecStats(source=f"no counters: {exc}")

    def ask(self, prompt: str, max_tokens: int) -> Asked:
        reply = client.chat(self.endpoint, prompt, max_tokens, timing=self.backend.decode_timing,
                            model=self.model)
        seen = self.counters()
        spec, self._seen = seen - self._seen, seen
        return Asked(reply, spec)

    def ask_together(self, prompts: Sequence[str], max_tokens: int) -> Round:
        """The prompts as concurrent requests (one stream each); the round's wall time and the
        draft counters it added (per request they cannot be told apart)."""
        start = time.perf_counter()
        with ThreadPoolExecutor(max_workers=len(prompts)) as pool:
            replies = list(pool.map(lambda p: client.chat(
                self.endpoint, p, max_tokens, timing=self.backend.decode_timing,
                model=self.model), prompts))
        wall = time.perf_counter() - start
        seen = self.counters()
        spec, self._seen = seen - self._seen, seen
        return Round(tuple(replies), wall, spec)


@contextmanager
def serve(plan: Plan, backend: Adapter, installed: Installed, logs: Path,
          label: str) -> Iterator[Served]:
    """Serve `plan` on its own loopback server, warmed up, until the block ends."""
    with servers.ephemeral(plan, backend, installed, logs, log_name(label)) as srv:
        served = Served(plan, backend, srv.endpoint, srv.launch.model)
        client.chat(srv.endpoint, *WARM_UP, model=served.model)  # not counted
        served.reset()
        yield served
