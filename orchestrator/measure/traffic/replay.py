"""The kept traffic (measure/traffic/store.py) read: what it says (`specctl traffic`), the workload
it replays (`bench --prompts traffic`, `tune --prompts traffic`), and whether it holds enough for
the gateway's idle tuner to tune on it instead of the shipped suites (`enough`).

The replay is the model's kept requests, each kind (the router's) a category, weighed by its
observed share of the requests; a kind with fewer than MIN_PER_KIND requests or under MIN_SHARE
of them is left out (said in one line). At most PER_KIND requests of a kind are replayed (a
fixed sample, as for a prompts file); each with its own answer length: the tokens it was
answered with, capped by the run's --max-tokens. Earlier user turns and the system message are
sent as the request had them; the model's own replies stand in for the recorded ones.
"""

from __future__ import annotations

import datetime
import statistics
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from specctl.orchestrator.contract.dirs import Dirs
from specctl.orchestrator.errors import ProfileError, StateError
from specctl.orchestrator.humanize import Say
from specctl.orchestrator.measure.prompts import formats, workload
from specctl.orchestrator.measure.prompts.workload import BUCKETS
from specctl.orchestrator.measure.traffic import store as traffic

MIN_SHARE = 0.05
MIN_PER_KIND = 2  # tune settles only with two requests of each category
ENOUGH = 40  # MIN_PER_KIND / MIN_SHARE: see `enough`
PER_KIND = 12  # as for a prompts file


def enough(kept: traffic.Kept | None) -> bool:
    """Whether the idle tuner tunes on the kept traffic (`specctl tune -p NAME --prompts
    traffic`) instead of the shipped suites: ENOUGH (40) requests or more.

    Why 40: tune settles a setting only with two requests of each category it measures, and
    the replay leaves out kinds under 5% of the requests (a kind that rare would cost tune a
    whole category's requests for a twentieth of the score). From 40 requests on, every kind at
    5% or more has two requests at least (0.05 x 40 = 2), so every kind replayed can settle;
    and each kind's observed share is known to about +-8 points (a share's standard error,
    sqrt(p (1 - p) / n), is at most 0.079 at n = 40), nearer the traffic's own mix than the
    suites' equal shares for any traffic that is not close to equal already. Fewer, and the
    suites are the better guess. A profile's keep_traffic under 40 never gets there."""
    return kept is not None and len(kept.requests) >= ENOUGH and bool(_usable(kept)[0])


def _usable(kept: traffic.Kept) -> tuple[dict[str, int], dict[str, int]]:
    """The kinds replayed and those left out (too few, or too rare), with their counts."""
    counts = Counter(r.kind for r in kept.requests)
    total = len(kept.requests)
    use = {k: n for k, n in counts.items() if n >= MIN_PER_KIND and n >= MIN_SHARE * total}
    return use, {k: n for k, n in counts.items() if k not in use}


def workload_of(dirs: Dirs, model: str, mix: Mapping[str, float], max_tokens: int,
                say: Say | None = None) -> workload.Workload:
    """`--prompts traffic`: the model's kept requests as the workload, with their observed mix
    (or `mix`, where given); too few: one line with how many there are and are needed."""
    kept = traffic.load(dirs, model)
    if kept is None or not kept.requests:
        raise ProfileError(f"--prompts traffic: no requests kept for {model} (it needs "
                           f"{MIN_PER_KIND} of a kind at least; the gateway keeps them where "
                           "the profile sets [gateway] keep_traffic = N)")
    use, left = _usable(kept)
    counts = ", ".join(f"{k} {n}" for k, n in Counter(r.kind for r in kept.requests).items())
    if not use:
        raise ProfileError(f"--prompts traffic: {model} has {len(kept.requests)} kept "
                           f"requests ({counts}); it needs {MIN_PER_KIND} of a kind at least "
                           f"(and {ENOUGH} for the idle tuner to use them)")
    if left and say is not None:
        say(f"traffic: {', '.join(f'{k} ({n})' for k, n in left.items())} left out: fewer "
            f"than {MIN_PER_KIND} requests or under {MIN_SHARE:.0%} of {model}'s")
    unknown = set(mix) - set(use)
    if unknown:
        raise ProfileError(f"--mix names {', '.join(sorted(unknown))}, not in {model}'s kept "
                           f"traffic (its kinds: {', '.join(use)})")
    by_kind: dict[str, list[workload.Prompt]] = {}
    for r in kept.requests:
        prompt = _prompt(r, max_tokens)
        if r.kind in use and prompt is not None:
            by_kind.setdefault(r.kind, []).append(prompt)
    shares = dict(mix) or {k: n / len(kept.requests) for k, n in use.items()}
    return workload.Workload(tuple(workload.sample(by_kind, PER_KIND)), shares)


def _prompt(r: traffic.Request, cap: int) -> workload.Prompt | None:
    turns, system = formats.from_messages([m.model_dump() for m in r.messages])
    if not turns:  # a file written by hand: no user text
        return None
    answer = min(r.tokens_out, cap) if r.tokens_out > 0 else cap
    return workload.Prompt(r.kind, turns[-1], tuple(turns[:-1]), system, answer)


def summaries(dirs: Dirs, model: str | None) -> tuple[list[dict[str, Any]], list[str]]:
    """Each model's summary (`model`'s alone where named) and a line for each file that was
    set aside; a named model with nothing kept is a ProfileError (did you mean...)."""
    out, notes = [], []
    for name in [model] if model is not None else traffic.models(dirs):
        try:
            kept = traffic.load(dirs, name)
        except StateError as exc:
            notes.append(str(exc))
            continue
        if kept is not None:
            out.append(summary(kept, traffic.path_of(dirs, name)))
    if model is not None and not out and not notes:
        raise traffic.unknown(dirs, model)
    return out, notes


def summary(kept: traffic.Kept, where: object = None) -> dict[str, Any]:
    """Count, kinds (share), prompt and answer lengths, oldest and newest, of one model."""
    reqs = kept.requests
    counts = Counter(r.kind for r in reqs).most_common()
    tokens_in = [r.tokens_in for r in reqs]
    buckets = Counter(_bucket(n) for n in tokens_in)
    return {
        "model": kept.model, "requests": len(reqs), "not_kept": kept.skipped,
        "kinds": {k: {"requests": n, "share": round(n / len(reqs), 3)} for k, n in counts},
        "tokens_in": {**_spread(tokens_in),
                      "buckets": {label: buckets.get(label, 0) for _, _, label in BUCKETS}},
        "tokens_out": _spread([r.tokens_out for r in reqs]),
        "oldest": _when(min((r.at for r in reqs), default=None)),
        "newest": _when(max((r.at for r in reqs), default=None)),
        "enough_for_idle_tune": enough(kept), "file": None if where is None else str(where)}


def _bucket(tokens: int) -> str:
    return next(label for _, top, label in BUCKETS if tokens < top)


def _spread(values: Sequence[int]) -> dict[str, float | int | None]:
    if not values:
        return {"median": None, "p90": None, "max": None}
    ranked = sorted(values)
    p90 = ranked[max(0, -(-9 * len(ranked) // 10) - 1)]  # nearest rank
    return {"median": statistics.median(ranked), "p90": p90, "max": ranked[-1]}


def _when(at: float | None) -> str | None:
    if at is None:
        return None
    return datetime.datetime.fromtimestamp(at, datetime.timezone.utc).strftime(
        "%Y-%m-%dT%H:%M:%SZ")
