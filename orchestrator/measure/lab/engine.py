"""How `specctl bench` and `specctl tune` measure: a short-lived server per configuration, one
warm-up request that is not counted, then counted requests (a conversation's turns in order, as
one), each with the backend's draft counters for it (read only when the plan speculates) and a
hash of its reply."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specctl.orchestrator.contract.adapter import Adapter
from specctl.orchestrator.contract.launch import Endpoint, Installed
from specctl.orchestrator.contract.plan import Plan
from specctl.orchestrator.contract.stats import SpecStats
from specctl.orchestrator.errors import BackendError
from specctl.orchestrator.measure.prompts.workload import Prompt
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
    """One counted request, or one conversation (its turns asked in order): the reply (a
    conversation's summed: wall, time to first token, tokens, decode time; its text the
    replies joined), the draft counters it added, and how many turns it took."""

    reply: client.Reply
    spec: SpecStats
    turns: int = 1

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


def conversation(system: str | None, turns: Sequence[str], replies: Sequence[str]
                 ) -> list[dict[str, str]]:
    """The messages of a conversation's next request: the system message first where given,
    then each user turn, each followed by the server's own reply to it where it has one."""
    out = [{"role": "system", "content": system}] if system else []
    for n, turn in enumerate(turns):
        out.append({"role": "user", "content": turn})
        if n < len(replies):
            out.append({"role": "assistant", "content": replies[n]})
    return out


def summed(replies: Sequence[client.Reply]) -> client.Reply:
    """A conversation's turns as one measured request: wall, time to first token, tokens and
    decode time summed (each turn's decode time leaves out its own first token), the prompt
    its last turn's (the whole conversation)."""
    if len(replies) == 1:
        return replies[0]
    decode = sum(r.tokens / r.decode_tps for r in replies if r.decode_tps > 0)
    tokens = sum(r.tokens for r in replies)
    return client.Reply("\n".join(r.text for r in replies), tokens,
                        tokens / decode if decode > 0 else 0.0,
                        sum(r.wall_s for r in replies), replies[-1].timed_by, replies[-1].raw,
                        sum(r.ttft_s for r in replies), replies[-1].prompt_tokens)


Ask = Prompt | str


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
        (measure/bench/verdicts.py flags one that did not)."""
        if not self.plan.speculative:
            return SpecStats()
        try:
            return self.backend.spec_stats(self.endpoint)
        except BackendError as exc:
            return SpecStats(source=f"no counters: {exc}")

    def converse(self, prompt: Ask, max_tokens: int) -> list[client.Reply]:
        """A prompt's turns in order, each later one with this server's own earlier replies,
        as a client would send them; the prompt's own max_tokens wins over `max_tokens`. The
        first turn is new to the server (Adapter.uncached: asked again, a prompt is prefilled
        again); a later turn may reuse the earlier ones, as a client's would."""
        if isinstance(prompt, str):
            prompt = Prompt("", prompt)
        length = prompt.max_tokens or max_tokens
        replies: list[client.Reply] = []
        for n in range(len(prompt.turns)):
            messages = conversation(prompt.system, prompt.turns[:n + 1],
                                    [r.text for r in replies])
            replies.append(client.chat(self.endpoint, messages, length,
                                       timing=self.backend.decode_timing, model=self.model,
                                       extra=None if n else self.backend.uncached()))
        return replies

    def ask(self, prompt: Ask, max_tokens: int) -> Asked:
        replies = self.converse(prompt, max_tokens)
        seen = self.counters()
        spec, self._seen = seen - self._seen, seen
        return Asked(summed(replies), spec, len(replies))

    def answer(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """One request to `path` below the API root as a client sends it, not streamed (a tool
        call's or a JSON schema's: measure/lossless/structured.py), new to the server
        (Adapter.uncached); its answer as it came."""
        sent = {**self.backend.uncached(), **body, **({"model": self.model} if self.model
                                                      else {})}
        return client.answer(self.endpoint, path, sent)

    def ask_together(self, prompts: Sequence[Ask], max_tokens: int) -> Round:
        """The prompts as concurrent requests (one stream each, a conversation's turns in
        order); the round's wall time and the draft counters it added (per request they cannot
        be told apart)."""
        start = time.perf_counter()
        with ThreadPoolExecutor(max_workers=len(prompts)) as pool:
            replies = [summed(got) for got in pool.map(
                lambda p: self.converse(p, max_tokens), prompts)]
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
