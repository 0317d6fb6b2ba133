"""Runs for `tune --exhaustive` and the k-by-batch-size schedule: one configuration measured on
the workload's prompts, on its own short-lived server, one prompt at a time (at concurrency B:
B concurrent copies of it, measured as their aggregate tokens/s). The score is the workload's
throughput against the baseline's (measure/prompts/workload.py). `tune` itself decides on paired
trials (race.py)."""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Protocol

from specctl.orchestrator.contract.adapter import Adapter
from specctl.orchestrator.contract.launch import Installed
from specctl.orchestrator.contract.plan import Plan
from specctl.orchestrator.contract.stats import SpecStats
from specctl.orchestrator.humanize import Say
from specctl.orchestrator.measure.lab import engine
from specctl.orchestrator.measure.prompts import workload
from specctl.orchestrator.measure.prompts.workload import Timing, Workload
from specctl.orchestrator.measure.results.tuned import Measured, chain_of


@dataclass(frozen=True)
class Run:
    label: str
    plan: Plan
    prompts: tuple[int, ...]  # the tune prompts measured, in the order measured
    tps: tuple[float, ...]  # decode tokens/s, one per prompt
    specs: tuple[SpecStats, ...]  # draft counters, one per prompt
    seconds: float
    of: int  # how many tune prompts there are: a run that gave up measured fewer
    texts: tuple[str, ...] = ()  # the replies, one per prompt
    tokens: tuple[int, ...] = ()  # tokens of each reply (all streams of its round)
    categories: tuple[str, ...] = ()  # of every tune prompt, by index
    weights: tuple[tuple[str, float], ...] = ()  # category shares of the workload

    @property
    def spec(self) -> SpecStats:
        return sum(self.specs, SpecStats())

    @property
    def complete(self) -> bool:
        return len(self.prompts) == self.of

    @property
    def median_tps(self) -> float:
        return statistics.median(self.tps)

    def plus(self, prompt: int, tps: float, spec: SpecStats, text: str = "",
             tokens: int = 1) -> Run:
        """This run with one more prompt measured."""
        return replace(self, prompts=(*self.prompts, prompt), tps=(*self.tps, tps),
                       specs=(*self.specs, spec), texts=(*self.texts, text),
                       tokens=(*self.tokens, tokens))

    def requests(self) -> dict[int, Timing]:
        """Each measured prompt as a workload request."""
        cats = self.categories or ("all",) * self.of
        toks = self.tokens or (1,) * len(self.prompts)
        return {i: Timing(cats[i], n, n / tps if tps > 0 else math.inf)
                for i, tps, n in zip(self.prompts, self.tps, toks, strict=True)}


GiveUp = Callable[[Run], bool]


class Measurer(Protocol):
    @property
    def say(self) -> Say: ...

    @property
    def prompts(self) -> tuple[str, ...]: ...

    def run(self, plan: Plan, label: str, order: Sequence[int] | None = None,
            give_up: GiveUp | None = None) -> Run: ...


@dataclass(frozen=True)
class Sweep:
    """How configurations are measured: the same prompts, one server at a time; at concurrency
    above 1, each prompt as that many concurrent requests (enough slots are planned)."""

    backend: Adapter
    installed: Installed
    workload: Workload
    max_tokens: int
    logs: Path
    say: Say = print
    concurrency: int = 1

    @property
    def prompts(self) -> tuple[str, ...]:
        return tuple(p.text for p in self.workload.prompts)

    def run(self, plan: Plan, label: str, order: Sequence[int] | None = None,
            give_up: GiveUp | None = None) -> Run:
        """Measure `plan` on the tune prompts (or the ones in `order`), one prompt at a time,
        stopping when `give_up` says the rest cannot change the answer."""
        which = tuple(order) if order is not None else tuple(range(len(self.prompts)))
        self.say(f"measuring {label}")
        start = time.monotonic()
        run = Run(label, plan, (), (), (), 0.0, len(self.prompts),
                  categories=tuple(p.category for p in self.workload.prompts),
                  weights=tuple(self.workload.weights().items()))
        served = plan.but(parallel=max(plan.parallel, self.concurrency))
        with engine.serve(served, self.backend, self.installed, self.logs,
                          f"tune-{label}") as srv:
            for i in which:
                run = self._one(srv, run, i)
                if give_up is not None and len(run.prompts) < len(which) and give_up(run):
                    self.say(f"{label}: cannot win, stopped after {len(run.prompts)} prompts")
                    break
        return replace(run, seconds=time.monotonic() - start)

    def at_levels(self, plan: Plan, label: str, levels: Sequence[int]) -> dict[int, Run]:
        """Measure `plan` on every prompt at each concurrency level, on one server."""
        self.say(f"measuring {label} at {', '.join(map(str, levels))} concurrent requests")
        base = Run(label, plan, (), (), (), 0.0, len(self.prompts),
                   categories=tuple(p.category for p in self.workload.prompts),
                   weights=tuple(self.workload.weights().items()))
        runs = {}
        served = plan.but(parallel=max(plan.parallel, *levels))
        with engine.serve(served, self.backend, self.installed, self.logs,
                          f"tune-{label}") as srv:
            for level in levels:
                start, run = time.monotonic(), base
                for i in range(len(self.prompts)):
                    run = replace(self, concurrency=level)._one(srv, run, i)
                runs[level] = replace(run, seconds=time.monotonic() - start)
        return runs

    def _one(self, srv: engine.Served, run: Run, i: int) -> Run:
        if self.concurrency == 1:
            got = srv.ask(self.prompts[i], self.max_tokens)
            return run.plus(i, got.reply.decode_tps, got.spec, got.reply.text, got.reply.tokens)
        done = srv.ask_together([self.prompts[i]] * self.concurrency, self.max_tokens)
        tps = done.tokens / done.wall_s if done.wall_s > 0 else 0.0
        return run.plus(i, tps, done.spec, done.replies[0].text, done.tokens)


def ratios(run: Run, baseline: Run) -> dict[int, float]:
    """Speedup over the baseline on each prompt both measured."""
    base = dict(zip(baseline.prompts, baseline.tps, strict=True))
    return {i: tps / base[i] for i, tps in zip(run.prompts, run.tps, strict=True) if base[i] > 0}


def _score(run: Run, baseline: Run, times: Mapping[int, float] | None = None,
           only: str | None = None) -> float:
    """The workload speedup on the prompts both measured (`times` puts prompts not measured by
    `run` at a given duration: their best case)."""
    weights = dict(run.weights or baseline.weights) or {"all": 1.0}
    if only is not None:
        weights = {only: 1.0}
    mine, base = run.requests(), baseline.requests()
    mine |= {i: Timing(base[i].category, base[i].tokens, t) for i, t in (times or {}).items()
             if i not in mine and i in base}
    both = [i for i in mine if i in base]
    return workload.throughput_ratio([mine[i] for i in both], [base[i] for i in both], weights)


def run_ratio(run: Run, baseline: Run) -> float:
    """The workload's throughput against the baseline's, on the prompts both measured."""
    return _score(run, baseline)


def category_speedups(run: Run, baseline: Run) -> dict[str, float]:
    cats = {run.categories[i] for i in run.prompts} if run.categories else set()
    return {c: _score(run, baseline, only=c) for c in sorted(cats)}


def measured(run: Run, baseline: Run) -> Measured:
    label = run.label if run.complete else f"{run.label} ({len(run.prompts)}/{run.of} prompts)"
    return Measured(label=label, method=run.plan.method, k=run.plan.k, p_min=run.plan.p_min,
                    chain=chain_of(run.plan.chain),
                    speedup=round(run_ratio(run, baseline), 4), tps=round(run.median_tps, 3),
                    acceptance=run.spec.acceptance_rate, seconds=round(run.seconds, 1),
                    categories={c: round(v, 4) for c, v in
                                category_speedups(run, baseline).items()})
