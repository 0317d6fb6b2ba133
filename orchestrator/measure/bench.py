"""`specctl bench`: speedup against the no-draft baseline, measured honestly on this machine.

Baseline and speculative servers run the same build and model files side by side; requests go
to them interleaved (the order rotates per prompt and repeat) so machine noise hits both alike.
Temperature 0, same prompts and max_tokens; one warm-up request per server is not counted.
Acceptance comes from the backend's counters (each server's difference across each request).
The mechanics are engine's, shared with `specctl tune`.
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import asdict, dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from specctl.adapters.base import Adapter, Installed, SpecStats
from specctl.orchestrator.errors import ProfileError
from specctl.orchestrator.measure import engine, stats
from specctl.orchestrator.planning.plan import Plan

SUITES = ("chat", "code", "summarize")
HELPS = 1 + engine.MARGIN  # a config "helps" when its median speedup beats the baseline by 5%
BASELINE = "baseline"
Progress = Callable[[str], None]


def load_suite(name: str) -> list[str]:
    path = resources.files("specctl.orchestrator.measure") / "prompts" / f"{name}.json"
    if not path.is_file():
        raise ProfileError(f"no prompt suite '{name}'; choose from {', '.join(SUITES)}")
    prompts: list[str] = json.loads(path.read_text())["prompts"]
    return prompts


@dataclass(frozen=True)
class Config:
    label: str
    plan: Plan


@dataclass(frozen=True)
class Sample:
    config: str
    method: str
    k: int
    category: str
    prompt: int
    repeat: int
    tokens: int
    decode_tps: float
    wall_s: float
    timed_by: str
    drafted: int
    accepted: int
    drafts: int
    text_sha: str


def configs_for(plan: Plan, ks: Sequence[int]) -> list[Config]:
    """The baseline plus one speculative config per k (the plan's own k when none given)."""
    if not plan.speculative and not ks:
        raise ProfileError(f"{plan.profile} has speculation off; pass --k to compare drafts")
    out = [Config(BASELINE, plan.baseline())]
    for k in ks or [plan.k]:
        method = plan.method if plan.speculative else "draft"
        out.append(Config(f"{method} k={k}", plan.but(k=k, method=method)))
    return out


def measure(configs: Sequence[Config], backend: Adapter, installed: Installed,
            prompts: dict[str, list[str]], repeats: int, max_tokens: int, logs: Path,
            progress: Progress = lambda _m: None) -> list[Sample]:
    samples: list[Sample] = []
    with ExitStack() as stack:
        running: list[tuple[Config, engine.Served]] = []
        for cfg in configs:
            progress(f"starting {cfg.label} server")
            running.append((cfg, stack.enter_context(engine.serve(
                cfg.plan, backend, installed, logs, f"bench-{cfg.label}"))))
        work = [(r, cat, i, p) for r in range(repeats) for cat, ps in prompts.items()
                for i, p in enumerate(ps)]
        for step, (r, cat, i, prompt) in enumerate(work):
            progress(f"[{step + 1}/{len(work)}] {cat} #{i} repeat {r + 1}")
            shift = (r + i) % len(running)
            for cfg, srv in running[shift:] + running[:shift]:
                got = srv.ask(prompt, max_tokens)
                reply, spec = got.reply, got.spec
                samples.append(Sample(
                    config=cfg.label, method=cfg.plan.method, k=cfg.plan.k, category=cat,
                    prompt=i, repeat=r, tokens=reply.tokens, decode_tps=reply.decode_tps,
                    wall_s=round(reply.wall_s, 4), timed_by=reply.timed_by, drafted=spec.drafted,
                    accepted=spec.accepted, drafts=spec.drafts, text_sha=got.sha))
    return samples


def _group(samples: Sequence[Sample], config: str, category: str | None) -> dict[str, Any]:
    base = {(s.category, s.prompt, s.repeat): s for s in samples if s.config == BASELINE}
    mine = [s for s in samples if s.config == config and category in (None, s.category)]
    pairs = [(s, base[(s.category, s.prompt, s.repeat)]) for s in mine
             if (s.category, s.prompt, s.repeat) in base]
    ratios = stats.paired_ratios([s.decode_tps for s, _ in pairs],
                                 [b.decode_tps for _, b in pairs])
    out: dict[str, Any] = {
        "n": len(pairs),
        "baseline_tps": statistics.median([b.decode_tps for _, b in pairs]) if pairs else None,
        "tps": statistics.median([s.decode_tps for s, _ in pairs]) if pairs else None,
    }
    if ratios:
        summary = stats.summarize(ratios)
        out |= {"speedup": summary.median, "speedup_low": summary.low,
                "speedup_high": summary.high, "speedup_min": summary.minimum,
                "speedup_max": summary.maximum, "noisy": summary.noisy}
    total = sum((SpecStats(s.drafted, s.accepted, s.drafts) for s, _ in pairs), SpecStats())
    out |= {"drafted": total.drafted, "accepted": total.accepted,
            "acceptance": total.acceptance_rate, "accepted_per_step": total.mean_accepted_length,
            "identical": (sum(s.text_sha == b.text_sha for s, b in pairs) / len(pairs)
                          if pairs else None)}
    return out


def summarize(samples: Sequence[Sample], configs: Sequence[Config]) -> dict[str, Any]:
    categories = sorted({s.category for s in samples})
    table = {cfg.label: {"overall": _group(samples, cfg.label, None),
                         **{c: _group(samples, cfg.label, c) for c in categories}}
             for cfg in configs if cfg.label != BASELINE}
    return {"configs": table, "categories": categories, "verdict": verdict(table, categories)}


def verdict(table: dict[str, dict[str, dict[str, Any]]], categories: list[str]) -> str:
    best = max(table, key=lambda c: table[c]["overall"].get("speedup", 0.0))
    row = table[best]
    overall = row["overall"].get("speedup", 0.0)
    parts = ", ".join(f"{c} {row[c]['speedup']:.2f}x" for c in categories
                      if row[c].get("speedup") is not None)
    noisy = " (noisy run: repeat on a quieter machine)" if row["overall"].get("noisy") else ""
    if overall >= HELPS:
        return f"speculation helps ({best}: {overall:.2f}x; {parts}){noisy}"
    if overall > 1 / HELPS:
        return (f"speculation makes no clear difference ({best}: {overall:.2f}x; {parts}): turn "
                f"it off to save memory{noisy}")
    return f"speculation does not pay here: turn it off ({best}: {overall:.2f}x; {parts}){noisy}"


def report(plan: Plan, installed: Installed, configs: Sequence[Config], samples: list[Sample],
           settings: dict[str, Any]) -> dict[str, Any]:
    return {"profile": plan.profile, "hardware": plan.hardware.name,
            "hardware_fingerprint": plan.hardware.fingerprint(), "backend": plan.backend,
            "backend_version": installed.version, "target": plan.target.ref,
            "draft": plan.draft.ref if plan.draft else None,
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "settings": settings,
            **summarize(samples, configs), "samples": [asdict(s) for s in samples]}
