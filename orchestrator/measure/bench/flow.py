"""`specctl bench`: speedup against the no-draft baseline, measured honestly on this machine.

Baseline and speculative servers run the same build and model files side by side; requests go
to them interleaved (the order rotates per prompt and repeat) so machine noise hits both alike.
Temperature 0, same prompts and max_tokens; one warm-up request per server is not counted.
Acceptance comes from the backend's counters (each server's difference across each request).
The mechanics are engine's, shared with `specctl tune`.

Speedups are workload throughput ratios (measure/prompts/workload.py): per category, total tokens
over total decode time against the baseline's on the same prompts; overall, the categories weighted
by the mix. Intervals are bootstrapped over the paired prompts. `--concurrency` adds rounds of N
concurrent streams per level, paired by round: aggregate tokens/s and per-request latency.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from specctl.orchestrator.config.profiles import MAX_COPY_K
from specctl.orchestrator.contract.adapter import Adapter
from specctl.orchestrator.contract.launch import Installed
from specctl.orchestrator.contract.plan import NGRAMS, Plan, Step
from specctl.orchestrator.contract.stats import SpecStats
from specctl.orchestrator.errors import ProfileError
from specctl.orchestrator.humanize import Say
from specctl.orchestrator.measure.bench import figures
from specctl.orchestrator.measure.estimates import estimate, intervals
from specctl.orchestrator.measure.estimates.intervals import Objective
from specctl.orchestrator.measure.estimates.step_costs import StepCosts, shortest
from specctl.orchestrator.measure.lab import engine
from specctl.orchestrator.measure.lab import servers as lab
from specctl.orchestrator.measure.lab.servers import Timed
from specctl.orchestrator.measure.lossless import check as lossless
from specctl.orchestrator.measure.prompts.workload import Prompt, Timing, Workload

HELPS = 1 + engine.MARGIN  # a config "helps" when its speedup beats the baseline by 5%
BASELINE = "baseline"
FLOOR = "floor"  # drafts always rejected: the greedy identity numerics allow (lossless.py)
ROUTED = "routed"  # each request to its kind's setting (measure/route/choose.py)
TWIN = "baseline twin"  # `--also baseline`: a second baseline server, the A/A control


@dataclass(frozen=True)
class Config:
    label: str
    plan: Plan
    mixed: bool = False  # the plan stands for several servers (ROUTED): no one physical
    # bound is known, and its steps are pooled by prompt (each goes to one server)

    def bound(self, cost: float | None) -> float | None:
        return None if self.mixed else _limit(self.plan, cost)

    def poolable(self) -> intervals.Pooling:
        return "prompt" if self.mixed else intervals.poolable(self.plan)


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
    level: int = 1  # concurrent streams
    round: int = 0  # at level > 1: the round (of `level` requests) this one was part of
    round_wall_s: float = 0.0  # that round's wall time
    text: str = ""  # the reply (level 1): where it leaves the baseline's (bench/verdicts.py)
    busy: float = 0.0  # cores other processes used while it ran (level 1: lab.CpuWatch)
    ttft_s: float = 0.0  # the time to the first token (a conversation's, summed over turns)
    prompt_tokens: int = 0  # the prompt's tokens as the server counted them (its last turn's)
    turns: int = 1  # a conversation's requests

    @property
    def key(self) -> tuple[int, int, int, str, int]:
        """What pairs a sample with the baseline's: the same request in the same pass."""
        return (self.level, self.repeat, self.round, self.category, self.prompt)

    def request(self) -> Timing:
        seconds = self.tokens / self.decode_tps if self.decode_tps > 0 else self.wall_s
        return Timing(self.category, self.tokens, seconds)


def configs_for(plan: Plan, ks: Sequence[int], floor: Plan | None = None,
                also: Sequence[str] = (), drafts: Plan | None = None) -> list[Config]:
    """The baseline plus one speculative config per k (the plan's own k when none given), the
    methods in `also` (`ngram-mod`, `draft+ngram-mod`: a draft at each k chained with it;
    `baseline`: the A/A control, TWIN), and the floor (the plan with every draft rejected)
    when given. `drafts`: the plan whose draft model the drafts asked for use, where `plan`
    (tune's pick: off, n-gram) has none."""
    written = drafts or plan
    asked = [a.strip() for a in also]
    twin, also = "baseline" in asked, [a for a in asked if a != "baseline"]
    if not plan.speculative and not ks and not also:
        raise ProfileError(f"{plan.profile} has speculation off; pass --k to compare drafts")
    out = [Config(BASELINE, plan.baseline())] + ([Config(TWIN, plan.baseline())] if twin
                                                 else [])
    if plan.speculative or ks:
        for k in ks or [plan.k]:
            method = plan.method if plan.speculative else "draft"
            spec = (plan if plan.speculative else written).but(k=k, method=method)
            out.append(Config(spec.short() if spec.chain else f"{method} k={k}", spec))
    for spec in _also(plan, ks, also, written):
        cfg = Config(spec.short(), spec)
        if cfg not in out:  # --also ngram:8 where the plan is it
            out.append(cfg)
    if floor is not None:
        out.append(Config(FLOOR, floor))
    return out


def _also(plan: Plan, ks: Sequence[int], also: Sequence[str], drafts: Plan) -> list[Plan]:
    """`bench --also`: each `METHOD[:K][@P][+METHOD[:K]...]` as plans (a draft at K, else at each
    --k; others at K or their usual k; `@P`: a draft's p-min; the methods after the first are
    chained n-gram methods). A draft takes its draft model from `drafts`."""
    from specctl.orchestrator.planning.planner import DEFAULT_K

    out = []
    for item in also:
        first, plus, more = item.partition("+")
        first, at, p_text = first.partition("@")
        p_min = _p_min(item, p_text) if at else None
        steps = [_step(item, part.strip(), DEFAULT_K) for part in (first + plus + more).split("+")]
        (head, k), rest = steps[0], steps[1:]
        if not head or any(m not in NGRAMS for m, _ in rest) or (at and head != "draft"):
            raise ProfileError(f"--also {item!r}: expected METHOD[:K][+NGRAM_METHOD[:K]], e.g. "
                               "ngram:8, ngram-mod, draft+ngram-mod (a draft at each --k) or "
                               "draft:3@0.5 (a draft at k=3 with p-min 0.5)")
        chain = tuple(Step(m, k_ or DEFAULT_K[m]) for m, k_ in rest)  # type: ignore[arg-type]
        if head == "draft":
            out += [drafts.but(method="draft", k=k_, chain=chain, p_min=p_min)
                    for k_ in ([k] if k else ks or [plan.k or 4])]
        else:
            out.append(plan.but(method=head, k=k or DEFAULT_K[head], draft=None, p_min=None,
                                chain=chain))
    return out


def _p_min(item: str, text: str) -> float:
    """The `@P` of an --also draft: a probability in (0, 1)."""
    try:
        value = float(text) if text.isascii() else float("nan")
    except ValueError:
        value = float("nan")
    if not 0 < value < 1:
        raise ProfileError(f"--also {item!r}: p-min {text!r} must be a number between 0 and 1, "
                           "e.g. draft:3@0.5")
    return value


def asks_for_draft(also: Sequence[str]) -> bool:
    """Whether an --also item is a draft model (`draft`, `draft:3@0.5+ngram-mod`, ...)."""
    return any(item.split("+")[0].partition(":")[0].partition("@")[0].strip() == "draft"
               for item in also)


def _step(item: str, part: str, known: Mapping[str, int]) -> tuple[str, int]:
    """`METHOD` or `METHOD:K` of an --also item (K 0: the method's usual k)."""
    method, _, k = part.partition(":")
    number = k.isascii() and k.isdigit()  # not "²", which isdigit() lets through to int()
    if method not in {*known, "draft"} or (k and not (number and 1 <= int(k) <= MAX_COPY_K)):
        raise ProfileError(f"--also {item!r}: {part!r} is not METHOD or METHOD:K "
                           f"(K 1-{MAX_COPY_K}); "
                           f"methods: draft, {', '.join(sorted(known))}")
    return method, int(k or 0)


def measure(configs: Sequence[Config], backend: Adapter, installed: Installed,
            workload: Workload, repeats: int, max_tokens: int, logs: Path,
            progress: Say = lambda _m: None, levels: Sequence[int] = (1,),
            sequential: bool = False, precision: float | None = None, budget: float = 600.0,
            notes: dict[str, Any] | None = None, room: lab.Lab | None = None,
            slots: int = 1, objective: Objective = "latency") -> list[Sample]:
    """Every prompt on every server, interleaved (lab.rounds: all servers up, or one at a time
    in alternating blocks when they do not fit in memory together, or `sequential`), `repeats`
    passes; with a `precision`, more passes until every configuration's overall 95% interval
    (by `objective`) is within it, and no pass (not even one of the `repeats`) that would end
    past `budget` seconds. Then, per level above 1, rounds of that many concurrent requests
    (servers side by side; enough slots are planned for the largest).
    `notes` receives how it was measured: c (for the physical bound), sequential, the
    baseline's drift, other processes' CPU, and what stopped it. `room`: where (default: real
    servers; the tests pass a simulated engine), left open when given: the caller's session
    serves the same servers on (`bench --quality`). `slots`: the fewest parallel slots each
    server gets (the quality check's sampling batch), so it is started once for both."""
    concurrent = max(levels) > 1
    slots = max([*levels, slots])
    own = room is None
    room = room or lab.ServerLab(backend, installed, workload, logs, progress, prefix="bench")
    cfgs = [(cfg.label, cfg.plan.but(parallel=max(cfg.plan.parallel, slots))) for cfg in configs]
    seq = sequential or not room.fits([p for _, p in cfgs])
    if seq and concurrent:
        raise ProfileError("--concurrency needs the servers side by side; drop --sequential "
                           "(or --concurrency where they do not fit together)")
    start, timed, stopped, cost = room.clock(), list[Timed](), "repeats", None
    try:
        cost = _cost(room, cfgs, seq)
        if 1 in levels:
            timed, stopped = _passes(room, cfgs, configs, workload, cost, Passes(
                repeats, max_tokens, seq, precision, budget, objective), start, progress)
        samples = [_from_timed(t, configs, workload) for t in timed]
        if concurrent and isinstance(room, lab.ServerLab):
            room.keep(cfgs)
            running = [(cfg, room.served(cfg.label)) for cfg in configs]
            for level in (n for n in levels if n > 1):
                samples += _rounds(running, workload.prompts, level, repeats, max_tokens,
                                   progress)
    finally:
        if own:
            room.close()
    if notes is not None:
        noise = intervals.noise(timed)
        notes |= {"cost": cost, "sequential": seq, "stopped": stopped,
                  "drift": round(intervals.drift(timed, BASELINE), 4),
                  "other_cores": round(noise.cores, 3), "noise": noise.text(),
                  "precision": precision,
                  "restarts": room.restarts}
    return samples


@dataclass(frozen=True)
class Passes:
    """How many passes one-at-a-time measurement makes: at least `repeats`; with a
    `precision`, more until every overall interval is within it; none past `budget`."""

    repeats: int
    max_tokens: int
    seq: bool
    precision: float | None
    budget: float
    objective: Objective


def _passes(room: lab.Lab, cfgs: Sequence[lab.Config], configs: Sequence[Config],
            workload: Workload, cost: float | None, how: Passes, start: float,
            progress: Say) -> tuple[list[Timed], str]:
    """The passes over every prompt on every server, and what stopped them (repeats,
    precision, budget: counted from `start`, when the measurement began)."""
    timed: list[Timed] = []
    first = room.clock()
    passes = 0
    while True:
        progress(f"pass {passes + 1}" + (" (one server at a time)" if how.seq else ""))
        timed += lab.rounds(room, cfgs, range(len(workload.prompts)), how.max_tokens, passes,
                            how.seq)
        passes += 1
        if how.precision is None:
            if passes < how.repeats:
                continue
            return timed, "repeats"
        if passes >= how.repeats and _widest(timed, configs, workload, cost,
                                             how.objective) <= how.precision:
            return timed, "precision"
        # the budget bounds the passes --repeats asked for too: none is started that would
        # end past it (a pass takes about as long as the mean one so far)
        if room.clock() - start + (room.clock() - first) / passes > how.budget:
            return timed, "budget"


def _cost(room: lab.Lab, cfgs: Sequence[lab.Config], seq: bool) -> float | None:
    """c (the draft's step over the target's) for the physical bound, from short requests to
    the baseline and the draft alone; None when no configuration drafts with a model."""
    drafting = next((p for _, p in cfgs if p.method == "draft" and p.draft is not None), None)
    base = next((c for c in cfgs if c[0] == BASELINE), None)
    if drafting is None or drafting.draft is None or base is None:
        return None
    alone = ("draft alone", base[1].but(target=drafting.draft))
    costs = StepCosts(room, base, seq)
    costs.time([alone], prompts=shortest(room.workload))
    return round(costs.per_token(alone[0]) / costs.per_token(base[0]), 4)


def _from_timed(t: Timed, configs: Sequence[Config], workload: Workload) -> Sample:
    cfg = next(c for c in configs if c.label == t.label)
    cat = workload.prompts[t.prompt].category
    i = [n for n, p in enumerate(workload.prompts) if p.category == cat].index(t.prompt)
    return Sample(config=cfg.label, method=cfg.plan.method, k=cfg.plan.k, category=cat,
                  prompt=i, repeat=t.block, tokens=t.tokens,
                  decode_tps=t.tokens / t.seconds if t.seconds > 0 else 0.0,
                  wall_s=round(t.wall_s, 4), timed_by=t.timed_by, drafted=t.spec.drafted,
                  accepted=t.spec.accepted, drafts=t.spec.drafts,
                  text_sha=engine.text_sha(t.text), text=t.text, busy=round(t.busy, 4),
                  ttft_s=round(t.ttft_s, 4), prompt_tokens=t.prompt_tokens, turns=t.turns)


def _widest(timed: Sequence[Timed], configs: Sequence[Config], workload: Workload,
            cost: float | None, objective: Objective) -> float:
    """The widest relative half-width of the configurations' overall intervals."""
    cats = {i: p.category for i, p in enumerate(workload.prompts)}
    widths = []
    for cfg in configs:
        if cfg.label in (BASELINE, FLOOR, TWIN):
            continue
        limit = cfg.bound(cost) or float("inf")
        pairs, _ = intervals.plausible(intervals.pair(timed, cfg.label, BASELINE), limit)
        got = intervals.paired_speedup(pairs, cats, workload.weights(), poolable=cfg.poolable(),
                                objective=objective)
        widths.append(got.half_width if got else float("inf"))
    return max(widths, default=0.0)


def _rounds(running: Sequence[tuple[Config, engine.Served]], prompts: Sequence[Prompt],
            level: int, repeats: int, max_tokens: int, progress: Say) -> list[Sample]:
    """Rounds of `level` concurrent requests: the workload's prompts in turn, each round sent to
    every server (order rotating), paired by round."""
    by_cat: dict[str, list[Prompt]] = {}
    for p in prompts:
        by_cat.setdefault(p.category, []).append(p)
    flat = [(cat, i, p) for cat, ps in by_cat.items() for i, p in enumerate(ps)]
    per_pass = max(1, len(flat) // level)
    out = []
    for r in range(repeats):
        for n in range(per_pass):
            batch = [flat[(n * level + j) % len(flat)] for j in range(level)]
            progress(f"concurrency {level}: round {n + 1}/{per_pass} repeat {r + 1}")
            shift = (r + n) % len(running)
            for cfg, srv in [*running[shift:], *running[:shift]]:
                got = srv.ask_together([p for _, _, p in batch], max_tokens)
                for (cat, i, _), reply in zip(batch, got.replies, strict=True):
                    out.append(Sample(
                        config=cfg.label, method=cfg.plan.method, k=cfg.plan.k, category=cat,
                        prompt=i, repeat=r, tokens=reply.tokens, decode_tps=reply.decode_tps,
                        wall_s=round(reply.wall_s, 4), timed_by=reply.timed_by,
                        drafted=0, accepted=0, drafts=0, text_sha=engine.text_sha(reply.text),
                        level=level, round=n, round_wall_s=round(got.wall_s, 4),
                        ttft_s=round(reply.ttft_s, 4), prompt_tokens=reply.prompt_tokens))
    return out


def _pairs(samples: Sequence[Sample], config: str, category: str | None,
           level: int = 1) -> list[tuple[Sample, Sample]]:
    base = {s.key: s for s in samples if s.config == BASELINE and s.level == level}
    return [(s, base[s.key]) for s in samples if s.config == config and s.level == level
            and category in (None, s.category) and s.key in base]


def _identity(samples: Sequence[Sample], config: str, category: str | None
              ) -> tuple[float | None, int]:
    """The share of `config`'s greedy outputs identical to the baseline's, and how many."""
    pairs = _pairs(samples, config, category)
    same = sum(s.text_sha == b.text_sha for s, b in pairs)
    return (same / len(pairs) if pairs else None), len(pairs)


def _limit(plan: Plan, cost: float | None) -> float | None:
    """The physical bound, where it can be known (only a lone draft model's needs c)."""
    chained = tuple(s.k for s in plan.chain)
    if cost is None and plan.method == "draft" and not chained:
        return None
    return intervals.bound(plan.method, plan.k, cost or 0.0, chained)


def _timed(pairs: Sequence[tuple[Sample, Sample]], ids: dict[tuple[str, int], int]
           ) -> intervals.Pairs:
    """The paired samples as timings, each (category, prompt) one prompt id (`ids`: shared by
    configurations compared on the same prompts)."""
    timed: intervals.Pairs = {}
    for s, b in pairs:
        if s.decode_tps <= 0 or b.decode_tps <= 0:
            continue
        pid = ids.setdefault((s.category, s.prompt), len(ids))
        timed.setdefault(pid, []).append((
            Timed(s.config, pid, s.tokens, s.tokens / s.decode_tps,
                  SpecStats(s.drafted, s.accepted, s.drafts), busy=s.busy, block=s.repeat,
                  timed_by=s.timed_by, wall_s=s.wall_s, ttft_s=s.ttft_s,
                  prompt_tokens=s.prompt_tokens, turns=s.turns),
            Timed(BASELINE, pid, b.tokens, b.tokens / b.decode_tps, SpecStats(), busy=b.busy,
                  block=b.repeat, timed_by=b.timed_by, wall_s=b.wall_s, ttft_s=b.ttft_s,
                  prompt_tokens=b.prompt_tokens, turns=b.turns)))
    return timed


def over_best(samples: Sequence[Sample], configs: Sequence[Config], report: Mapping[str, Any],
              label: str = ROUTED) -> dict[str, Any] | None:
    """`label`'s speedup over the best other usable configuration's (the highest overall
    figure), paired on the prompts and passes both measured, with its 95% interval: the
    baseline's time cancels, where two intervals against it each carry its noise
    (intervals.relative). None: nothing to compare with."""
    table, cost = report["configs"], report.get("conditions", {}).get("cost")
    others = [c for c in configs if c.label in report.get("usable", table) and c.label != label
              and table[c.label]["overall"].get("speedup") is not None]
    mine = next((c for c in configs if c.label == label), None)
    if mine is None or not others:
        return None
    best = max(others, key=lambda c: table[c.label]["overall"]["speedup"])
    ids: dict[tuple[str, int], int] = {}
    sides = []
    for cfg in (mine, best):
        timed = _timed(_pairs(samples, cfg.label, None), ids)
        limit = cfg.bound(cost)
        sides.append(intervals.plausible(timed, limit)[0] if limit else timed)
    cats = {pid: c for (c, _), pid in ids.items()}
    got = intervals.relative(sides[0], sides[1], cats, report["mix"],
                             poolable=(mine.poolable(), best.poolable()),
                             objective=report.get("objective", "latency"))
    if got is None:
        return None
    return {"best": best.label, "speedup": round(got.point, 4), "speedup_low": round(got.low, 4),
            "speedup_high": round(got.high, 4), "n": got.n}


def _group(samples: Sequence[Sample], config: str, category: str | None,
           weights: Mapping[str, float], limit: float | None = None,
           poolable: intervals.Pooling = "steps", objective: Objective = "latency"
           ) -> dict[str, Any]:
    """One row: the objective's speedup and the end-to-end, first-token and decode figures
    beside it (measure/bench/figures.py), acceptance, identity. `poolable`: how the configuration's
    step times pool (intervals.Pooling)."""
    pairs = _pairs(samples, config, category)
    mine = {category: 1.0} if category else weights
    out: dict[str, Any] = {
        "n": len(pairs),
        "baseline_tps": statistics.median([b.decode_tps for _, b in pairs]) if pairs else None,
        "tps": statistics.median([s.decode_tps for s, _ in pairs]) if pairs else None,
        "baseline_wall_s": statistics.median([b.wall_s for _, b in pairs]) if pairs else None,
        "wall_s": statistics.median([s.wall_s for s, _ in pairs]) if pairs else None,
    }
    if pairs:
        ids: dict[tuple[str, int], int] = {}
        timed = _timed(pairs, ids)
        out |= figures.row(timed, {pid: c for (c, _), pid in ids.items()}, mine, limit,
                           poolable, objective)
    total = sum((SpecStats(s.drafted, s.accepted, s.drafts) for s, _ in pairs), SpecStats())
    identical, _ = _identity(samples, config, category)
    out |= {"drafted": total.drafted, "accepted": total.accepted,
            "acceptance": total.acceptance_rate, "accepted_per_step": total.mean_accepted_length,
            "identical": identical}
    return out


def concurrency(samples: Sequence[Sample], config: str) -> list[dict[str, Any]]:
    """Per level above 1: aggregate tokens/s (tokens over round wall time) and median latency of
    both sides, and the speedup with its interval over the paired rounds."""
    out = []
    for level in sorted({s.level for s in samples if s.level > 1}):
        rounds: dict[tuple[int, int], dict[str, list[Sample]]] = {}
        for s, b in _pairs(samples, config, None, level):
            got = rounds.setdefault((s.repeat, s.round), {"spec": [], "base": []})
            got["spec"].append(s)
            got["base"].append(b)
        agg = [(sum(x.tokens for x in r["spec"]) / r["spec"][0].round_wall_s,
                sum(x.tokens for x in r["base"]) / r["base"][0].round_wall_s)
               for r in rounds.values() if r["spec"][0].round_wall_s > 0]
        if not agg:
            continue
        summary = estimate.summarize([a / b for a, b in agg if b > 0])
        everyone = [x for r in rounds.values() for x in r["spec"]]
        theirs = [x for r in rounds.values() for x in r["base"]]
        out.append({"level": level, "rounds": len(agg),
                    "baseline_tps": statistics.median(b for _, b in agg),
                    "tps": statistics.median(a for a, _ in agg), "speedup": summary.median,
                    "speedup_low": summary.low, "speedup_high": summary.high,
                    "baseline_latency_s": statistics.median(x.wall_s for x in theirs),
                    "latency_s": statistics.median(x.wall_s for x in everyone)})
    return out


def stops_paying(levels: Sequence[Mapping[str, Any]], single: float | None) -> int | None:
    """The lowest concurrency level where speculation no longer beats the baseline."""
    series = ([{"level": 1, "speedup": single}] if single is not None else []) + list(levels)
    return next((int(r["level"]) for r in series if r["speedup"] < HELPS), None)


def summarize(samples: Sequence[Sample], configs: Sequence[Config],
              weights: Mapping[str, float] | None = None,
              cost: float | None = None, objective: Objective = "latency") -> dict[str, Any]:
    """Per configuration, per category and overall: the objective's speedup and the figures
    beside it (measure/bench/figures.py); the end-to-end speedup by prompt length; the verdict."""
    categories = list(dict.fromkeys(s.category for s in samples if s.level == 1))
    weights = dict(weights or {c: 1 / len(categories) for c in categories})
    table = {cfg.label: {c or "overall": _group(samples, cfg.label, c, weights,
                                                cfg.bound(cost), cfg.poolable(), objective)
                         for c in [None, *categories]}
             for cfg in configs if cfg.label not in (BASELINE, FLOOR, TWIN)}
    has_floor = any(cfg.label == FLOOR for cfg in configs)
    for rows in table.values():
        for cat, row in rows.items():
            floor, _ = _identity(samples, FLOOR, None if cat == "overall" else cat)
            row["floor"] = floor if has_floor else None
            row["identity"] = lossless.floor_verdict(row["identical"], row["floor"], row["n"])
    levels = {label: concurrency(samples, label) for label in table}
    out: dict[str, Any] = {"objective": objective, "configs": table, "categories": categories,
                           "mix": weights, "buckets": {
                               cfg.label: lengths(samples, cfg.label, weights, cfg.bound(cost))
                               for cfg in configs if cfg.label in table},
                           "verdict": verdict(table, categories) if categories else ""}
    if any(cfg.label == TWIN for cfg in configs):
        out["control"] = control(samples, categories, weights, objective)
    if any(levels.values()):
        out["concurrency"] = {label: {"levels": rows, "stops_paying_at": stops_paying(
            rows, table[label]["overall"].get("speedup") if categories else None)}
            for label, rows in levels.items()}
    return out


def lengths(samples: Sequence[Sample], label: str, weights: Mapping[str, float],
            limit: float | None = None) -> list[dict[str, Any]]:
    """`label`'s end-to-end speedup per prompt-length bucket (figures.buckets), on the pairs
    its rows keep (those above the physical bound `limit` are noise)."""
    ids: dict[tuple[str, int], int] = {}
    timed = _timed(_pairs(samples, label, None), ids)
    kept = intervals.plausible(timed, limit)[0] if limit else timed
    return figures.buckets(kept, {pid: c for (c, _), pid in ids.items()}, weights)


def control(samples: Sequence[Sample], categories: Sequence[str],
            weights: Mapping[str, float], objective: Objective = "latency") -> dict[str, Any]:
    """The A/A control: the baseline's twin (same argv, its own server) against the baseline,
    measured like every configuration. It should be 1.00x; where its interval leaves 1.00x, the
    servers of this run differ by more than the pairing removes (`biased`), and a difference
    between configurations within that margin is not shown (on cpu-demo it measured 1.01x
    [0.96-1.05] over 48 requests). `margin`: how far its interval reaches from 1.00x."""
    rows = {c or "overall": _group(samples, TWIN, c, weights, objective=objective)
            for c in [None, *categories]}
    low, high = rows["overall"].get("speedup_low"), rows["overall"].get("speedup_high")
    if low is None or high is None:
        return {"rows": rows, "biased": False, "margin": None}
    return {"rows": rows, "biased": low > 1.0 or high < 1.0,
            "margin": round(max(abs(1 - low), abs(high - 1)), 4)}


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
           settings: dict[str, Any], weights: Mapping[str, float] | None = None,
           conditions: Mapping[str, Any] | None = None, objective: Objective = "latency"
           ) -> dict[str, Any]:
    return {"profile": plan.profile, "hardware": plan.hardware.name,
            "hardware_fingerprint": plan.hardware.fingerprint(), "backend": plan.backend,
            "backend_version": installed.version, "target": plan.target.ref,
            "draft": plan.draft.ref if plan.draft else None,
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "settings": settings,
            "conditions": dict(conditions or {}),
            **summarize(samples, configs, weights, (conditions or {}).get("cost"), objective),
            "samples": [asdict(s) for s in samples]}
