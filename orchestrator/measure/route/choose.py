"""Speculation per request: each request goes to a server of its model's route, by what it is:
its kind (measure/route/classify.py), its prompt's length and the answer it expects. The route's
members are the settings `specctl tune` measured fastest for each kind, by the objective the
tune was decided on (end to end by default), and, where the tune measured a setting whose
prefill is clearly cheaper than every member's (no draft or n-gram, where the members draft
with a model), that one too, for long prompts.

A route is built from a saved tune result's per-category winners (a category counts as its
kind: chat, qa and multiturn are `chat`) and the profile's plan as written (its draft model):
one server per winning setting, at most three (the settings that win the most kinds; a kind
whose setting is left out goes to the setting that wins the most). A kind
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
the same setting and no setting prefills clearly cheaper (one server serves them all), nor
when the route's servers do not fit in memory together (weights that the adapter says its
servers share by mmap count once): then the best single setting serves, and `why` says so with
the figures.

Which member serves a request is one function, `choose` (the gateway's slot and `bench --also
routed` both call it): the kind's member, unless another member's predicted time (the cost
model the tune saved, measure/route/costs.py: T = P * f + N * d(kind)) is SWITCH under it. So a long
prompt with a short answer goes where prefill is cheapest, a long answer to a short prompt to
the draft. A result saved before the cost model routes by kind alone.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from specctl.orchestrator.contract.adapter import Adapter
from specctl.orchestrator.contract.plan import Plan
from specctl.orchestrator.measure.lab.engine import MARGIN
from specctl.orchestrator.measure.lab.servers import together
from specctl.orchestrator.measure.results.tuned import Measured, Result, Timing, Winner, steps_of
from specctl.orchestrator.measure.route import classify
from specctl.orchestrator.measure.route import costs as speeds
from specctl.orchestrator.measure.route.learned import OFF, Prior
from specctl.orchestrator.sizes import in_gib

MAX_SERVERS = 3
THIN = 1.2  # a winner on one request of its kind beats the pick by this much to route it: one
# chat request varies by more than 10% (draft k=3's ran 0.83-1.11x in one cpu-demo bench, and
# a mix tune's one chat request gave it 1.11x)
SWITCH = MARGIN  # a request leaves its kind's member only for one predicted this much faster
# (the margin every comparison uses): a short request's prefill is a small share of its time,
# and a few percent of noise in f does not move it. Not more: under 30% noise bursts the
# simulated tunes' f of the target came out up to 25% high (a low quantile of two 10-s
# requests), and a 1,500-token prompt with a 32-token answer, which the law has 18% slower on
# the draft, went to no draft on 10 of 12 seeds at 5%, 9 of 12 at 10%
PREFILL = 0.9  # a setting whose prefill per token is at most this share of every member's
# joins the route for long prompts (a draft model's prefill costs cpu-demo about 30% more)


@dataclass(frozen=True)
class Member:
    """One server of a route: its setting ('draft k=8', 'ngram k=8', 'off') and the kinds it
    serves (none: the member for long prompts, chosen by their cost alone)."""

    setting: str
    plan: Plan
    kinds: tuple[str, ...]


@dataclass(frozen=True)
class Route:
    members: tuple[Member, ...]
    baseline_tps: Mapping[str, float]  # each kind's baseline decode tokens/s, as tune measured
    need: int  # bytes the members hold together
    budget: int
    off: Plan  # no draft: what serves where nothing is surely faster (measure/route/learned)
    costs: speeds.RequestCosts | None = None  # what each member costs a request (None: by kind)
    priors: Mapping[str, Prior] = field(default_factory=dict)  # tune's figure per kind
    main: str = OFF  # what a kind tune did not measure explores (learned.Learned.main)

    def member_for(self, kind: str) -> Member:
        """The server of `kind` (a kind no winner was measured for: the main member's)."""
        return next((m for m in self.members if kind in m.kinds), self.members[0])

    def describe(self) -> str:
        """'code -> draft k=8; summarize, edit -> ngram k=8; chat -> off', and the length rule
        where the route has costs ('; code prompts over ~900 tokens answered in under ~64
        -> off')."""
        kinds = "; ".join(f"{', '.join(m.kinds)} -> {m.setting}" for m in self.members
                          if m.kinds)
        rule = self.rule()
        rest = f"learned from what is served among {', '.join(m.setting for m in self.members)}"
        return "; ".join(part for part in (kinds, rule, rest) if part)

    def rule(self) -> str:
        """Where requests leave their kind's member by length: for each member's first kind
        (the member of the cheapest prefill aside), its typical answer and the prompt tokens
        from which that member is predicted faster by SWITCH ('' where the route has no
        costs)."""
        costs = self.costs
        if costs is None:
            return ""
        cheap = min(self.members, key=lambda m: costs.prefill.get(m.setting, math.inf))
        return "; ".join(line for m in self.members if m is not cheap and m.kinds
                         if (line := _crossing(costs, m, cheap)))

    def memory(self) -> str:
        """'3 servers hold 3.90 GiB together (weights 3.40 once; draft k=8 0.30, ...: KV,
        compute; the budget is 20.00 GiB)'."""
        own = {m.setting: _own(m.plan) for m in self.members}
        each = ", ".join(f"{s} {in_gib(b):.2f}" for s, b in own.items())
        return (f"{len(self.members)} servers hold {in_gib(self.need):.2f} GiB together "
                f"(weights {in_gib(self.need - sum(own.values())):.2f}; {each}: KV and "
                f"compute; the budget is {in_gib(self.budget):.2f} GiB)")


def _crossing(costs: speeds.RequestCosts, home: Member, cheap: Member) -> str:
    """'code prompts over ~940 tokens answered in under ~64 -> off': where a request of
    `home`'s first kind, of that kind's typical answer, goes to `cheap` ('' where it never
    does)."""
    kind = home.kinds[0]
    f_w, f_p = costs.prefill.get(home.setting), costs.prefill.get(cheap.setting)
    d_w, d_p = (costs.decode.get(m.setting, {}).get(kind) for m in (home, cheap))
    n = costs.tokens(classify.Facts(kind, 0))[1]
    if f_w is None or f_p is None or d_w is None or d_p is None or n <= 0:
        return ""
    under = (1 - SWITCH) * f_w - f_p
    tokens = n * (d_p - (1 - SWITCH) * d_w) / under if under > 0 else math.inf
    if not 0 < tokens < math.inf:
        return ""
    return (f"{kind} prompts over ~{_rounded(tokens)} tokens answered in under ~{_rounded(n)} "
            f"-> {cheap.setting}")


def _rounded(x: float) -> int:
    """Two significant figures: 937 -> 940."""
    return int(float(f"{x:.2g}"))


def choose(route: Route, facts: classify.Facts) -> Member:
    """The member a request goes to (the gateway's slot, `bench --also routed`): its kind's,
    unless another's predicted time (speeds.RequestCosts.time: its prompt's prefill and its answer's
    decode) is under the kind's member's by SWITCH; the kind's member where the route has no
    costs or no figure for it."""
    home = route.member_for(facts.kind)
    costs = route.costs
    mine = costs.time(home.setting, facts) if costs is not None else None
    if costs is None or mine is None:
        return home
    best, least = home, mine * (1 - SWITCH)
    for m in route.members:
        t = costs.time(m.setting, facts)
        if m is not home and t is not None and t < least:
            best, least = m, t
    return best


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


def _as_winner(t: Timing | Measured) -> Winner:
    return Winner(category="", label=t.label, method=t.method, k=t.k, p_min=t.p_min,
                  chain=t.chain, speedup=1.0)


def _surely_over(own: Winner, single: float) -> bool:
    """Whether `own` beats the pick's `single` on its kind by the margin, its interval's bottom
    above it; measured on one request of the kind (an interval of no width), by THIN."""
    if own.method != "none" and (own.low is None or own.high is None or own.high <= own.low):
        return own.speedup > single * THIN
    bottom = own.low if own.low is not None else own.speedup  # the baseline is itself
    return own.speedup > single * (1 + MARGIN) and bottom > single


def _setting(w: Winner, single: float | None, result: Result) -> Winner:
    """The kind's setting: its winner, or the baseline where the winner is not 5% over it (a
    near-tie is noise), where it surely beats the pick on the kind (`single`: the pick's
    figure there; _surely_over); else the pick where the pick beats the baseline on the kind
    by the margin, and the baseline where it does not. A kind the pick has no figure for
    keeps its own."""
    own = w if w.method != "none" and w.speedup > 1 + MARGIN else _off(w)
    if single is None or _surely_over(own, single):
        return own
    if single <= 1 + MARGIN:
        return _off(w)
    return Winner(category=w.category, label="the pick", method=result.method, k=result.k,
                  p_min=result.p_min, chain=result.chain, speedup=single,
                  baseline_tps=w.baseline_tps)


def kinds_of(result: Result) -> dict[str, str]:
    """Each tuned category's kind: as tune saved it (its shape's), else its suite's (a result
    saved before shapes: a category of the user's own is left out)."""
    out = {}
    for w in result.winners:
        shape = result.shapes.get(w.category)
        kind = shape.kind if shape is not None and shape.kind else \
            classify.SUITE_KINDS.get(w.category)
        if kind in classify.KINDS:
            out[w.category] = kind
    return out


def _per_kind(result: Result) -> list[Winner]:
    """One setting per kind (classify.KINDS), by `_setting`: where several categories are of
    one kind (chat, qa and multiturn), the winner best on them together (its mean figure on
    them), and the pick's mean figure on them."""
    kinds = kinds_of(result)
    grouped: dict[str, list[Winner]] = {}
    for w in result.winners:
        if w.category in kinds:
            grouped.setdefault(kinds[w.category], []).append(w)
    out = []
    for kind, ws in grouped.items():
        cats = [w.category for w in ws]
        best = max(ws, key=lambda w: _mean_on(w, cats, result))
        base = [w.baseline_tps for w in ws if w.baseline_tps]
        w = best.model_copy(update={"category": kind, "baseline_tps": sum(base) / len(base)
                                     if base else None} | (
            {"speedup": round(_mean_on(best, cats, result), 4)} if len(ws) > 1 else {}))
        picks = [result.categories[c] for c in cats if c in result.categories]
        single = (sum(picks) / len(picks) if picks else None) if result.serves else 1.0
        out.append(_setting(w, single, result))
    return out


def _mean_on(w: Winner, cats: Sequence[str], result: Result) -> float:
    """A winner's setting's mean figure on `cats`, as the race measured it."""
    if w.method == "none":
        return 1.0
    row = next((m for m in result.measured if _as_winner(m).model_dump(include=_SAME)
                == w.model_dump(include=_SAME)), None)
    figures = row.categories if row is not None else {w.category: w.speedup}
    got = [figures[c] for c in cats if c in figures]
    return sum(got) / len(got) if got else 0.0


_SAME = {"method", "k", "p_min", "chain"}


def route_for(base: Plan, result: Result, backend: Adapter) -> tuple[Route | None, str]:
    """The route of `result`'s winners over `base` (the profile's plan as written), or None and
    why there is none."""
    winners = _per_kind(result)
    if not base.speculative:
        return None, "the profile has speculation off"
    if base.draft is None and any(w.method == "draft" for w in winners):
        return None, "a kind's winner drafts with a model the profile has not"
    groups: dict[str, tuple[Plan, list[Winner]]] = {}
    for w in winners:
        plan = member_plan(base, w)
        groups.setdefault(plan.short(), (plan, []))[1].append(w)
    order = sorted(groups.items(), key=lambda g: (-len(g[1][1]),
                                                  -sum(w.speedup for w in g[1][1])))
    kept, rest = order[:MAX_SERVERS], order[MAX_SERVERS:]
    left_out = [w for _, (_, ws) in rest for w in ws]  # the main member's
    members = tuple(Member(setting, plan, tuple(w.category for w in [*ws, *(
        left_out if n == 0 else [])])) for n, (setting, (plan, ws)) in enumerate(kept))
    if not groups:  # an older result: its pick, measured on the mix, explored kind by kind
        route = plain(_main(base, result), backend, base)
        if route.need > route.budget:
            return None, f"routing refused: {route.memory()}: the best single setting serves"
        return route, (f"routed: the saved tune has no per-category winners: "
                       f"{route.describe()}; {route.memory()}")
    costs = speeds.costs_of(result, lambda t: member_plan(base, _as_winner(t)).short())
    members += _for_long(base, result, members, costs, backend)
    off = member_plan(base, _OFF)
    main = _main(base, result)
    for extra in (main, off):  # what unmeasured kinds explore; what serves where none pays
        if extra.short() not in {m.setting for m in members}:
            members += (Member(extra.short(), extra, ()),)
    priors = {w.category: Prior(member_plan(base, w).short(), w.speedup, _bottom(w))
              for w in winners}
    route = Route(members, {w.category: w.baseline_tps for w in winners if w.baseline_tps},
                  together(backend, [m.plan for m in members]), base.memory.budget.limit,
                  off, costs, priors, main.short())
    if route.need > route.budget:
        return None, (f"routing refused: {route.memory()}: the best single setting serves")
    return route, f"routed: {route.describe()}; {route.memory()}"


def _main(base: Plan, result: Result) -> Plan:
    """What a kind tune did not measure explores: tune's pick where it speculates, else the
    profile's own setting (as written)."""
    if result.method != "none":
        return member_plan(base, Winner(category="", label="the pick", method=result.method,
                                        k=result.k, p_min=result.p_min, chain=result.chain,
                                        speedup=result.speedup))
    return base


def _bottom(w: Winner) -> float | None:
    """A winner's interval's bottom; None where it has none (one request: no interval)."""
    if w.method == "none":
        return 1.0
    return w.low if w.low is not None and w.high is not None and w.high > w.low else None


def plain(main: Plan, backend: Adapter, base: Plan | None = None) -> Route:
    """The route of a model no tune has measured per kind: `main` (its own setting, or an
    older tune's pick) and no draft (from `base`, the plan as written), which the served
    requests decide between (measure/route/learned.py)."""
    off = member_plan(base or main, _OFF)
    members = (Member(main.short(), main, ()), Member(OFF, off, ()))
    return Route(members, {}, together(backend, [m.plan for m in members]),
                 (base or main).memory.budget.limit, off, main=main.short())


def _for_long(base: Plan, result: Result, members: tuple[Member, ...],
              costs: speeds.RequestCosts | None, backend: Adapter) -> tuple[Member, ...]:
    """The member for long prompts, where the tune measured a setting whose prefill is under
    every member's by PREFILL (no draft or n-gram, where the members draft with a model) and
    there is room for it (MAX_SERVERS, the memory budget): of those, the one that decodes
    fastest on the kinds' mean. None (an empty tuple) otherwise."""
    if costs is None or not members or len(members) >= MAX_SERVERS:
        return ()
    mine = [costs.prefill.get(m.setting) for m in members]
    if any(f is None for f in mine):
        return ()
    least = min(f for f in mine if f is not None)
    found = {p.short(): p for p in (member_plan(base, _as_winner(t)) for t in result.timings
                                    if t.prefill)}
    cheaper = [p for p in found.values() if p.short() not in {m.setting for m in members}
               and costs.prefill.get(p.short(), math.inf) <= PREFILL * least
               and (p.method != "draft" or base.draft is not None)]
    fits = [p for p in cheaper if together(backend, [*(m.plan for m in members), p])
            <= base.memory.budget.limit]
    if not fits:
        return ()
    per = {p.short(): costs.decode.get(p.short(), {}) for p in fits}
    plan = min(fits, key=lambda p: (sum(per[p.short()].values()) / len(per[p.short()])
                                    if per[p.short()] else math.inf, p.short()))
    return (Member(plan.short(), plan, ()),)
