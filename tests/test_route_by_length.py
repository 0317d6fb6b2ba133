"""Routing by what the request is: its kind, its prompt's length and the answer it expects. The
cost model tune fits from its own samples (measure/route/costs.py: prefill seconds per prompt token,
decode seconds per answer token by category, each category's answers and characters per token),
saved with the result and read back; one function (measure/route/choose.choose) decides, and the
gateway's slot and `bench --also routed` both call it. On the simulated engine
(tests/simengine.py: a prefill law where a draft model prefills the prompt too)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from specctl.orchestrator.contract.plan import Plan
from specctl.orchestrator.gateway import plans as gateway_plans
from specctl.orchestrator.gateway.plans import Routing, _served
from specctl.orchestrator.measure.bench.routed import RoutedLab
from specctl.orchestrator.measure.prompts.workload import Prompt, Workload
from specctl.orchestrator.measure.results.tuned import Result, Shape, Timing, Winner
from specctl.orchestrator.measure.route import choose as route_mod
from specctl.orchestrator.measure.route import classify
from specctl.orchestrator.measure.route import costs as speeds
from specctl.orchestrator.measure.route.choose import Route, choose, route_for
from specctl.orchestrator.measure.route.classify import Facts
from specctl.orchestrator.measure.tune.flow import tune
from tests import plans
from tests.simengine import Law, SimLab
from tests.test_pool_states import resolved
from tests.test_routing import adapter

SEEDS = range(12)
CHARS = 4  # characters a prompt token carries in the simulated prompts


@pytest.fixture
def plan() -> Plan:
    return plans.plan().but(k=3)


def text(tokens: int) -> str:
    return ("lorem " * (tokens * CHARS // 6 + 1))[:tokens * CHARS]


def sim(law: Law, cats: tuple[str, ...], plan: Plan, seed: int, noise: float = 0.3) -> SimLab:
    """A simulated lab whose prompts are of `cats`, each as long as the law's prompt tokens
    (CHARS characters a token), with the law's reply lengths."""
    lab = SimLab(law, plan, seed=seed, noise=noise, server_timed=True)
    lab.workload = Workload(tuple(Prompt(c, text(n), max_tokens=law.reply(i))
                                  for i, (c, n) in enumerate(zip(cats, law.prompt_tokens,
                                                                 strict=True))))
    return lab


# cpu-demo's shape: a target prefilling 100 tokens/s and decoding 8; a draft model that prefills
# at 40% of the target's cost per token (cpu-demo: 3-4 s more on a 700-token prompt)
def docs_law() -> Law:
    """Code (short prompts, long answers: the draft wins), chat (nothing pays) and docqa
    (800-token documents, 32-token answers: the draft's prefill loses)."""
    return Law(alphas=(0.9, 0.9, 0.4, 0.4, 0.85, 0.85), base_tps=8.0, prefill_tps=100.0,
               draft_prefill=0.4, prompt_tokens=(50, 50, 60, 60, 800, 800),
               replies=(160, 160, 64, 64, 32, 32), ngram_gain=(1.0, 1.0, 1.0, 1.0, 1.0, 1.0))


def articles_law() -> Law:
    """Code, chat and 700-token articles summarised in 160 tokens: the draft wins every kind
    end to end, so the members are one setting, and no draft joins for long prompts."""
    return Law(alphas=(0.9, 0.9, 0.85, 0.85, 0.85, 0.85), base_tps=8.0, prefill_tps=100.0,
               draft_prefill=0.4, prompt_tokens=(50, 50, 60, 60, 700, 700),
               replies=(160, 160, 160, 160, 160, 160),
               ngram_gain=(1.0, 1.0, 1.0, 1.0, 1.0, 1.0))


# each law's categories, the noise bursts' share of the time and tune's budget: a route needs
# the draft measured on long prompts, and 240 s under 30% bursts measured the articles (27 s a
# request) on a draft in half the seeds (6 of 12 routed right; 11 of 12 under 30% in 480 s and
# under 10% in 240 s; the documents, 12 of 12 under 30% in 240 s)
LAWS = {"docqa": (docs_law, ("code", "code", "chat", "chat", "docqa", "docqa"), 0.3, 240.0),
        "article": (articles_law, ("code", "code", "multiturn", "multiturn", "article",
                                   "article"), 0.1, 480.0)}
LONG = Facts("code", 1500 * CHARS, 32)  # a 1,500-token prompt, a 32-token answer
SHORT = Facts("code", 50 * CHARS, 400)  # a 50-token prompt asking for 400 tokens of code


def routed(plan: Plan, law: str, seed: int) -> tuple[Route | None, str, Result]:
    make, cats, noise, budget = LAWS[law]
    found = tune(plan, sim(make(), cats, plan, seed, noise), max_k=8, budget=budget)
    again = Result.from_json(json.loads(json.dumps(found.to_json())))  # saved, read back
    route, why = route_for(plan, again, adapter())
    return route, why, again


@pytest.mark.parametrize("law", LAWS)
def test_long_prompts_with_short_answers_go_where_prefill_is_cheapest(plan: Plan,
                                                                      law: str) -> None:
    """From a simulated tune, saved and read back: a code request of 1,500 prompt tokens and
    a 32-token answer goes to the member without a draft model (no draft or n-gram), one of
    50 tokens asking for 400 to the draft (the noise and budgets: LAWS). Where every kind's
    winner drafts ("article"), the setting of cheapest prefill joins the route as its member
    for long prompts. The law: 1,500 tokens prefill in 15 s, and 6 s more with the draft; 32
    tokens decode in 4 s, in about 2.5 with it. When this was written the long request went
    right on 10 of the 12 seeds of "docqa" (on the other two the target's f came out 22-25%
    high: a low quantile of two requests, both beside bursts, and it stayed on the draft, as
    it would without a cost model) and 12 of 12 of "article"; the short one on all of them."""
    right = 0
    for seed in SEEDS:
        route, why, result = routed(plan, law, seed)
        assert route is not None and route.costs is not None, (why, result.winners)
        base = next(t for t in result.timings if t.label == "baseline")
        assert base.prefill == pytest.approx(0.011, rel=0.2)  # 100 tokens/s, under bursts
        assert all(s.chars_per_token == pytest.approx(CHARS, rel=0.01)
                   for s in result.shapes.values() if s.chars_per_token)
        assert route.member_for("code").plan.method == "draft", route.describe()
        assert choose(route, SHORT).plan.method == "draft", (seed, route.describe())
        long = choose(route, LONG)
        assert long.plan.method in ("none", "ngram", "draft"), long
        right += long.plan.draft is None
        if law == "article" and long.plan.draft is None:  # one setting won every kind: the
            assert long.kinds == () and len([m for m in route.members if m.kinds]) == 1, \
                route.describe()  # joined the one tuned setting (no draft beside them)
        assert "prompts over ~" in route.describe() and "tokens answered in under" in \
            route.describe(), route.describe()
    assert right >= len(SEEDS) - 2, right


def test_the_cost_model_is_validated_and_an_older_result_routes_by_kind(plan: Plan) -> None:
    """What is read back is held to bounds (a prefill of 0 s a token, a negative answer, an
    unknown kind are a bad file); a result saved before the cost model routes by kind alone,
    as it did."""
    route, _why, result = routed(plan, "docqa", 0)
    assert route is not None
    data = result.to_json()
    for bad in ({"timings": [{**data["timings"][0], "prefill": 0.0}]},
                {"timings": [{**data["timings"][0], "decode": {"code": -1.0}}]},
                {"shapes": {"code": {"kind": "Code!", "answer": 3}}},
                {"shapes": {"code": {"kind": "code", "answer": 0}}},
                {"shapes": {"code": {"kind": "code", "answer": 3, "chars_per_token": 1e9}}}):
        with pytest.raises(ValueError):
            Result.from_json({**data, **bad})
    older = {k: v for k, v in data.items() if k not in ("timings", "shapes")}
    old_route, why = route_for(plan, Result.from_json(older), adapter())
    assert old_route is not None and old_route.costs is None, why
    assert choose(old_route, LONG) is old_route.member_for("code")
    assert "prompts over" not in old_route.describe()


def made_up(plan: Plan) -> Result:
    """A result as tune saves one (figures made up, valid): code wins with the draft, chat
    with no draft; the draft prefills 40% dearer."""
    def win(cat: str, method: str, k: int) -> Winner:
        return Winner(category=cat, label=f"{method} k={k}", method=method, k=k, p_min=None,
                      speedup=1.0 if method == "none" else 1.5, baseline_tps=8.0)

    return Result(profile=plan.profile, method="draft", k=4, p_min=None, speedup=1.3,
                  low=1.2, high=1.4, summary="", alpha=None, cost=None, verify={},
                  baseline_tps=8.0, winners=[win("code", "draft", 4), win("chat", "none", 0)],
                  timings=[Timing(label="baseline", method="none", k=0, p_min=None,
                                  prefill=0.01, decode={"code": 0.125, "chat": 0.125}),
                           Timing(label="draft k=4", method="draft", k=4, p_min=None,
                                  prefill=0.014, decode={"code": 0.07, "chat": 0.13})],
                  shapes={"code": Shape(kind="code", answer=64, ran_out=True,
                                        chars_per_token=4.0),
                          "chat": Shape(kind="chat", answer=40, chars_per_token=4.0)})


def test_one_function_decides_and_both_callers_call_it(plan: Plan,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """`choose` decides; the gateway's slot (gateway/plans.Served.slot_for) and `bench --also
    routed` (RoutedLab) each call it with the request's facts: its kind, its characters and
    the answer it asks for (the prompt's own, else the run's max_tokens)."""
    route, why = route_for(plan, made_up(plan), adapter())
    assert route is not None, why
    assert route.describe().startswith("code -> draft k=4; chat -> off; code prompts over "
                                       "~1100 tokens answered in under ~64 -> off"), \
        route.describe()
    assert choose(route, LONG).setting == "off" and choose(route, SHORT).setting == "draft k=4"
    assert choose(route, Facts("code", 400, None)).setting == "draft k=4"  # its kind's: 64
    assert choose(route, Facts("chat", 200, 500)).setting == "off"  # chat's answers: 40

    asked: list[Facts] = []

    def spy(r: Route, facts: Facts) -> route_mod.Member:
        asked.append(facts)
        return choose(r, facts)

    written = resolved("m")
    monkeypatch.setattr(gateway_plans, "choose", spy)
    served = _served(written, Routing(route, why, written), None)  # tune's figures, alone
    for facts, setting in ((LONG, "off"), (SHORT, "draft k=4")):
        assert served.slot_for(facts)[0].setting == setting
    assert served.slot_for(SHORT, load=3)[0].setting == "off"  # nothing measured under load
    assert asked == [LONG, SHORT]

    law = docs_law()
    lab = SimLab(law, plan, seed=0, noise=0.0)
    code = "Write a Python function that parses an ISO date."
    doc = "Here is the manual.\n\n" + text(1500) + "\n\nWhat does error E4 mean? One sentence."
    lab.workload = Workload((Prompt("code", code), Prompt("code", code, max_tokens=400),
                             Prompt("docqa", doc, system="Be brief."),
                             *(Prompt("chat", "Hi") for _ in range(3))))
    room = RoutedLab(lab, route)
    room.keep([("routed", route.members[0].plan)])
    asked.clear()
    monkeypatch.setattr(route_mod, "choose", spy)
    for i in range(3):
        room.ask("routed", i, 32)
    assert asked == [Facts("code", len(code), 32), Facts("code", len(code), 400),
                     Facts("docqa", len(doc) + len("Be brief."), 32)]
    served_by = [label for _, label, _ in lab.asked]
    assert served_by == ["routed draft k=4", "routed draft k=4", "routed off"], served_by


def test_a_requests_facts_are_read_from_its_body() -> None:
    """The gateway reads a request's kind, its characters (every message's text, the system
    message included: what the engine prefills) and the answer it asks for."""
    body: dict[str, Any] = {"messages": [
        {"role": "system", "content": "You answer from the context.\n\n" + text(900)},
        {"role": "user", "content": [{"type": "text", "text": "Why is the sky blue?"}]}],
        "max_completion_tokens": 48, "max_tokens": 9}
    got = classify.facts(body)
    assert got == Facts("chat", len(body["messages"][0]["content"]) + 20, 48)
    assert classify.facts({"prompt": "Write a Python function.", "max_tokens": 0}) == \
        Facts("code", 24, None)
    for odd in ({}, {"messages": "x", "max_tokens": True}, {"prompt": 5, "max_tokens": "9"}):
        assert classify.facts(odd) == Facts("chat", 0, None)
    costs = speeds.costs_of(made_up(plans.plan()), lambda t: t.label)
    assert costs is not None
    assert costs.tokens(Facts("chat", 4000, None)) == (1000.0, 40)
    assert costs.tokens(Facts("chat", 4000, 10)) == (1000.0, 10)
    assert costs.tokens(Facts("code", 400, 500)) == (100.0, 500)  # code's 64 is a floor
    assert costs.tokens(Facts("math", 400, None)) == (100.0, 52.0)  # no math tuned: the mean
