"""Where `tune` and `bench` take their timings: servers kept up (paired: both sides answer the
same prompt one after the other) or one at a time (sequential blocks A B B A ..., when two do
not fit in memory), and a watch on the rest of the machine while each request runs.

A `Lab` is the engine as the decision logic sees it: it keeps a set of configurations served,
times one request on one of them, tells the time, and says how much CPU other processes used.
`ServerLab` is the real one (servers through engine.serve); the tests drive the same decision
logic on a simulated engine with a known speed law and injected noise (tests/simengine.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Protocol

import psutil

from specctl.orchestrator.contract.adapter import Adapter
from specctl.orchestrator.contract.launch import Installed
from specctl.orchestrator.contract.plan import Plan
from specctl.orchestrator.contract.stats import SpecStats
from specctl.orchestrator.errors import ProfileError
from specctl.orchestrator.humanize import Say
from specctl.orchestrator.measure.lab import engine
from specctl.orchestrator.measure.prompts.workload import Workload
from specctl.orchestrator.runtime import client

Config = tuple[str, Plan]  # a label and what it serves


LOADED = 0.5  # of a request's speed, what it loses while another process uses a core: one
# request's time t beside `busy` cores counts as t * (1 - LOADED * busy) quiet (busy at most 1).
# On this 2-core machine a one-core busy loop over part of a llama-server request (cpu-demo's
# target, 64 tokens) cost it 0.4-1.3 of the time the loop ran (median 0.8; the bursts of
# tests/simengine.py cost 0.5-0.8); 0.5 takes out about what a burst cost, rarely more. Under
# 30% bursts most requests of a few seconds see one: without it a request slowed by a third
# read as the configuration's speed (n-gram lost to a chain the law has 8% slower, 1 in 6).


@dataclass(frozen=True)
class Timed:
    """One counted request, or one conversation (its turns summed)."""

    label: str
    prompt: int
    tokens: int
    seconds: float  # decode time, as the server measured it
    spec: SpecStats
    text: str = ""
    busy: float = 0.0  # cores other processes used while it ran
    block: int = 0  # which round (paired) or block (sequential) it was part of
    wall_s: float = 0.0  # the request's wall time: what the client waited for
    timed_by: str = ""  # who measured the decode time (client.Reply.timed_by)
    ttft_s: float = 0.0  # the time to the first token (a conversation's: summed)
    prompt_tokens: int = 0  # the prompt's tokens (a conversation's: its last turn's, all of it)
    turns: int = 1  # requests of a conversation

    @property
    def decoded(self) -> int:
        """The tokens whose making `seconds` covers. A server's own decode time starts once the
        prompt's pass has yielded the first token (llama-server's predicted_ms: a reply of 16
        tokens with 13 drafts accepted took 2 verification steps, not 3), and so does the
        stream's clock: each turn's first token is its prompt's. The client's clock over the
        whole request covers them all, the prompt's pass counting as a step."""
        if self.timed_by in ("server", "stream"):
            return max(1, self.tokens - self.turns)
        return self.tokens

    @property
    def per_token(self) -> float:
        return self.seconds / self.decoded if self.tokens else float("inf")

    @property
    def quiet_s(self) -> float:
        """The decode time with the outside load it ran beside taken out (LOADED)."""
        return self.seconds * self.calm

    @property
    def calm(self) -> float:
        """The share of its time the request would have taken without the outside load."""
        return 1 - LOADED * min(self.busy, 1.0)

    @property
    def end_to_end(self) -> float:
        """What the client waited for, send to last byte, the outside load taken out (the
        decode time where no wall time was recorded)."""
        return (self.wall_s or self.seconds) * self.calm

    @property
    def first_token(self) -> float:
        """The time to the first token, the outside load taken out."""
        return self.ttft_s * self.calm


class Lab(Protocol):
    restarts: int  # servers restarted because they remember earlier requests (Adapter.remembers)

    @property
    def say(self) -> Say: ...

    @property
    def workload(self) -> Workload: ...

    def keep(self, configs: Sequence[Config]) -> None:
        """Exactly these configurations served from now on (others stopped)."""

    def ask(self, label: str, prompt: int, max_tokens: int) -> Timed: ...

    def fits(self, plans: Sequence[Plan]) -> bool:
        """Whether these plans' servers fit in memory at once."""

    def clock(self) -> float: ...

    def close(self) -> None: ...


def fits_together(backend: Adapter, plans: Sequence[Plan]) -> bool:
    """Whether the plans' servers fit in memory at once."""
    return len(plans) < 2 or together(backend, plans) <= plans[0].memory.budget.limit


def together(backend: Adapter, plans: Sequence[Plan]) -> int:
    """Bytes the plans' servers hold at once. Weights that processes share by mmap (the adapter
    says when: llama.cpp on CPU and Metal) are counted once per model file."""
    total, seen = 0, set()
    for plan in plans:
        mem = plan.memory
        total += mem.kv_target_bytes + mem.kv_draft_bytes + mem.compute_bytes
        for info, size in ((plan.target, mem.target_bytes), (plan.draft, mem.draft_bytes)):
            if info is None or size <= 0:
                continue
            key = str(info.path or info.ref)
            if key in seen and backend.shares_weights(plan):
                continue
            seen.add(key)
            total += size
    return total


BUSY = 0.5  # cores other processes used during a request, from which it counts as disturbed


def rounds(lab: Lab, configs: Sequence[Config], prompts: Sequence[int], max_tokens: int,
           block: int, sequential: bool, lengths: Mapping[str, int] | None = None,
           again: Callable[[], bool] | None = None,
           stop: Callable[[], bool] | None = None,
           narrow: Callable[[int, Sequence[Config], Sequence[Timed]], Sequence[Config]]
           | None = None,
           ) -> list[Timed]:
    """Every prompt once on every configuration. Paired: all served, each prompt asked of each
    in turn (the order rotating). Sequential: one server at a time, all prompts on it, the order
    of configurations reversed every other block (A B, B A, ...: a server already up stays).
    `lengths`: max_tokens by label, where it differs. `again`: while it says so, a request
    during which other processes used BUSY cores or more is asked once more (both count:
    outside load only slows a request, and the low quantiles take the calm one). `stop`: once
    it says so, nothing more is asked (a budget's end: the block stays partial). `narrow`
    (paired): before the n-th prompt, the configurations to ask it of, from the timings of the
    block so far (the servers stay up)."""
    out = []
    size = lengths or {}

    def ask(label: str, i: int) -> None:
        if stop is not None and stop():
            return
        t = _tag(lab.ask(label, i, size.get(label, max_tokens)), block)
        out.append(t)
        if again is not None and t.busy >= BUSY and again():
            out.append(_tag(lab.ask(label, i, size.get(label, max_tokens)), block))

    if not sequential:
        lab.keep(configs)
        for n, i in enumerate(prompts):
            now = list(narrow(n, configs, out) if narrow is not None else configs)
            shift = (block + n) % len(now)
            for label, _plan in [*now[shift:], *now[:shift]]:
                ask(label, i)
        return out
    order = list(configs) if block % 2 == 0 else list(reversed(configs))
    for cfg in order:
        lab.keep([cfg])
        for i in prompts:
            ask(cfg[0], i)
    return out


def _tag(t: Timed, block: int) -> Timed:
    return replace(t, block=block)


def prompt_name(work: Workload, i: int) -> str:
    """A prompt as the reports name it: its category and its number there ('docqa#3')."""
    cat = work.prompts[i].category
    return f"{cat}#{[n for n, p in enumerate(work.prompts) if p.category == cat].index(i) + 1}"


def too_long(work: Workload, i: int, exc: client.TooLong, ctx: int) -> str:
    """One line: the prompt that does not fit the context, with the figures."""
    figures = (f"{exc.prompt_tokens} tokens where a request has {exc.context}"
               if exc.prompt_tokens is not None and exc.context is not None else str(exc))
    return (f"prompt {prompt_name(work, i)} does not fit the plan's context ({figures}; the "
            f"profile's context is {ctx} tokens): raise [server] context, or leave the prompt "
            "out (nothing is truncated)")


class CpuWatch:
    """Other processes' CPU (in cores) between two readings: the machine's busy time less this
    process's and its children's (the servers)."""

    def __init__(self) -> None:
        self._me = psutil.Process()
        self._last = self._read()

    def _read(self) -> tuple[float, float, float]:
        fields = psutil.cpu_times()._asdict()
        total = sum(v for k, v in fields.items() if k not in ("guest", "guest_nice"))  # in user
        busy = total - fields["idle"] - fields.get("iowait", 0.0)
        ours = 0.0
        for proc in [self._me, *self._me.children(recursive=True)]:
            try:
                c = proc.cpu_times()
                ours += c.user + c.system
            except psutil.Error:
                continue
        return time.monotonic(), busy, ours

    def others(self) -> float:
        now, busy, ours = self._read()
        then, busy0, ours0 = self._last
        self._last = (now, busy, ours)
        wall = now - then
        return max(0.0, (busy - busy0) - max(0.0, ours - ours0)) / wall if wall > 0 else 0.0


@dataclass
class ServerLab:
    """Real servers (engine.serve), each started when first kept and stopped when dropped."""

    backend: Adapter
    installed: Installed
    workload: Workload
    logs: Path
    say: Say = print
    prefix: str = "tune"
    _up: dict[str, tuple[ExitStack, engine.Served]] = field(default_factory=dict)
    _watch: CpuWatch | None = None
    _seen: dict[str, set[int]] = field(default_factory=dict)  # prompts each server answered
    restarts: int = 0  # of servers that remember across requests (Adapter.remembers)

    def keep(self, configs: Sequence[Config]) -> None:
        wanted = dict(configs)
        for label in [lbl for lbl in self._up if lbl not in wanted]:
            self._stop(label)
        for label, plan in configs:
            if label not in self._up:
                self._start(label, plan)

    def _start(self, label: str, plan: Plan, again: bool = False) -> None:
        if not again:
            self.say(f"starting {label} server")
        stack = ExitStack()
        try:
            srv = stack.enter_context(engine.serve(plan, self.backend, self.installed,
                                                   self.logs, f"{self.prefix}-{label}"))
        except BaseException:
            stack.close()
            raise
        self._up[label] = (stack, srv)
        self._seen[label] = set()

    def _stop(self, label: str) -> None:
        self._up.pop(label)[0].close()
        self._seen.pop(label, None)

    def ask(self, label: str, prompt: int, max_tokens: int) -> Timed:
        seen = self._seen.setdefault(label, set())
        plan = self._up[label][1].plan
        if prompt in seen and self.backend.remembers(plan):
            self._stop(label)  # it would draft this reply from memory: start it afresh
            self._start(label, plan, again=True)
            self.restarts += 1
            seen = self._seen[label]
        seen.add(prompt)
        if self._watch is None:
            self._watch = CpuWatch()
        self._watch.others()
        asked = self.workload.prompts[prompt]
        try:
            got = self._up[label][1].ask(asked, max_tokens)
        except client.TooLong as exc:
            raise ProfileError(too_long(self.workload, prompt, exc, plan.context)) from None
        reply = got.reply
        seconds = reply.tokens / reply.decode_tps if reply.decode_tps > 0 else reply.wall_s
        return Timed(label, prompt, reply.tokens, seconds, got.spec, reply.text,
                     self._watch.others(), wall_s=reply.wall_s, timed_by=reply.timed_by,
                     ttft_s=reply.ttft_s, prompt_tokens=reply.prompt_tokens, turns=got.turns)

    def served(self, label: str) -> engine.Served:
        """The server of a kept configuration (for concurrent rounds): what it is asked outside
        `ask` counts as seen (a remembering server starts afresh before it is timed again)."""
        self._seen[label] = set(range(len(self.workload.prompts)))
        return self._up[label][1]

    def serve(self, label: str, plan: Plan, shared: bool = True) -> engine.Served:
        """A server of exactly `plan`: one already up (under any label, when `shared`), else
        started as `label` beside the others (none is dropped): each configuration starts
        once. Not `shared`: a second server of its own (the check of the check)."""
        found = next((srv for lbl, (_, srv) in self._up.items()
                      if srv.plan == plan and (shared or lbl == label)), None)
        if found is None:
            self.keep([*((lbl, srv.plan) for lbl, (_, srv) in self._up.items()), (label, plan)])
            found = self._up[label][1]
        for lbl, (_, srv) in self._up.items():
            if srv is found:
                self.served(lbl)
        return found

    def fits(self, plans: Sequence[Plan]) -> bool:
        return fits_together(self.backend, plans)

    def clock(self) -> float:
        return time.monotonic()

    def close(self) -> None:
        while self._up:
            self._stop(next(iter(self._up)))
