"""What tune and bench optimise: the time the client waits for (the `latency` objective, the
default), on the simulated engine with a prefill law (tests/simengine.py): each prompt's tokens
prefilled by the target, and by a draft model too (its prefill a cost of a draft configuration,
which n-gram has not), with noise bursts covering 30% of the time.

A workload of long prompts and short answers (questions over a document): the draft's decode
speedup cannot earn back its prefill, so the decode objective picks the draft and the latency
objective does not (no draft, or n-gram). Short prompts with long answers: both pick the draft.
Wherever the server counts the draft's prefill (in the time to the first token, or in the
decode time after it), the end-to-end figure counts it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from specctl.orchestrator.contract.plan import Plan
from specctl.orchestrator.measure.bench import flow as bench
from specctl.orchestrator.measure.estimates import intervals
from specctl.orchestrator.measure.results.tuned import OnCategory, Result
from specctl.orchestrator.measure.route.choose import route_for
from specctl.orchestrator.measure.tune.flow import tune
from tests import plans
from tests.simengine import Law, SimLab

SEEDS = range(6)
DRAFT = "testbed:qwen-0.5b-q4"


@pytest.fixture
def plan() -> Plan:
    return plans.plan().but(k=3)


def long_prompts(where: str = "ttft") -> Law:
    """Questions over a 2,000-token document, answered in 32 tokens: the target prefills in
    5 s, the draft in 1.5 s more; decoding takes 1.6 s without a draft, about 1.1 s with."""
    return Law(prompt_tokens=(2000,) * 6, replies=(32,) * 6, prefill_tps=400.0,
               draft_prefill=0.3, draft_prefill_in=where, ngram_gain=(1.02,) * 6)


def short_prompts() -> Law:
    """Short questions (60 tokens) with long answers (160 tokens)."""
    return Law(prompt_tokens=(60,) * 6, replies=(160,) * 6, prefill_tps=400.0,
               draft_prefill=0.3, ngram_gain=(1.02,) * 6)


def tuned(plan: Plan, law: Law, seed: int, objective: intervals.Objective) -> Result:
    return tune(plan, SimLab(law, plan, seed=seed, noise=0.3, server_timed=True), max_k=8,
                max_tokens=64, objective=objective)


def test_the_laws_figures_disagree_as_the_workloads_say(plan: Plan) -> None:
    """The premise: on long prompts the draft is faster in decode and slower end to end."""
    law = long_prompts()
    assert law.true_speedup(plan, DRAFT, 32) > 1.2
    assert law.true_latency(plan, DRAFT) < 0.9
    assert short_prompts().true_latency(plan, DRAFT) > 1.2


@pytest.mark.parametrize("where", ["ttft", "decode"])
def test_long_prompts_short_answers_latency_drops_the_draft_decode_keeps_it(
        plan: Plan, where: str) -> None:
    """Where the server counts the draft's prefill in the time to the first token, the
    decode objective cannot see it and keeps the draft; where it counts it in the decode time,
    the decode steps carry it too. Either way, end to end the draft does not pay.

    Decode picks the draft in 4 of the 6 (5 before the pick refused a setting that surely slows
    a category: one of them led with draft k=8, which the law has 0.94x in decode on chat and
    measured 0.90x on its one chat request, with nothing else measured on every category in
    the budget: "off", not a draft that slows chat; the other's lead was not served then
    either). Picks, not served ones: since a figure needs three paired requests of each kind
    for its interval (issue 59), these 2000-token prompts under bursts leave most of the six
    tunes provisional in 240 s (2 of 6 served, each a draft), and an unsure pick is saved and
    not served."""
    law = long_prompts(where)
    if where == "ttft":
        decode = [tuned(plan, law, seed, "decode") for seed in SEEDS]
        assert sum(r.method == "draft" for r in decode) >= 4, [r.summary for r in decode]
        assert all(r.method == "draft" for r in decode if r.serves), [r.summary for r in decode]
        assert all(r.low is not None for r in decode if r.serves), [r.summary for r in decode]
    latency = [tuned(plan, law, seed, "latency") for seed in SEEDS]
    # end to end nothing pays its way here: no draft (or n-gram, which prefills nothing)
    assert all(not (r.method == "draft" and r.serves) for r in latency), [
        r.summary for r in latency]
    for r in latency:
        assert r.objective == "latency"
        drafts = [m for m in r.measured if m.method == "draft" and m.latency is not None]
        # the drafts slower than the baseline end to end on the whole (one measured on one
        # request of a category may not be)
        assert drafts and sum(m.latency or 0 for m in drafts) / len(drafts) < 1.0, drafts


def test_short_prompts_long_answers_both_objectives_keep_the_draft(plan: Plan) -> None:
    law = short_prompts()
    objectives: tuple[intervals.Objective, ...] = ("decode", "latency")
    for objective in objectives:
        got = [tuned(plan, law, seed, objective) for seed in SEEDS]
        assert sum(r.method == "draft" and r.serves for r in got) >= 5, [
            r.summary for r in got]
        for r in got:
            assert r.objective == objective and r.figures.get("latency")
            point, low, high = r.figures["latency"]  # from three requests a kind or more
            assert point is not None and low is not None and high is not None
            assert low <= point <= high


def test_bench_reports_end_to_end_ttft_and_decode_with_intervals_and_length_buckets(
        plan: Plan, tmp_path: Path) -> None:
    """Every configuration's row, per category and overall, has the end-to-end speedup and the
    TTFT ratio with their intervals beside the decode speedup; the end-to-end speedup by prompt
    length (prompts of 100 to 5,000 tokens: every bucket), each with its interval."""
    law = Law(prompt_tokens=(100, 600, 1500, 5000, 300, 2000), replies=(), prefill_tps=400.0,
              draft_prefill=0.3)
    room = SimLab(law, plan, seed=2, noise=0.3, server_timed=True)
    configs = bench.configs_for(plan, [3], also=["ngram:8"])
    notes: dict[str, Any] = {}
    samples = bench.measure(configs, None, None, room.workload, 3, 64,  # type: ignore[arg-type]
                            tmp_path, precision=None, notes=notes, room=room)
    report = bench.summarize(samples, configs, room.workload.weights(), notes["cost"])
    assert report["objective"] == "latency"
    for label in ("draft k=3", "ngram k=8"):
        for cat in [*report["categories"], "overall"]:
            row = report["configs"][label][cat]
            for key, prefix in (("e2e_speedup", "e2e"), ("ttft_ratio", "ttft"),
                                ("decode_speedup", "decode")):
                assert row[f"{prefix}_low"] <= row[key] <= row[f"{prefix}_high"], (label, cat)
            assert row["speedup"] == row["e2e_speedup"]  # the objective's
        lengths = report["buckets"][label]
        assert [b["bucket"] for b in lengths] == ["<256", "256-1k", "1k-4k", ">=4k"]
        assert [b["prompts"] for b in lengths] == [1, 2, 2, 1]
        assert all(b["e2e_low"] <= b["e2e_speedup"] <= b["e2e_high"] for b in lengths)
    draft = report["configs"]["draft k=3"]["overall"]
    ngram = report["configs"]["ngram k=8"]["overall"]
    # the draft's prefill comes before its first token; n-gram prefills nothing of its own
    assert draft["ttft_high"] < 0.85 and ngram["ttft_low"] <= 1.0 <= ngram["ttft_high"] * 1.02
    truth = law.true_latency(plan, DRAFT)
    assert draft["e2e_low"] * 0.97 <= truth <= draft["e2e_high"] * 1.03, (draft, truth)
    # where speculation stops paying: the longest prompts' end-to-end figure is the lowest
    got = {b["bucket"]: b["e2e_speedup"] for b in report["buckets"]["draft k=3"]}
    assert got[">=4k"] < got["<256"]


def test_the_route_sends_long_prompts_with_short_answers_where_prefill_is_cheapest(
        plan: Plan) -> None:
    """Each kind's winner, as the route reads it, is the end-to-end one by default: summaries
    of 2,000-token articles in 32 tokens go to no draft or n-gram, code (short prompts, long
    answers) to the draft; tuned by decode speed, summaries would go to the draft."""
    from tests.test_routing import adapter

    law = Law(alphas=(0.9, 0.9, 0.35, 0.35, 0.85, 0.85), prompt_tokens=(60, 60, 60, 60, 2000,
                                                                        2000),
              replies=(160, 160, 64, 64, 32, 32), prefill_tps=400.0, draft_prefill=0.3,
              ngram_gain=(1.0, 1.0, 1.0, 1.0, 1.05, 1.05))
    settings: dict[str, list[str]] = {"latency": [], "decode": []}
    for seed in range(3):
        for objective in ("latency", "decode"):
            found = tune(plan, SimLab(law, plan, seed=seed, noise=0.3, server_timed=True),
                         max_k=8, objective=objective)
            route, why = route_for(plan, found, adapter())
            kinds = {w.category: w.method for w in found.winners}
            settings[objective].append(kinds["summarize"])
            assert kinds["code"] == "draft", (objective, found.winners)
            if objective == "latency":
                assert route is None or route.member_for("summarize").plan.draft is None, why
    assert all(m in ("none", "ngram") for m in settings["latency"]), settings
    assert settings["decode"].count("draft") >= 2, settings


def code_and_documents() -> Law:
    """Short code prompts with long answers, where the draft is 1.3x end to end, and questions
    over 2,000-token documents answered in 32 tokens, where its prefill makes it 0.84x (n-gram,
    which prefills nothing of its own, about 1.0x on both). Weighed 70/30, the draft is 1.15x
    on the whole: the weighted figure alone picks it for all traffic."""
    return Law(categories=("code", "code", "code", "docqa", "docqa", "docqa"),
               alphas=(0.7, 0.7, 0.7, 0.6, 0.6, 0.6),
               prompt_tokens=(60, 60, 60, 2000, 2000, 2000), replies=(160, 160, 160, 32, 32, 32),
               prefill_tps=400.0, draft_prefill=0.3, ngram_gain=(1.02,) * 6,
               mix={"code": 0.7, "docqa": 0.3})


def test_the_pick_never_surely_slows_a_kind(plan: Plan) -> None:
    """The draft wins the workload's figure and slows its long-document questions: tune picks
    n-gram or off, never the draft, and says which category the draft slows and by how much;
    the draft stays the code category's winner (the route serves code from it). `up` serves no
    result that slows a category (Result.serves)."""
    law = code_and_documents()
    assert law.true_latency(plan, DRAFT) > 1.1  # the premise
    assert law.true_latency(plan, DRAFT, only="code") > 1.25
    assert law.true_latency(plan, DRAFT, only="docqa") < 0.9
    got = [tuned(plan, law, seed, "latency") for seed in range(10)]
    fair = [r for r in got if r.method in ("ngram", "none")]
    assert len(fair) >= 9, [r.summary for r in got]  # 10 of 10 here
    # never a draft served (before: one of the 10, k=3 at 1.16x, measured 0.78x on the one
    # document question its budget had room for, an interval no wider than its point)
    assert not any(r.method == "draft" and r.serves for r in got), [r.summary for r in got]
    assert all(not r.slows for r in got if r.serves)
    for r in fair:
        assert any(x.category == "docqa" and x.label.startswith("draft")
                   and x.speedup.point < 1.0 for x in r.refused), r.refused
        assert "slows docqa to 0." in r.summary, r.summary
    code = [next(w for w in r.winners if w.category == "code") for r in got]
    assert sum(w.method == "draft" for w in code) >= 9, code


def test_where_the_draft_helps_every_category_it_is_picked_as_before(plan: Plan) -> None:
    """The same shape with documents of 300 tokens and long answers: the draft is 1.2x or more
    on both categories and is picked, served, and refused for nothing (10 of 10 here)."""
    law = Law(categories=("code", "code", "code", "docqa", "docqa", "docqa"),
              alphas=(0.8, 0.8, 0.8, 0.85, 0.85, 0.85), prompt_tokens=(60, 60, 60, 300, 300, 300),
              replies=(160, 160, 160, 128, 128, 128), prefill_tps=400.0, draft_prefill=0.3,
              ngram_gain=(1.02,) * 6, mix={"code": 0.7, "docqa": 0.3})
    assert min(law.true_latency(plan, DRAFT, only=c) for c in ("code", "docqa")) > 1.2
    got = [tuned(plan, law, seed, "latency") for seed in range(10)]
    assert sum(r.method == "draft" and r.serves for r in got) >= 9, [r.summary for r in got]
    assert all(not r.refused for r in got), [r.refused for r in got]


def test_up_serves_no_saved_result_that_slows_a_category() -> None:
    """Result.serves: surely faster on the whole and slowing no category (tuned.slowed: an
    interval wholly below 1.00x on two requests or more; one request's figure below it by the
    margin)."""
    def result(**spans: tuple[float, float, float, int]) -> Result:
        return Result.from_json(Result(
            profile="p", method="draft", k=3, p_min=None, speedup=1.2, low=1.1, high=1.3,
            summary="", alpha=None, cost=None, verify={}, baseline_tps=5.0,
            spans={c: OnCategory(point=p, low=lo, high=hi, requests=n)
                   for c, (p, lo, hi, n) in spans.items()}).to_json())

    assert result().serves  # saved before spans existed: as before
    assert result(code=(1.3, 1.2, 1.4, 4), docqa=(1.01, 0.97, 1.05, 4)).serves
    slow = result(code=(1.3, 1.2, 1.4, 4), docqa=(0.8, 0.76, 0.84, 4))
    assert not slow.serves and set(slow.slows) == {"docqa"}
    assert result(docqa=(0.97, 0.97, 0.97, 1)).serves  # one request, within the margin
    assert not result(docqa=(0.9, 0.9, 0.9, 1)).serves
