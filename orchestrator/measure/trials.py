"""Trials for `specctl tune`: one configuration measured on the tune prompts, on its own
short-lived server, one prompt at a time. A trial that can no longer win gives up early: after
each prompt the prompts not yet measured are put at their best case (any speed, or a bound) and
it stops once even that cannot lift its median speedup above what it must beat."""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Protocol

from specctl.adapters.base import Adapter, Installed, SpecStats
from specctl.orchestrator.measure import engine
from specctl.orchestrator.measure.bench import load_suite
from specctl.orchestrator.measure.tuned import Measured
from specctl.orchestrator.planning.plan import Plan

Say = Callable[[str], None]


def tune_prompts() -> list[str]:
    """One prompt per category: code, chat, and a copy-heavy one (where n-gram can win)."""
    return [load_suite("code")[0], load_suite("chat")[0], load_suite("summarize")[1]]


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

    @property
    def spec(self) -> SpecStats:
        return sum(self.specs, SpecStats())

    @property
    def complete(self) -> bool:
        return len(self.prompts) == self.of

    @property
    def median_tps(self) -> float:
        return statistics.median(self.tps)

    def plus(self, prompt: int, tps: float, spec: SpecStats, text: str = "") -> Run:
        """This run with one more prompt measured."""
        return replace(self, prompts=(*self.prompts, prompt), tps=(*self.tps, tps),
                       specs=(*self.specs, spec), texts=(*self.texts, text))


GiveUp = Callable[[Run], bool]


class Measurer(Protocol):
    @property
    def say(self) -> Say: ...

    @property
    def prompts(self) -> tuple[str, ...]: ...

    def run(self, plan: Plan, label: str, order: Sequence[int] | None = None,
            give_up: GiveUp | None = None) -> Run: ...


@dataclass(frozen=True)
class Bench:
    """How configurations are measured: the same prompts, one server at a time."""

    backend: Adapter
    installed: Installed
    prompts: tuple[str, ...]
    max_tokens: int
    logs: Path
    say: Say = print

    def run(self, plan: Plan, label: str, order: Sequence[int] | None = None,
            give_up: GiveUp | None = None) -> Run:
        """Measure `plan` on the tune prompts (or the ones in `order`), one prompt at a time,
        stopping when `give_up` says the rest cannot change the answer."""
        which = tuple(order) if order is not None else tuple(range(len(self.prompts)))
        self.say(f"measuring {label}")
        start = time.monotonic()
        run = Run(label, plan, (), (), (), 0.0, len(self.prompts))
        with engine.serve(plan, self.backend, self.installed, self.logs, f"tune-{label}") as srv:
            for i in which:
                got = srv.ask(self.prompts[i], self.max_tokens)
                run = run.plus(i, got.reply.decode_tps, got.spec, got.reply.text)
                if give_up is not None and len(run.prompts) < len(which) and give_up(run):
                    self.say(f"{label}: cannot win, stopped after {len(run.prompts)} prompts")
                    break
        return replace(run, seconds=time.monotonic() - start)


def ratios(run: Run, baseline: Run) -> dict[int, float]:
    """Speedup over the baseline on each prompt both measured."""
    base = dict(zip(baseline.prompts, baseline.tps, strict=True))
    return {i: tps / base[i] for i, tps in zip(run.prompts, run.tps, strict=True) if base[i] > 0}


def speedup(run: Run, baseline: Run) -> float:
    """Median of the ratios paired by prompt with the baseline's run."""
    return statistics.median(ratios(run, baseline).values())


def cannot_beat(baseline: Run, need: float, bounds: Mapping[int, float] | None = None) -> GiveUp:
    """Gives up once the median ratio cannot exceed `need`, even with every prompt not yet
    measured at its bound (no bound: any speed)."""
    def hopeless(run: Run) -> bool:
        got = ratios(run, baseline)
        best_case = [got.get(i, (bounds or {}).get(i, math.inf)) for i in baseline.prompts]
        return statistics.median(best_case) <= need
    return hopeless


def order(incumbent: Run, rank: Mapping[int, float] | None = None) -> tuple[int, ...]:
    """Prompts by descending rank (a bound: measuring the highest one first lowers the best case
    most), ties the quickest first: a loss is settled soonest."""
    tps = dict(zip(incumbent.prompts, incumbent.tps, strict=True))
    return tuple(sorted(tps, key=lambda i: (-(rank or {}).get(i, math.inf), -tps[i])))


def measured(run: Run, baseline: Run) -> Measured:
    label = run.label if run.complete else f"{run.label} ({len(run.prompts)}/{run.of} prompts)"
    return Measured(label=label, method=run.plan.method, k=run.plan.k, p_min=run.plan.p_min,
                    speedup=round(speedup(run, baseline), 4), tps=round(run.median_tps, 3),
                    acceptance=run.spec.acceptance_rate, seconds=round(run.seconds, 1))
