"""Speculation per request: each kind of request (measure/classify.py) goes to a server running
the setting that `specctl tune` measured fastest for that kind, by the objective the tune was
decided on: end to end by default, so a kind of long prompts and short answers goes where the
draft's prefill is not paid (no draft, or n-gram) when that is what its requests' time says.

A route is built from a saved tune result's per-category winners and the profile's plan as
written (its draft model): one server per winning setting, at most three (the settings that win
the most kinds; a kind whose setting is left out goes to the setting that wins the most). A kind
whose winner is not 5% over the baseline goes to a server without a draft. A kind keeps its own
winner only where it beats, on that kind, the setting the tune picked for all (what `up` serves
without a route) by the margin, surely (its interval's bottom above the pick's point): else the
kind stays with the pick where the pick beats the baseline on it by the margin, and goes to the
baseline where it does not (tune's rule for the whole traffic, kind by kind: n-gram's 1.00x on
the chat of a cpu-demo tune was 0.84x [0.78-0.89] on six held-out chat prompts, 0.99x
[0.91-1.09] on twelve in the next bench: where the pick's gain is not shown, a draft is only a
risk). On cpu-demo (2 cores, where verifying 8 drafts costs 3.5 target steps) the route
(chat off, code draft k=8, summarize and edit ngram k=8) measured 1.03x [1.02-1.08] and 1.08x
[1.05-1.11] the tune's pick (ngram k=8) in two benches of 48 held-out requests, code alone 1.13x
and 1.18x: the gain of each kind's own
setting is only as large as the kinds' winners differ. There is no route when every kind has
the same setting (one server serves them all), nor when the route's servers do not fit in
memory together (weights that the adapter says its servers share by mmap count once): then the
best single setting serves, and `why` says so with the figures.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from specctl.adapters.base import Adapter
from specctl.orchestrator.measure import classify
from specctl.orchestrator.measure.bench import ROUTED
from specctl.orchestrator.measure.engine import MARGIN
from specctl.orchestrator.measure.lab import Config, Lab, Say, Timed, together
from specctl.orchestrator.measure.tuned import Result, Winner, steps_of
from specctl.orchestrator.measure.workload import Workload
from specctl.orchestrator.planning.plan import Plan
from specctl.orchestrator.sizes import in_gib

MAX_SERVERS = 3
THIN = 1.2  # a winner on one request of its kind beats the pick by this much to route it: one
# chat request varies by more than 10% (draft k=3's ran 0.83-1.11x in one cpu-demo bench, and
# a mix tune's one chat request gave it 1.11x)


@dataclass(frozen=True)
class Member:
    """One server of a route: its setting ('draft k=8', 'ngram k=8', 'off') and the kinds it
    serves."""

    setting: str
    plan: Plan
    kinds: tuple[str, ...]


@dataclass(frozen=True)
class Route:
    members: tuple[Member, ...]
    baseline_tps: Mapping[str, float]  # each kind's baseline decode tokens/s, as tune measured
    need: int  # bytes the members hold together
    budget: int
    off: Plan  # no draft: for a kind live traffic shows slower than the baseline

    def member_for(self, kind: str) -> Member:
        """The server of `kind` (a kind no winner was measured for: the main member's)."""
        return next((m for m in self.members if kind in m.kinds), self.members[0])

    def describe(self) -> str:
        """'code -> draft k=8; summarize, edit -> ngram k=8; chat -> off'."""
        return "; ".join(f"{', '.join(m.kinds)} -> {m.setting}" for m in self.members)

    def memory(self) -> str:
        """'3 servers hold 3.90 GiB together (weights 3.40 once; draft k=8 0.30, ...: KV,
        compute; the budget is 20.00 GiB)'."""
        own = {m.setting: _own(m.plan) for m in self.members}
        each = ", ".join(f"{s} {in_gib(b):.2f}" for s, b in own.items())
        return (f"{len(self.members)} servers hold {in_gib(self.need):.2f} GiB together "
                f"(weights {in_gib(self.need - sum(own.values())):.2f}; {each}: KV and "
                f"compute; the budget is {in_gib(self.budget):.2f} GiB)")


def _own(plan: Plan) -> int:
    """What one server holds beside the weights: its KV caches and compute buffers."""
    mem = plan.memory
    return mem.kv_target_bytes + mem.kv_draft_bytes + mem.compute_bytes


def member_plan(base: Plan, w: Winner) -> Plan:
    """The plan of a winner's setting, from the profile's plan as written (its draft model):
    without a draft model, nothing of one is planned in memory."""
    if w.method == "none":
        plan = base.baseline()
    elif w.method == "draft":
        return base.but(method="draft", k=w.k, chain=steps_of(w.chain), k_source="routed",
                        p_min=w.p_min if w.p_min is not None else base.p_min)
    else:
        plan = base.but(method=w.method, k=w.k, p_min=None, draft=None, chain=steps_of(w.chain),
                        k_source="routed")
    return plan.but(memory=replace(plan.memory, draft_bytes=0, kv_draft_bytes=0))


_OFF = Winner(category="", label="off", method="none", k=0, p_min=None, speedup=1.0)


def _off(w: Winner) -> Winner:
    return _OFF.model_copy(update={"category": w.category, "baseline_tps": w.baseline_tps})


def _surely_over(own: Winner, single: float) -> bool:
    """Whether `own` beats the pick's `single` on its kind by the margin, its interval's bottom
    above it; measured on one request of the kind (an interval of no width), by THIN."""
    if own.method != "none" and (own.low is None or own.high is None or own.high <= own.low):
        return own.speedup > single * THIN
    bottom = own.low if own.low is not None else own.speedup  # the baseline is itself
    return own.speedup > single * (1 + MARGIN) and bottom > single


def _setting(w: Winner, result: Result) -> Winner:
    """The kind's setting: its winner, or the baseline where the winner is not 5% over it (a
    near-tie is noise), where it surely beats the pick on the kind (_surely_over); else the
    pick where the pick beats the baseline on the kind by the margin, and the baseline where
    it does not. A kind the pick has no figure for keeps its own."""
    own = w if w.method != "none" and w.speedup > 1 + MARGIN else _off(w)
    single = result.categories.get(w.category) if result.serves else 1.0
    if single is None or _surely_over(own, single):
        return own
    if single <= 1 + MARGIN:
        return _off(w)
    return Winner(category=w.category, label="the pick", method=result.method, k=result.k,
                  p_min=result.p_min, chain=result.chain, speedup=single,
                  baseline_tps=w.baseline_tps)


def route_for(base: Plan, result: Result, backend: Adapter) -> tuple[Route | None, str]:
    """The route of `result`'s winners over `base` (the profile's plan as written), or None and
    why there is none."""
    winners = [_setting(w, result) for w in result.winners if w.category in classify.KINDS]
    if not base.speculative:
        return None, "the profile has speculation off"
    if base.draft is None and any(w.method == "draft" for w in winners):
        return None, "a kind's winner drafts with a model the profile has not"
    groups: dict[str, tuple[Plan, list[Winner]]] = {}
    for w in winners:
        plan = member_plan(base, w)
        groups.setdefault(plan.short(), (plan, []))[1].append(w)
    if len(groups) < 2:
        return None, ("every kind tuned for has the same setting (a kind's own winner must "
                      "surely beat the pick on it by 5%)" if groups else
                      "the saved tune has no per-category winners (run `specctl tune`)")
    order = sorted(groups.items(), key=lambda g: (-len(g[1][1]),
                                                  -sum(w.speedup for w in g[1][1])))
    kept, rest = order[:MAX_SERVERS], order[MAX_SERVERS:]
    left_out = [w for _, (_, ws) in rest for w in ws]  # the main member's
    members = tuple(Member(setting, plan, tuple(w.category for w in [*ws, *(
        left_out if n == 0 else [])])) for n, (setting, (plan, ws)) in enumerate(kept))
    route = Route(members, {w.category: w.baseline_tps for w in winners if w.baseline_tps},
                  together(backend, [m.plan for m in members]), base.memory.budget.limit,
                  member_plan(base, _OFF))
    if route.need > route.budget:
        return None, (f"routing refused: {route.memory()}: the best single setting serves")
    return route, f"routed: {route.describe()}; {route.memory()}"



class RoutedLab:
    """A lab where the configuration ROUTED is the route's servers: each prompt is classified
    as a request would be, and asked of its kind's server (`bench --also routed`); every other
    configuration is the inner lab's."""

    def __init__(self, inner: Lab, route: Route) -> None:
        self.inner, self.route = inner, route
        self.kinds = {i: classify.kind(p.text) for i, p in enumerate(inner.workload.prompts)}

    @property
    def restarts(self) -> int:
        return self.inner.restarts

    @restarts.setter
    def restarts(self, value: int) -> None:
        self.inner.restarts = value

    @property
    def say(self) -> Say:
        return self.inner.say

    @property
    def workload(self) -> Workload:
        return self.inner.workload

    def _expand(self, configs: Sequence[Config]) -> list[Config]:
        out = []
        for label, plan in configs:
            if label != ROUTED:
                out.append((label, plan))
                continue
            out += [(f"{ROUTED} {m.setting}", m.plan.but(parallel=plan.parallel))
                    for m in self.route.members]
        return out

    def keep(self, configs: Sequence[Config]) -> None:
        self.inner.keep(self._expand(configs))

    def ask(self, label: str, prompt: int, max_tokens: int) -> Timed:
        if label != ROUTED:
            return self.inner.ask(label, prompt, max_tokens)
        member = self.route.member_for(self.kinds[prompt])
        return replace(self.inner.ask(f"{ROUTED} {member.setting}", prompt, max_tokens),
                       label=ROUTED)

    def fits(self, plans: Sequence[Plan]) -> bool:
        """The route's own plan stands for its first server: the others are added."""
        return self.inner.fits([*plans, *(m.plan for m in self.route.members[1:])])

    def clock(self) -> float:
        return self.inner.clock()

    def close(self) -> None:
        self.inner.close()


def confusion_report(workload: Workload, suites: Mapping[str, Sequence[str]]) -> dict[str, object]:
    """What bench shows of the classifier: its confusion matrix and accuracy on the shipped
    suites' held-out prompts, and on this workload's prompts (their category against the kind
    the router gives them)."""
    held = classify.confusion(suites)
    mine: dict[str, dict[str, int]] = {}
    for p in workload.prompts:
        row = mine.setdefault(p.category, dict.fromkeys(classify.KINDS, 0))
        row[classify.kind(p.text)] += 1
    return {"held_out": held, "held_out_accuracy": round(classify.accuracy(held), 4),
            "workload": mine, "workload_accuracy": round(classify.accuracy(mine), 4)}
