"""`specctl bench`: resolve the plan once, serve each configuration once for speed and (with
--quality) sampling, judge, certify, save. `versus`: `bench --backends`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specctl.orchestrator.contract.plan import Plan
from specctl.orchestrator.errors import ProfileError, SpecctlError, StateError
from specctl.orchestrator.humanize import Say
from specctl.orchestrator.measure.bench import flow as bench_mod
from specctl.orchestrator.measure.bench import routed, verdicts
from specctl.orchestrator.measure.estimates.intervals import Objective
from specctl.orchestrator.measure.lab import servers as lab
from specctl.orchestrator.measure.lossless import check as lossless
from specctl.orchestrator.measure.lossless import structured
from specctl.orchestrator.measure.lossless import twosample as quality
from specctl.orchestrator.measure.prompts import structured as structured_prompts
from specctl.orchestrator.measure.prompts import suites
from specctl.orchestrator.measure.prompts.workload import Workload
from specctl.orchestrator.measure.results import reports
from specctl.orchestrator.measure.route import choose as route
from specctl.orchestrator.models import digest

if TYPE_CHECKING:
    from specctl.orchestrator.app import App, Resolved
    from specctl.orchestrator.measure.results import winners



@dataclass(frozen=True)
class Ask:
    """What the user asked of `bench` (parsed by the CLI)."""

    profile: str
    work: Workload
    ks: tuple[int, ...] = ()
    also: tuple[str, ...] = ()
    repeats: int = 2
    max_tokens: int = 96
    levels: tuple[int, ...] = ()  # concurrent streams beside one (none: one alone)
    quality: bool = False
    against: str = "speculative"
    samples: int = 32
    temperature: float | None = None
    top_p: float | None = None
    floor: bool | None = None
    precision: float | None = None
    budget: float = 600.0
    sequential: bool = False
    untuned: bool = False  # the profile as written, not what `tune` saved
    objective: Objective = "latency"  # what the speedups are of (measure/estimates/intervals.py)


@dataclass(frozen=True)
class Outcome:
    report: dict[str, Any]
    saved: Path  # the report with its raw samples, under the state dir
    certificate: str | None  # what the certificate says and where, with --quality

    def problem(self) -> str | None:
        """One line when the verdict says not to use a configuration, else None."""
        if self.report["outcome"] not in verdicts.PROBLEMS:
            return None
        bad = ", ".join(dict.fromkeys(f["config"] for f in self.report["findings"]))
        return (f"{self.report['outcome']}: do not use {bad} (the verdict above says why; the "
                f"report is {self.saved})")


def resolve(app: App, ask: Ask) -> Resolved:
    """The plan to measure: what `tune` saved unless --untuned."""
    return app.resolve(ask.profile, use_tuned=not ask.untuned)


def drafts_of(app: App, ask: Ask, resolved: Resolved, step: Say) -> Resolved | None:
    """Where the drafts asked for (--k with speculation tuned off, --also draft...) take their
    draft model when the saved setting has none: the profile as written. A saved setting that
    speculates (n-gram) is still what is measured as tune's pick (before, bench measured the
    profile as written in its place: cpu-demo's tuned n-gram k=8 was not in a bench that asked
    --also draft:3); one saved "off" is the baseline itself, and the profile is measured."""
    wants = (ask.ks and not resolved.plan.speculative) or bench_mod.asks_for_draft(ask.also)
    if resolved.plan.draft is not None or not wants or ask.untuned:
        return None
    written = app.resolve(ask.profile, use_tuned=False)
    if written.plan.draft is None:
        return None
    step(f"the setting `specctl tune` saved has no draft model ({resolved.plan.describe_spec()})"
         f": the drafts asked for use the profile's ({written.plan.draft.name})")
    return written


def run(app: App, ask: Ask, step: Say) -> Outcome:
    resolved = resolve(app, ask)
    written = drafts_of(app, ask, resolved, step)
    if written is not None and not resolved.plan.speculative:
        resolved = written  # --quality, the floor and the certificate are the drafts'
    plan = resolved.plan
    drafts = written.plan if written is not None else None
    want_floor = ask.quality if ask.floor is None else ask.floor
    rejecting = resolved.backend.rejecting(plan, resolved.installed) if want_floor else None
    also = tuple(a for a in ask.also if a.strip() != bench_mod.ROUTED)
    configs = bench_mod.configs_for(plan, ask.ks, rejecting, also, drafts)
    routing = _routing(app, ask, step) if also != ask.also else None
    levels = (1,) if routing is not None else tuple(sorted({1, *ask.levels}))
    sampling = resolved.profile.sampling
    how = lossless.Sampling(ask.temperature or sampling.temperature,
                            ask.top_p or sampling.top_p, samples=ask.samples)
    slots = max([*levels, how.batch if ask.quality else 1])
    notes: dict[str, Any] = {}
    room: lab.Lab = lab.ServerLab(resolved.backend, resolved.installed, ask.work,
                                  app.dirs.logs, step, prefix="bench")
    if routing is not None:
        configs.append(bench_mod.Config(bench_mod.ROUTED, routing.members[0].plan, mixed=True))
        room = routed.RoutedLab(room, routing)
    try:
        measured = bench_mod.measure(
            configs, resolved.backend, resolved.installed, ask.work, ask.repeats,
            ask.max_tokens, app.dirs.logs, step, levels, sequential=ask.sequential,
            precision=ask.precision, budget=ask.budget, notes=notes, room=room, slots=slots,
            objective=ask.objective)
        server_lab = room.inner if isinstance(room, routed.RoutedLab) else room
        assert isinstance(server_lab, lab.ServerLab)
        checked = _sampled(server_lab, plan, rejecting, ask, how, slots, step) \
            if ask.quality else {}
        shaped = _structured(server_lab, configs, resolved, rejecting, slots, step) \
            if ask.quality else None
    finally:
        room.close()
    settings = {"workload": ask.work.describe(), "prompts": len(ask.work.prompts),
                "repeats": ask.repeats, "max_tokens": ask.max_tokens,
                "concurrency": list(levels), "objective": ask.objective}
    report = bench_mod.report(plan, resolved.installed, configs, measured, settings,
                              ask.work.weights(), notes, ask.objective)
    if routing is not None:
        report["routing"] = {"route": routing.describe(), "memory": routing.memory(),
                             **routed.confusion_report(ask.work, _suites())}
    if "quality" in checked:
        report["quality"] = {"against": ask.against, "temperature": how.temperature,
                             "top_p": how.top_p, "samples_per_prompt": how.samples,
                             "tokens": how.tokens, "categories": _json(checked["quality"]),
                             "config": verdicts.tested_label(plan)}
    if "floor" in checked:
        report["floor_quality"] = {"categories": _json(checked["floor"])}
    if shaped is not None:
        report["structured"] = shaped.to_json()
    verdicts.judge(report, resolved.backend.draft_counters)
    if routing is not None:
        report["routing"]["over_best"] = bench_mod.over_best(measured, configs, report)
    certificate = _certify(app, resolved, report) if (
        "quality" in checked and ask.against == "speculative") else None
    if certificate:
        report["certificate"] = certificate
    return Outcome(report, reports.save(app.dirs.bench, plan.profile, report), certificate)


def _routing(app: App, ask: Ask, step: Say) -> route.Route:
    """`--also routed`: the route the gateway would serve (from the saved tune's per-category
    winners); an error that says why when there is none."""
    if any(n > 1 for n in ask.levels):
        raise ProfileError("--also routed measures one request at a time; drop --concurrency")
    model = app.routable(ask.profile)
    if isinstance(model.tune, StateError):
        raise model.tune
    found, why = ((None, "not tuned yet on this machine and build (run `specctl tune`)")
                  if model.written is None or model.tune is None
                  else app.route(model.written, model.tune))
    if found is None:
        raise ProfileError(f"--also routed: no route for {ask.profile}: {why}")
    step(why)
    return found


def _suites() -> dict[str, list[str]]:
    return {name: suites.suite_texts(name) for name in suites.SUITES}


def _sampled(room: lab.ServerLab, plan: Plan, rejecting: Plan | None, ask: Ask,
             how: lossless.Sampling, slots: int, step: Say
             ) -> dict[str, dict[str, quality.QualityResult]]:
    """--quality on the servers the speed passes used (a configuration not among them, or the
    second baseline of --quality-against baseline, is started beside them): the baseline
    against the candidate, and against the floor when there is one."""
    def wide(p: Plan) -> Plan:
        return p.but(parallel=max(p.parallel, slots))

    prompts = ask.work.by_category()
    base = room.serve(bench_mod.BASELINE, wide(plan.baseline()))
    other = room.serve(f"quality-{ask.against}", wide(lossless.candidate(plan, ask.against)),
                       shared=ask.against == "speculative")
    out = {"quality": lossless.compare(base, other, prompts, how, step)}
    shaped = structured.the_sampled(structured_prompts.load(),
                                    room.backend.structured(plan, room.installed))
    if shaped is not None:  # the two-sample test on a structured prompt's completions too
        found = structured.sampled(base, other, shaped, how, step, taken=prompts)
        out["quality"][found.category] = found
    if rejecting is not None:
        floor = room.serve(bench_mod.FLOOR, wide(rejecting))
        out["floor"] = lossless.compare(base, floor, prompts, how, step)
    return out


def _structured(room: lab.ServerLab, configs: Sequence[bench_mod.Config], resolved: Resolved,
                rejecting: Plan | None, slots: int, step: Say) -> structured.Checked:
    """--quality's check of tool calls and structured output: the structured prompts asked of
    the baseline and of each speculative setting measured, on the servers already up (the
    floor's, `rejecting`, where a setting's answer differs)."""
    def wide(p: Plan) -> Plan:
        return p.but(parallel=max(p.parallel, slots))

    plan = resolved.plan
    kinds = resolved.backend.structured(plan, resolved.installed)
    base = room.serve(bench_mod.BASELINE, wide(plan.baseline()))
    others = {cfg.label: room.serve(cfg.label, wide(cfg.plan)) for cfg in configs
              if cfg.label not in (bench_mod.BASELINE, bench_mod.FLOOR, bench_mod.TWIN,
                                   bench_mod.ROUTED)}
    floor = room.serve(bench_mod.FLOOR, wide(rejecting)) if rejecting is not None else None
    return structured.compare(base, others, structured_prompts.load(), kinds, step, floor)


def _json(results: Mapping[str, quality.QualityResult]) -> dict[str, Any]:
    return {c: r.to_json() for c, r in results.items()}


def _certify(app: App, resolved: Resolved, report: dict[str, Any]) -> str:
    """Write the losslessness certificate of this `bench --quality` run; a line that says what
    it is and where."""
    from specctl.orchestrator.measure.results import certificates

    cache = digest.cache_of(app.dirs.state)
    plan, installed = resolved.plan, resolved.installed
    engine = certificates.engine_of(plan.backend, installed.version, installed.path, cache)
    cert = certificates.from_report(plan.profile, engine, certificates.setting_of(plan, cache),
                                    report)
    path = certificates.save(certificates.folder(app.dirs.state), cert)
    return f"{'passing' if cert.passed else 'FAILING'}, for {engine.describe()}; saved to {path}"


@dataclass(frozen=True)
class Versus:
    reports: list[dict[str, Any]]  # one bench report per backend
    winner: winners.FastestBackend
    saved: Path  # the winner, which `plan` now prefers


def versus(app: App, profile_ref: str, names: list[str], ks: tuple[int, ...], work: Workload,
           repeats: int, max_tokens: int, step: Say, sequential: bool = False,
           precision: float | None = None, budget: float = 600.0) -> Versus:
    """bench --backends: each backend measured in turn; the fastest saved for this machine."""
    from specctl.orchestrator.measure.bench import versus as versus_mod
    from specctl.orchestrator.measure.results import winners

    profile = app.load(profile_ref)
    entries = []
    for name in names:
        got = app.resolve(profile.model_copy(update={"backend": [name]}))
        if got.installed.assumed:
            raise SpecctlError(f"{name} is not installed here; {got.backend.install_hint}")
        entries.append(versus_mod.BackendPlan(got.plan, got.backend, got.installed))
    found, speeds = versus_mod.compare(entries, ks, work, repeats, max_tokens, app.dirs.logs,
                                       step, sequential=sequential, precision=precision,
                                       budget=budget)
    hw = entries[0].plan.hardware
    winner = winners.FastestBackend(profile=profile.name, machine=hw.name, speeds=tuple(speeds),
                            measured=winners.now(),
                            report=str(reports.save(app.dirs.bench, profile.name,
                                                    {"backends": found})))
    return Versus(found, winner, winners.save(app.dirs.state / "backends", winner,
                                              hw.fingerprint()))
