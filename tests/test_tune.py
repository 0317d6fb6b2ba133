"""The tuner's decisions on a simulated engine with a known speed law (tests/simengine.py: the
Leviathan law, exact draft counters, a simulated clock) and injected noise bursts (each slows what
runs during it 2-5x). Under bursts covering 30% of the time, 20 tunes of 20 laws must each pick a
configuration within 5% of the law's best draft length's speed in at least 19, never "off" (every
law pays at least 1.2x); where n-gram wins, at cpu-demo's speed and with every llama.cpp method in
the race, 19 of 20 tunes find it within the default budget, which holds.

The tuner before this one (a fixed phase of acceptance and cost requests, then trials of the
model's pick and its challengers) spent most of a real 240 s budget on the fixed phase and never
measured n-gram on cpu-demo. The real llama-server run of `specctl tune` is in test_tune_real.py."""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from specctl.orchestrator.cli import render
from specctl.orchestrator.contract.plan import Plan, Step
from specctl.orchestrator.measure.results.tuned import Measured, Result, bound_flag, steps_of
from specctl.orchestrator.measure.tune import flow as tune_mod
from specctl.orchestrator.measure.tune.fit import fit_alpha
from specctl.orchestrator.planning import costmodel
from tests import plans
from tests.simengine import Law, SimLab, copying, laws

LLAMACPP = frozenset({"none", "draft", "ngram", "ngram-mod", "ngram-map-k", "mtp"})


def tune(plan: Plan, lab: SimLab, **kw: Any) -> Result:
    """tune by decode speed: these laws have no prefill, and the figures they are held to are
    decode speedups (the end-to-end objective's tests: test_objective.py)."""
    return tune_mod.tune(plan, lab, objective="decode", **kw)


@pytest.fixture
def plan() -> Plan:
    return plans.plan().but(k=3)


def tuned(plan: Plan, law: Law, seed: int = 0, noise: float = 0.0, **kw: object) -> Result:
    result = tune(plan, SimLab(law, plan, seed=seed, noise=noise), max_k=8, **kw)
    saved = Result.from_json(json.loads(json.dumps(result.to_json())))
    assert saved == result.model_copy(update={"replies": []})  # as saved (replies are not)
    assert bool(result.replies) == (result.method != "none")  # the pick's, for the gate
    return result


def picked(plan: Plan, result: Result) -> Plan:
    """What the result serves."""
    return plan.but(method=result.method, k=result.k, p_min=result.p_min,
                    draft=plan.draft if result.method == "draft" else None,
                    chain=steps_of(result.chain))


def share_of_best(plan: Plan, law: Law, result: Result) -> float:
    """The pick's true speed over the law's best draft length's."""
    draft = plan.draft.ref if plan.draft else ""
    return law.true_speedup(picked(plan, result), draft) / law.best(plan)[1]


def test_twenty_tunes_under_noise_bursts_pick_the_laws_best(plan: Plan) -> None:
    right = []
    for n, law in enumerate(laws(20, plan)):
        assert law.best(plan)[1] >= 1.2
        result = tuned(plan, law, seed=n, noise=0.3)
        right.append(result.method == "draft" and share_of_best(plan, law, result) >= 0.95)
        if result.method != "none":  # the headline carries its interval where it has three
            # paired requests of each kind (fewer: none, issue 59), within the bound
            assert result.requests is not None
            assert (result.low is None) == (result.requests < 3), result.summary
            if result.low is not None and result.high is not None:
                assert result.low <= result.speedup <= result.high
    assert sum(right) >= 19, right


def test_quiet_tunes_reach_the_precision_and_the_true_speedup(plan: Plan) -> None:
    for n, law in enumerate(laws(5, plan, seed=7)):
        result = tuned(plan, law, seed=n)
        assert result.settled and result.stopped in ("precision", "decided"), result.summary
        assert share_of_best(plan, law, result) >= 0.95, result.summary
        assert result.low is not None and result.high is not None
        assert (result.high - result.low) / 2 <= 0.05 * result.speedup
        assert law.true_speedup(plan.but(k=result.k, p_min=result.p_min), "testbed:qwen-0.5b-q4") \
            == pytest.approx(result.speedup, rel=0.06)


@pytest.mark.parametrize("server_timed", [False, True])
def test_cost_inputs_are_recovered_under_bursts(plan: Plan, server_timed: bool) -> None:
    """Also where replies are timed as llama-server times them: its decode time leaves out the
    first token (the prompt's pass), so a short reply of 16 tokens with 13 drafts accepted is
    2 verification steps, not 3. Counted as 3, v(8) came out at about half the law's."""
    law = Law(alphas=(0.9, 0.9, 0.5, 0.6, 0.8, 0.8), cost=0.25, verify=lambda k: 1 + 0.2 * k)
    result = tune(plan, SimLab(law, plan, seed=3, noise=0.3, server_timed=server_timed),
                  max_k=8)
    assert result.cost == pytest.approx(0.25, rel=0.05)
    # k=8 loses here: measured in the first block only (later blocks go to those that may
    # win), its step times are fewer and under bursts (within 5% when it was measured on)
    assert result.verify["8"] == pytest.approx(2.6, rel=0.1)


def test_fit_alpha_inverts_the_expected_accepted_length() -> None:
    for alpha in (0.3, 0.6, 0.8, 0.95):
        for k in (1, 3, 8):
            mean = costmodel.tokens_per_step(alpha, k) - 1
            assert fit_alpha(mean, k) == pytest.approx(alpha, abs=2e-3)


def test_p_min_races_and_loses_where_drafts_are_already_accepted(plan: Plan) -> None:
    law = Law(alphas=(0.99,) * 6, cost=0.05)
    result = tuned(plan, law)
    assert any("p-min" in m.label for m in result.measured)  # in the first block, as all are
    assert result.p_min is None and result.method == "draft"


def test_a_screen_that_drafted_nothing_cannot_win(plan: Plan) -> None:
    result = tuned(plan, Law(ngram_gain=(3.0,) * 6, ngram_drafts=False))
    assert result.method == "draft"
    result = tuned(plan, Law(ngram_gain=(3.0,) * 6, ngram_drafts=True))
    assert result.method == "ngram"


def test_off_only_when_the_interval_says_it_cannot_pay(plan: Plan) -> None:
    result = tuned(plan, Law(alphas=(0.5,) * 6, cost=0.7))
    assert (result.method, result.k) == ("none", 0)
    assert "speculation off" in result.summary and result.stopped == "decided"
    best = max(result.measured, key=lambda m: m.speedup)
    assert best.high is not None and best.high < 1.05


def test_a_setting_that_slows_chat_down_gives_way_to_one_that_keeps_every_category(
        plan: Plan) -> None:
    # code and summaries accept nearly everything, chat little: long drafts win on the whole
    # but slow chat down; a p-min (or a shorter k) keeps chat whole
    law = Law(alphas=(0.97, 0.97, 0.3, 0.3, 0.97, 0.97), cost=0.1)
    result = tuned(plan, law)
    assert result.method == "draft"
    assert all(v >= 0.98 for v in result.categories.values()), result.summary
    assert any(m.categories.get("chat", 1) < 0.98 for m in result.measured)  # the first pick


def test_the_mix_decides(plan: Plan) -> None:
    alphas = (0.97, 0.97, 0.45, 0.45, 0.97, 0.97)
    chat = tuned(plan, Law(alphas=alphas, cost=0.1, mix={"chat": 1.0}))
    code = tuned(plan, Law(alphas=alphas, cost=0.1, mix={"code": 1.0}))
    assert code.method == "draft" and code.k >= 6  # code wants long drafts
    assert chat.method == "none" or chat.k < code.k or chat.p_min is not None


def test_v_comes_from_the_race_at_every_draft_length_it_measured(plan: Plan) -> None:
    """No separate cost phase: v(k) is each raced draft length's step time less k*c, and where
    v is not linear the model's favourite joins the race when it was not measured."""
    law = Law(alphas=(0.85,) * 6, cost=0.25, verify=lambda k: 1 + 0.7 * k ** 0.5)
    errors = []
    for seed in range(6):  # under 30% bursts: a seed's low quantile may still hold one
        result = tuned(plan, law, seed=seed, noise=0.3)
        assert {"2", "3", "8"} <= set(result.verify)
        errors += [abs(result.verify[str(k)] / (1 + 0.7 * k ** 0.5) - 1) for k in (2, 3, 8)]
        assert share_of_best(plan, law, result) >= 0.9, result.summary  # flat: k=2-8 in 6%
    errors.sort()  # a length that loses is measured in the first block only
    assert errors[-1] < 0.2 and errors[len(errors) // 2] < 0.1, errors


def test_the_first_block_races_every_candidate_and_the_budget_holds(plan: Plan) -> None:
    """The draft-alone timings stay within 15% of the budget; every candidate is measured (in
    the first block, or one that had no room there in a later one); the tune ends within the
    budget plus 10%, server starts included. A row measured on one request of a category says
    its interval understates the noise (a bootstrap over one request is that request)."""
    law = laws(1, plan)[0]
    lab = SimLab(law, plan, seed=4, noise=0.3)
    result = tune(plan, lab, max_k=8, methods=LLAMACPP, chains=True)
    labels = {m.label.split(" (")[0] for m in result.measured}
    assert {"draft k=3", "draft k=2", "draft k=8", "ngram k=8", "ngram-mod k=16",
            "draft k=3 + ngram-mod k=16", "draft k=3 p-min 0.5"} <= labels, labels
    assert lab.now <= 240 * 1.1, lab.now
    fixed = max(at for at, label, _ in lab.asked if label == "draft alone")
    assert fixed <= 240 * 0.15, fixed
    cats = [p.category for p in lab.workload.prompts]
    for m in result.measured:
        label = m.label.split(" (")[0]
        asked = [cats[i] for at, lbl, i in lab.asked if lbl == label and at > fixed]
        thin = min(asked.count(c) for c in set(cats))
        assert ("one request of a category" in m.flag) == (thin < 2), (m.label, asked)


def test_a_near_tie_is_served_as_the_baseline_tune_after_tune(plan: Plan) -> None:
    """Where no k pays (a flat curve around 1.0x, as cpu-demo's default mix on 2 cores), which k
    measures best is noise. Each tune saves its best measured with its interval, and `up` serves
    it only when the interval's bottom is above 1.00x: tune after tune, what is served is off.
    Before the intervals decided this, 6 of these 12 tunes turned on k=3 (1.03-1.06x).

    Under these bursts a block whose baseline requests all ran beside one (each under the 0.5
    cores that asks a request again) lifted every candidate measured on it: two headlines of
    12 were over 1.1x (k=3 1.46x [1.39-1.52], 1.19x) and 8 of the 12 served off, until each
    request's time had the load it ran beside taken out (lab.LOADED): now every headline is
    within 10% of 1.0x and 9 serve off."""
    law = Law(alphas=(0.95, 0.95, 0.7, 0.7, 0.85, 0.85), cost=0.25, verify=lambda k: 1.5 + 0.25 * k)
    assert law.best(plan)[1] < 1.05
    results = [tuned(plan, law, seed=400 + n, noise=0.3) for n in range(12)]
    served_off = [r for r in results if not r.serves]
    assert len(served_off) >= 8, [(r.method, r.k, r.speedup, r.low) for r in results]
    on = [r for r in served_off if r.method != "none"]
    assert all("not surely faster than the baseline" in r.summary for r in on)
    near = [abs(r.speedup - 1.0) < 0.1 for r in results]  # the headlines agree
    assert sum(near) >= len(results) - 1, results


def test_sequential_blocks_one_server_at_a_time_say_the_drift(plan: Plan) -> None:
    law = laws(1, plan, seed=5)[0]
    lab = SimLab(law, plan, seed=2, noise=0.3, fits=False)
    result = tune(plan, lab, max_k=8)
    assert lab.most_up == 1 and result.sequential
    assert "one server at a time, the baseline drifted" in result.summary
    assert abs(result.k - law.best(plan)[0]) <= 1


def test_when_the_precision_is_not_reached_it_says_what_to_do(plan: Plan) -> None:
    law = laws(1, plan, seed=5)[0]
    result = tune(plan, SimLab(law, plan, seed=4, noise=0.6), max_k=8, budget=60.0)
    assert not result.settled and result.stopped == "budget" and result.state == "provisional"
    assert "(budget 60 s, precision ±5% asked)" in result.summary and "--budget" in result.summary
    # '±12% in 58 s', or on fewer than three requests a kind 'one request: no interval in 58 s'
    spent = int(result.summary.split("provisional: ")[1].split(" in ")[1].split(" s")[0])
    assert 30 <= spent <= 66  # the time it took, within the budget
    assert "other processes used" in result.summary




def test_challengers_that_do_not_fit_in_the_budget_left_are_not_measured_and_said(
        plan: Plan) -> None:
    """A budget too short for a first block of every candidate, even at the shortest screen:
    the cost model's pick and those that fit are measured, the others listed as not measured,
    with why, and the tune ends within the budget plus 10% (a real tune under load had run
    737 s for a 240 s budget)."""
    law = laws(1, plan)[0]
    tight_lab = SimLab(law, plan, seed=4, noise=0.3, start_s=6.0)
    roomy_lab = SimLab(law, plan, seed=4, noise=0.3, start_s=6.0)
    tight = tune(plan, tight_lab, max_k=8, budget=40.0, methods=LLAMACPP, chains=True)
    roomy = tune(plan, roomy_lab, max_k=8, budget=600.0, methods=LLAMACPP, chains=True)
    assert len(roomy.measured) >= 7 and not roomy.skipped
    assert tight.measured and tight.measured[0].label.startswith("draft k=3")
    others = tight.skipped
    assert others and all("not measured" in s and "--budget" in s for s in others)
    assert len(tight.measured) + len(others) >= 7
    assert tight_lab.now <= 40 * 1.1, tight_lab.now


def test_an_impossible_trial_is_caught_in_report_table_and_saved_result(
        plan: Plan, tmp_path: Path) -> None:
    # a burst aimed at the baseline's first request makes that pair 20x faster than the law
    # allows: the pair is discarded as noise and counted, never a speedup
    law = laws(1, plan, seed=5)[0]
    lab = SimLab(law, plan, seed=1, noise=0.0)  # bursts would have it asked again
    lab.hit(20.0)
    result = tune(plan, lab, max_k=8)
    probe = result.measured[0]
    assert probe.bound is not None and probe.speedup <= probe.bound
    assert "pair(s) above the bound discarded as noise" in probe.flag
    # a figure above the bound (as a noisy measurement reports it): flagged when built...
    flag = bound_flag(2.04, {"speedup": 3.9, "interval top": 4.4, "chat": 3.4})
    assert flag.startswith("above the physical bound 2.04x (speedup 3.90x")
    impossible = Measured(label="draft k=2", method="draft", k=2, p_min=None, speedup=3.9,
                          low=3.1, high=4.4, tps=9.0, categories={"chat": 3.4}, bound=2.04,
                          flag=flag)
    shown = result.model_copy(update={"measured": [*result.measured, impossible]})
    console = Console(record=True, width=200)
    render.show_tuned(console, shown)
    table = console.export_text()
    assert "draft k=2 (!)" in table and "above the physical bound 2.04x" in table
    # ...and a result cannot carry it unflagged, fresh or read back from disk
    with pytest.raises(ValueError, match="physical bound"):
        Measured(**{**impossible.model_dump(), "flag": ""})
    data = shown.to_json()
    data["measured"][-1]["flag"] = ""
    (tmp_path / "x.json").write_text(json.dumps(data))
    with pytest.raises(ValueError, match="physical bound"):
        Result.from_json(json.loads((tmp_path / "x.json").read_text()))


def test_the_leader_of_a_real_noisy_tune_gives_way(plan: Plan) -> None:
    """The figures of a real `tune -p cpu-demo` on a machine with others' tests running (k=8
    picked by a cost model misled by noise): the leader draft k=8 0.55x [0.19-0.71], p-min 0.5
    at 0.88x [0.28-1.15]. The leader cannot pay, the rival beats it by the margin: it leads,
    and its top (1.15x) keeps "off" from being decided (before: "off")."""
    from specctl.orchestrator.measure.estimates.intervals import Interval
    from specctl.orchestrator.measure.tune.race import Contender, Race

    lab = SimLab(Law(), plan)
    race = Race(lab, ("baseline", plan.baseline()), 64, False, 0.05, 0.05, 240.0)
    lead = Contender("draft k=8", ("draft k=8", plan.but(k=8)), 2.9, Interval(0.55, 0.19, 0.71),
                 blocks=2, drafted=500)
    rival = Contender("draft k=8 p-min 0.5", ("draft k=8 p-min 0.5", plan.but(k=8, p_min=0.5)),
                  2.9, Interval(0.88, 0.28, 1.15), blocks=2, drafted=400)
    assert race.leader([lead, rival]) is rival
    sure = Contender("x", ("x", plan), 2.9, Interval(1.3, 1.2, 1.4), blocks=2, drafted=9)
    assert race.leader([sure, rival]) is sure  # a leader that pays keeps its lead


@dataclass
class CopyingLaw(Law):
    """cpu-demo's shape: the draft barely pays (0.9-1.1x), n-gram copies where replies repeat
    the prompt (summaries) and wins overall; ngram-mod copies less; a chain costs the draft's
    steps where nothing is copied."""

    mod_gain: Sequence[float] = (1.0,) * 6

    def per_token(self, plan: Plan, i: int, draft_ref: str,
                  tokens: int = 64) -> tuple[float, float, float]:
        t0 = 1 / self.base_tps
        mod = 1 + (self.mod_gain[i] - 1) * self.ramped(tokens)
        if plan.method == "ngram-mod":
            return copying(t0, mod, plan.k)
        if plan.chain:
            own = super().per_token(plan.but(chain=()), i, draft_ref, tokens)
            return (min(own[0], t0 / mod), *own[1:])
        return super().per_token(plan, i, draft_ref, tokens)


def copying_laws(n: int, plan: Plan, seed: int = 11, ramp: int = 0,
                 opening: float = 0.0) -> list[CopyingLaw]:
    """`n` laws at cpu-demo's speed (8.5 tok/s) where n-gram beats every other candidate by
    at least 8% (at 64 tokens; `ramp`, `opening`: the length law, Law)."""
    rng = random.Random(seed)
    out: list[CopyingLaw] = []
    draft = plan.draft.ref if plan.draft else ""
    while len(out) < n:
        a = rng.uniform(0.6, 0.8)
        gains = [rng.uniform(1.05, 1.3), rng.uniform(0.95, 1.05), rng.uniform(1.5, 2.0)]
        law = CopyingLaw(alphas=(a + 0.1, a + 0.1, a - 0.15, a - 0.15, a, a),
                         cost=rng.uniform(0.2, 0.3), verify=lambda k: 1.4 + 0.12 * k,
                         base_tps=8.5, ngram_gain=tuple(g for g in gains for _ in range(2)),
                         mod_gain=tuple(g ** 0.7 for g in gains for _ in range(2)),
                         ramp=ramp, opening=opening)
        ngram = law.true_speedup(plan.but(method="ngram", draft=None, k=8, p_min=None), draft)
        others = [law.best(plan)[1], *(law.true_speedup(p, draft) for p in (
            plan.but(method="ngram-mod", draft=None, k=16, p_min=None),
            plan.but(chain=(Step("ngram-mod", 16),)), plan.but(p_min=0.5)))]
        if ngram >= 1.08 * max(others):
            out.append(law)
    return out


def test_where_n_gram_wins_the_race_finds_it_within_the_default_budget(plan: Plan) -> None:
    """cpu-demo measured n-gram k=8 1.15x where the draft gave 0.99x, and the tuner before this
    one never measured n-gram within its 240 s. At cpu-demo's speed, with every llama.cpp
    method in the race and the length law (short replies: the draft guesses their opening,
    n-gram has copied nothing yet), as cpu-demo measured: quiet, 20 of 20 tunes pick n-gram;
    under bursts over 30% of the time 19 of 20, the other the chain at 92% of its speed (58 of
    60 laws, seeds 11-13), every pick measured on every category (test_a_block_that_load...:
    3 of the 60 had been picked without one). Each tune ends within the budget plus 10%.

    Most of these tunes have one block: one request of each category per candidate, and under
    these bursts most requests of 5-10 s run beside one. Before each request's time had the
    load it ran beside taken out (lab.LOADED), a request slowed by a third under the half core
    that asks it again read as the configuration's speed: n-gram was picked in 16 of 20 (50 of
    60), a chain the law has 8% slower in most of the others.

    The race before this one screened every candidate with 16-24 token requests: on these laws
    it picked n-gram in 3 of 20 quiet tunes, the rest at 73-93% of its speed, as on cpu-demo
    (edit: draft k=8 1.61x picked where n-gram gives 1.80x).

    Since a figure needs three paired requests of each kind for its interval (issue 59), a tune
    under these bursts that has n-gram in the lead with two (a disturbed pair on a prompt with a
    calm one does not count) saves it provisional and serves no draft until a tune settles it:
    13 of 20 serve n-gram near its best in 240 s, the other 7 lead with it unserved, and say
    so; never a slower pick served."""
    draft = plan.draft.ref if plan.draft else ""
    for noise in (0.0, 0.3):
        found, near, times, results = [], [], [], []
        for n, law in enumerate(copying_laws(20, plan, ramp=64, opening=0.15)):
            lab = SimLab(law, plan, seed=n, noise=noise)
            result = tune(plan, lab, max_k=8, methods=LLAMACPP, chains=True)
            found.append(result.method == "ngram")
            results.append(result)
            best = law.true_speedup(plan.but(method="ngram", draft=None, k=8, p_min=None),
                                    draft)
            got = law.true_speedup(picked(plan, result), draft) if result.serves else 1.0
            near.append(got >= 0.9 * best)
            times.append(lab.now)
            assert result.state in ("settled", "provisional")
        if noise == 0.0:
            assert all(found) and all(near), (found, near)
        else:
            assert sum(found) >= 19 and sum(near) >= 12, (found, near)
            assert all(n or (not r.serves and r.low is None and r.state == "provisional")
                       for n, r in zip(near, results, strict=True)), [r.summary for r in results]
        assert max(times) <= 240 * 1.1, times


def test_on_a_cpu_half_as_fast_the_first_block_still_races_n_gram(plan: Plan) -> None:
    """cpu-demo on a slower CPU (4.5 tok/s: a 64-token request of the target alone takes 15 s)
    with the 60 s tune keeps for its sampling check: the first block has room for the leader
    and one challenger. Expecting the challenger 10% slower than the baseline (UNSEEN), every
    real tune and every one of these measured the draft at k=3 alone and stopped "settled" on
    one request a category with a third of the race's time left; then a block admitted as fast
    cut n-gram from its first categories (narrowing read the time left without admit's slack).
    Now n-gram is raced and picked on every law, on every category, quiet, and no interval of
    one request a category is called settled."""
    for n, law in enumerate(copying_laws(10, plan, ramp=64, opening=0.15)):
        lab = SimLab(replace(law, base_tps=4.5), plan, seed=n, noise=0.0)
        result = tune(plan, lab, max_k=8, methods=LLAMACPP, chains=True, reserve=60.0)
        assert result.method == "ngram", result.summary
        assert set(result.categories) == {"code", "chat", "summarize"}, result.summary
        thin = any("one request of a category" in m.flag for m in result.measured
                   if m.label.startswith("ngram"))
        assert not (thin and result.settled), result.summary
        assert lab.now <= 180 * 1.1


def test_a_block_that_load_makes_longer_still_measures_every_category_on_its_best(
        plan: Plan) -> None:
    """Under bursts a first block of every candidate takes longer than its timings so far
    expect, and the budget's end cut it before its last category: 5 of these 20 tunes saved a
    pick measured without summarize (or chat), and so did two of two real tunes on cpu-demo
    under a one-core load. Now, once the categories not measured yet no longer fit for all,
    each is asked only of the baseline and the configurations best so far (at best: their
    requests with all the load they ran beside taken out) while it fits: every pick has every
    category (one tune of the 20 turns speculation off), and one without would say which."""
    whole, said, picks = 0, 0, 0
    for noise in (0.3, 0.5):
        for n, law in enumerate(copying_laws(10, plan, ramp=64, opening=0.15)):
            result = tune(plan, SimLab(law, plan, seed=n, noise=noise), max_k=8,
                          methods=LLAMACPP, chains=True)
            if result.method == "none":
                continue
            picks += 1
            if set(result.categories) == {"code", "chat", "summarize"}:
                whole += 1
            else:
                said += "not measured: the budget had no room for it" in result.summary
    assert picks >= 18 and whole >= picks - 1 and whole + said == picks, (picks, whole, said)
