"""`bench --backends a,b`: which installed backend serves this profile fastest here.

Each backend is measured as `bench` measures one (its baseline and its own speculation: the
tuned setting when the profile says k = "auto" and `tune` has run for it), on the same prompts
and settings, one backend after the other, and judged as `bench` judges (measure/bench/verdicts.py).
Its speed is the workload's decode throughput of its best usable configuration, speculative or
not: a setting whose greedy output changed, or that did not draft, is never picked. The fastest
is saved (measure/results/winners.py) and `plan` prefers it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specctl.orchestrator.contract.adapter import Adapter
from specctl.orchestrator.contract.launch import Installed
from specctl.orchestrator.contract.plan import Plan
from specctl.orchestrator.humanize import Say
from specctl.orchestrator.measure.bench import flow as bench
from specctl.orchestrator.measure.bench import verdicts
from specctl.orchestrator.measure.prompts import workload
from specctl.orchestrator.measure.prompts.workload import Workload
from specctl.orchestrator.measure.results import winners


@dataclass(frozen=True)
class BackendPlan:
    plan: Plan
    backend: Adapter
    installed: Installed


def speed_of(report: dict[str, Any], samples: Sequence[bench.Sample],
             weights: dict[str, float], backend: str) -> winners.Speed:
    """A backend's best configuration by workload throughput (its baseline when nothing pays)."""
    def tps(config: str) -> float:
        return workload.throughput([s.request() for s in samples
                                    if s.config == config and s.level == 1], weights)

    base = tps(bench.BASELINE)
    usable = report.get("usable", list(report["configs"]))  # never a setting that changed output
    best = max(usable, key=tps, default=bench.BASELINE)
    if best == bench.BASELINE or tps(best) <= base:
        return winners.Speed(backend=backend, setting="no draft", tps=base, speedup=1.0)
    return winners.Speed(backend=backend, setting=best, tps=tps(best),
                         speedup=tps(best) / base if base else 0.0)


def compare(entries: Sequence[BackendPlan], ks: Sequence[int], work: Workload, repeats: int,
            max_tokens: int, logs: Path, say: Say,
            sequential: bool = False, precision: float | None = None, budget: float = 600.0
            ) -> tuple[list[dict[str, Any]], list[winners.Speed]]:
    reports, speeds = [], []
    for entry in entries:
        say(f"measuring {entry.plan.backend}")
        configs = bench.configs_for(entry.plan, ks)
        name = entry.plan.backend

        def step(message: str, name: str = name) -> None:
            say(f"{name}: {message}")

        notes: dict[str, Any] = {}
        samples = bench.measure(configs, entry.backend, entry.installed, work, repeats,
                                max_tokens, logs, step, sequential=sequential,
                                precision=precision, budget=budget, notes=notes)
        report = bench.report(entry.plan, entry.installed, configs, samples,
                              {"workload": work.describe(), "repeats": repeats,
                               "max_tokens": max_tokens}, work.weights(), notes)
        verdicts.judge(report, entry.backend.draft_counters)
        reports.append(report)
        speeds.append(speed_of(report, samples, work.weights(), entry.plan.backend))
    return reports, speeds
