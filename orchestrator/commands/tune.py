"""`specctl tune`: resolve the plan once (without the saved result), measure on real servers
(measure/tune/flow.py's race) within the budget, less what the sampling check will take, add the
k-by-batch schedule where the engine switches k by batch size, check sampling before saving,
and save the decision, settled or provisional."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specctl.orchestrator.errors import SpecctlError
from specctl.orchestrator.humanize import Say
from specctl.orchestrator.measure.estimates.intervals import Objective
from specctl.orchestrator.measure.lab import servers as lab
from specctl.orchestrator.measure.lossless import check as lossless
from specctl.orchestrator.measure.prompts.workload import Workload
from specctl.orchestrator.measure.results import tuned as tuned_mod
from specctl.orchestrator.measure.tune import flow as tune_mod
from specctl.orchestrator.measure.tune.sweep import Sweep
from specctl.orchestrator.planning import costmodel

if TYPE_CHECKING:
    from specctl.orchestrator.app import App, Resolved
    from specctl.orchestrator.contract.plan import Plan
    from specctl.orchestrator.measure.results.tuned import Measured



@dataclass(frozen=True)
class Ask:
    """What the user asked of `tune` (parsed by the CLI)."""

    profile: str
    work: Workload
    max_k: int = 8
    concurrency: int | None = None  # requests at once (default: one)
    max_tokens: int = 64
    quality: bool = True
    precision: float = 0.05
    budget: float = 240.0
    sequential: bool = False
    objective: Objective = "latency"  # what the race ranks by (measure/estimates/intervals.py)


GATE_SHARE = 0.25  # of the budget, kept for the sampling check after the race (cpu-demo: 60-67 s)


@dataclass(frozen=True)
class Outcome:
    result: tuned_mod.Result
    saved: Path
    profile: str


@dataclass(frozen=True)
class Swept:
    """What `tune --exhaustive` measured: every k against the baseline."""

    results: list[Measured]
    baseline_tps: float
    seconds: float
    previous: tuned_mod.Result | None  # the saved result, to compare with


def what_if(alpha: float, cost: float, max_k: int) -> dict[str, Any]:
    """The cost model alone: the best k for alpha and c, with v(k) = 1."""
    curve = costmodel.curve(alpha, cost, max_k)
    best, gain = costmodel.best(curve), costmodel.gain(curve)
    verdict = (f"k={gain.k}: predicted {gain.speedup:.2f}x" if gain else
               f"no k is faster than the target alone (the highest is {best.speedup:.2f}x, "
               f"k={best.k}): speculation off")
    return {"alpha": alpha, "cost": cost, "best_k": gain.k if gain else None,
            "speedup": round(best.speedup, 4), "verdict": verdict,
            "curve": [{"k": p.k, "tokens_per_step": round(p.tokens_per_step, 4),
                       "speedup": round(p.speedup, 4)} for p in curve]}


def saved(app: App, profile_ref: str) -> tuned_mod.Result:
    """`tune --show`: the saved result for this machine, build and model files."""
    resolved = app.resolve(profile_ref, use_tuned=False)
    found = tuned_mod.load(app.dirs.tuned, app.tuned_key(resolved.plan, resolved.installed))
    if found is None:
        name = resolved.plan.profile
        raise SpecctlError(f"no tuning result for {name} on this machine; run `specctl tune "
                           f"--profile {name}`")
    return found


def run(app: App, ask: Ask, step: Say) -> Outcome:
    resolved = app.resolve(ask.profile, use_tuned=False)
    level = ask.concurrency or 1
    runner = _runner(app, resolved, ask, step, level)
    result = _tuned(app, resolved, ask, step)
    if resolved.backend.k_per_batch(resolved.installed) and level > 1 \
            and result.method == "draft":
        result = _scheduled(resolved, result, runner, level)
    if ask.quality and result.method != "none":
        result = result.model_copy(update={"quality": _gate(app, resolved, result, ask, step)})
    result = result.model_copy(update={
        "key": app.tuned_key(resolved.plan, resolved.installed),
        "workload": ask.work.describe(), "concurrency": level})
    return Outcome(result, tuned_mod.save(app.dirs.tuned, result), resolved.plan.profile)


def sweep(app: App, ask: Ask, step: Say) -> Swept:
    """--exhaustive: every k in 1..max-k measured in full (to check the tuner itself)."""
    resolved = app.resolve(ask.profile, use_tuned=False)
    runner = _runner(app, resolved, ask, step, ask.concurrency or 1)
    results, base_tps, seconds = tune_mod.sweep(resolved.plan, runner,
                                                range(1, ask.max_k + 1))
    try:
        previous = tuned_mod.load(app.dirs.tuned,
                                  app.tuned_key(resolved.plan, resolved.installed))
    except SpecctlError:
        previous = None
    return Swept(results, base_tps, seconds, previous)


def _runner(app: App, resolved: Resolved, ask: Ask, step: Say, level: int) -> Sweep:
    """Whole runs on a server each (the sweep, the k-by-batch schedule): at one request where
    the engine switches k by batch size (the schedule covers the others)."""
    runner = Sweep(resolved.backend, resolved.installed, ask.work, ask.max_tokens,
                          app.dirs.logs, step, level)
    return replace(runner, concurrency=1) if resolved.backend.k_per_batch(
        resolved.installed) else runner


def _tuned(app: App, resolved: Resolved, ask: Ask, step: Say) -> tuned_mod.Result:
    """The race on real servers (measure/lab/servers.py), every one stopped at the end."""
    now = _incumbent(app, resolved)
    room = lab.ServerLab(resolved.backend, resolved.installed, ask.work, app.dirs.logs, step)
    try:
        return tune_mod.tune(resolved.plan, room, ask.max_k, max_tokens=ask.max_tokens,
                             precision=ask.precision, budget=ask.budget,
                             sequential=ask.sequential, methods=resolved.installed.methods,
                             chains=resolved.installed.chains,
                             reserve=ask.budget * GATE_SHARE if ask.quality else 0.0,
                             objective=ask.objective, incumbent=now)
    finally:
        room.close()


def _incumbent(app: App, resolved: Resolved) -> Plan | None:
    """The setting served now, where a tune of this plan is saved for this machine and build:
    its pick (None: none saved, or it speculates not; the cost model's guess leads)."""
    found = tuned_mod.load(app.dirs.tuned, app.tuned_key(resolved.plan, resolved.installed))
    if found is None or found.method == "none":
        return None
    return _setting(resolved.plan, found, found.p_min)


def _setting(plan: Plan, result: tuned_mod.Result, p_min: float | None) -> Plan:
    """`plan` serving `result`'s setting (its draft model only for a draft), at `p_min`."""
    return plan.but(method=result.method, k=result.k, p_min=p_min,
                    draft=plan.draft if result.method == "draft" else None,
                    chain=tuned_mod.steps_of(result.chain))


def _scheduled(resolved: Resolved, result: tuned_mod.Result, runner: Sweep,
               level: int) -> tuned_mod.Result:
    """k by batch size, for engines that switch k per batch (tuned at one request first)."""
    levels = sorted({1, level, *(2 ** n for n in range(9) if 2 ** n < level)})
    ks = sorted({max(1, result.k // 2), result.k})
    ranges, notes = tune_mod.schedule(resolved.plan.but(p_min=result.p_min), runner, levels,
                                      ks)
    return result.model_copy(update={"k_by_batch": list(ranges), "schedule_notes": notes})


def _gate(app: App, resolved: Resolved, result: tuned_mod.Result, ask: Ask,
          step: Say) -> str:
    """The sampling check of the choice (lossless.gate), at the profile's sampling (0.8 when
    the profile samples greedily: the check is about sampling)."""
    plan = resolved.plan
    chosen = _setting(plan, result, result.p_min if result.p_min is not None else plan.p_min)
    sampling = resolved.profile.sampling
    how = lossless.short(sampling.temperature or 0.8, sampling.top_p)
    return lossless.gate(chosen, resolved.backend, resolved.installed, ask.work.by_category(),
                         how, app.dirs.logs, step, replies=result.replies)
