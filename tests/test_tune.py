"""The tuner's decisions on measurements from a known speed law (no servers): it must find the
best k from two measured points, keep screens that drafted nothing from winning, stop runs that
cannot win, say "off" when nothing pays, and recover alpha, c and v(k) from step timings. The real
llama-server run of `specctl tune` is in test_tune_real.py."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import replace

import pytest

from specctl.adapters.base import SpecStats
from specctl.orchestrator.measure.fit import copy_share, estimate, fit_alpha
from specctl.orchestrator.measure.trials import GiveUp, Run, cannot_beat, order
from specctl.orchestrator.measure.tune import sweep, tune
from specctl.orchestrator.measure.tuned import Result
from specctl.orchestrator.planning import costmodel
from specctl.orchestrator.planning.plan import Plan
from tests import plans

ALPHA, COST, VERIFY_SLOPE, BASE_TPS = 0.8, 0.25, 0.2, 10.0


class Law:
    """Decode speed of each configuration by the cost model with known c and v(k), and a known
    alpha per prompt. Its p-min is the ideal one: it drafts exactly the tokens that are accepted.
    Stops like the real Bench: after each prompt it asks `give_up`."""

    def __init__(self, alpha: float = ALPHA, cost: float = COST, ngram_drafts: bool = False,
                 ngram_tps: float = 14.0, ngram_copy_only: bool = False,
                 alphas: tuple[float, float, float] | None = None,
                 replies: tuple[str, str, str] = ("", "", ""),
                 mix: dict[str, float] | None = None,
                 verify_law: Callable[[float], float] | None = None) -> None:
        self.alphas = alphas or (alpha, alpha, alpha)
        self.verify = verify_law or verify  # what verifying k tokens really costs
        self.mix = mix  # with a mix, the prompts are code, chat, summarize (in that order)
        self.prompts = ("write code", "chat", "summarize")
        self.replies = replies  # what every configuration answers
        self.cost = cost
        self.ngram_drafts, self.ngram_tps = ngram_drafts, ngram_tps
        self.ngram_copy_only = ngram_copy_only  # fast only on prompt 0
        self.labels: list[str] = []
        self.say: Callable[[str], None] = lambda _msg: None

    def one(self, plan: Plan, label: str, i: int) -> tuple[float, SpecStats]:
        if label == "draft alone":
            return BASE_TPS / self.cost, SpecStats()
        if not plan.speculative:
            return BASE_TPS, SpecStats()
        if plan.method == "ngram":
            drafted = 10 if self.ngram_drafts else 0
            fast = BASE_TPS if self.ngram_copy_only and i != 0 else self.ngram_tps
            return fast, SpecStats(drafted, drafted // 2, 5 if drafted else 0)
        alpha, k, steps = self.alphas[i], plan.k, 100
        e = costmodel.tokens_per_step(alpha, k)
        accepted = round(steps * (e - 1))
        per_pos = tuple(round(steps * alpha ** (j + 1)) for j in range(k))
        if plan.p_min is not None:
            return (BASE_TPS * e / ((e - 1) * self.cost + self.verify(e - 1)),
                    SpecStats(accepted, accepted, steps, per_pos))
        return (BASE_TPS * costmodel.speedup(alpha, self.cost, k, self.verify),
                SpecStats(steps * k, accepted, steps, per_pos))

    def run(self, plan: Plan, label: str, order: Sequence[int] | None = None,
            give_up: GiveUp | None = None) -> Run:
        self.labels.append(label)
        which = tuple(order) if order is not None else (0, 1, 2)
        run = Run(label, plan, (), (), (), 1.0, 3)
        if self.mix is not None:
            run = replace(run, categories=("code", "chat", "summarize"),
                          weights=tuple(self.mix.items()))
        for i in which:
            tps, spec = self.one(plan, label, i)
            run = run.plus(i, tps, spec, self.replies[i])
            if give_up is not None and len(run.prompts) < len(which) and give_up(run):
                break
        return run


def verify(k: float) -> float:
    return 1 + VERIFY_SLOPE * k


@pytest.fixture
def plan() -> Plan:
    return plans.plan()


def test_fit_alpha_inverts_the_expected_accepted_length() -> None:
    for alpha in (0.3, 0.6, 0.8, 0.95):
        for k in (1, 3, 8):
            mean = costmodel.tokens_per_step(alpha, k) - 1
            assert fit_alpha(mean, k) == pytest.approx(alpha, abs=2e-3)


def test_estimates_recover_alpha_cost_and_verification(plan: Plan) -> None:
    law = Law(alphas=(0.9, 0.5, 0.8))
    base = law.run(plan.baseline(), "baseline")
    alone = law.run(plan.baseline(), "draft alone", (0,))
    probe = law.run(plan.but(k=4), "draft k=4")
    est = estimate(base, alone, probe)
    assert 0.5 < est.alpha < 0.9
    assert est.cost == pytest.approx(COST, abs=1e-3)
    assert est.verify[4] == pytest.approx(verify(4), abs=0.05)
    for i, alpha in enumerate((0.9, 0.5, 0.8)):  # each prompt's own acceptance by position
        assert est.accept_at[i] == pytest.approx([alpha ** j for j in range(1, 5)], abs=0.01)


def picked_share(plan: Plan, law: Law) -> tuple[float, int]:
    """The tuned k's share of the best speedup in an exhaustive sweep of the same law."""
    result = tune(plan.but(k=3), law, max_k=8)
    swept, _base, _secs = sweep(plan, law, range(1, 9))
    best = max(swept, key=lambda m: m.speedup)
    mine = next(m for m in swept if m.k == result.k)
    assert result.method == "draft"
    assert Result.from_json(json.loads(json.dumps(result.to_json()))) == result  # as saved
    return mine.speedup / best.speedup, best.k


def draft_ks(labels: list[str]) -> set[str]:
    return {lbl.split()[1] for lbl in labels if lbl.startswith("draft k=") and "p-min" not in lbl}


def test_tune_reaches_the_best_k_of_an_exhaustive_sweep(plan: Plan) -> None:
    law = Law()
    share, _ = picked_share(plan, law)
    assert share >= 0.97
    assert len(draft_ks(law.labels[:-9])) <= 3  # probe, pick and between: not a sweep


def test_the_model_ranks_k_by_the_workloads_throughput_not_the_median_prompt(plan: Plan) -> None:
    # two easy prompts and a hard one: the median prompt wants long drafts, but the hard prompt
    # is where the time goes (it is slowed down most by long drafts): the throughput wants short
    law = Law(alphas=(0.95, 0.3, 0.95), cost=0.1)
    share, best_k = picked_share(plan, law)
    assert share >= 0.97 and best_k <= 3
    median_pick = costmodel.best(costmodel.curve_over_prompts(
        [[0.95 ** (j + 1) for j in range(8)], [0.3 ** (j + 1) for j in range(8)],
         [0.95 ** (j + 1) for j in range(8)]], 0.73, 0.1, 8, verify)).k
    assert median_pick >= 6  # what ranking by the median prompt would have picked


def test_within_the_margin_the_models_favourite_stands(plan: Plan) -> None:
    law = Law(alpha=0.97, cost=0.05)  # long drafts all pay about the same
    result = tune(plan.but(k=3), law, max_k=8)
    assert (result.method, result.k) == ("draft", 8)
    runner_up = result.measured[1]
    assert runner_up.k == 7 and runner_up.speedup < result.speedup * 1.05


def test_a_run_gives_up_once_the_throughput_cannot_reach_what_it_must_beat() -> None:
    base = Run("baseline", None, (0, 1, 2), (10.0, 10.0, 10.0), (), 1, 3)  # type: ignore[arg-type]

    def partial(*tps: float) -> Run:
        return replace(base, label="x", prompts=tuple(range(len(tps))), tps=tps)

    assert not cannot_beat(base, 1.5)(partial(12.0))  # two prompts to come: could still win
    # two prompts at half speed: even a third that took no time at all gives 0.75x
    assert cannot_beat(base, 1.5)(partial(5.0, 5.0))
    assert not cannot_beat(base, 1.5)(partial(12.0, 14.0))  # an instant third would give 1.9x
    assert cannot_beat(base, 1.5, {1: 1.2, 2: 1.3})(partial(20.0))  # bounds say the rest can't
    assert order(partial(5.0, 20.0, 10.0)) == (1, 2, 0)  # quickest first
    assert order(partial(5.0, 20.0, 10.0), {0: 3.0, 1: 1.0, 2: 1.0}) == (0, 1, 2)  # best bound


def test_a_screen_that_drafted_nothing_cannot_win(plan: Plan) -> None:
    result = tune(plan.but(k=3), Law(ngram_drafts=False, ngram_tps=30.0), max_k=8)
    assert result.method == "draft"
    result = tune(plan.but(k=3), Law(ngram_drafts=True, ngram_tps=30.0), max_k=8)
    assert result.method == "ngram"
    assert not result.measured[2].label.endswith("prompts)")  # a winner is measured in full


def test_ngram_fast_on_one_prompt_only_gives_up_after_two(plan: Plan) -> None:
    # the reply to prompt 0 repeats itself, so n-gram tries it last: the other two settle it
    law = Law(ngram_drafts=True, ngram_tps=40.0, ngram_copy_only=True,
              replies=("x = f(a)\ny = f(a)\nz = f(a)", "Hello there, friend.", "A short text."))
    result = tune(plan.but(k=3), law, max_k=8)
    assert result.method == "draft"
    ngram = next(m for m in result.measured if m.method == "ngram")
    assert ngram.speedup < result.speedup  # fast where it copies, the baseline elsewhere


def test_p_min_is_not_run_where_drafts_are_already_accepted(plan: Plan) -> None:
    law = Law(alpha=0.99, cost=0.05)
    result = tune(plan.but(k=3), law, max_k=8)
    assert not any("p-min" in label for label in law.labels)  # the cost model's bound
    assert result.skipped and "p-min 0.5: not run" in result.skipped[0]
    assert result.p_min is None


def test_copy_share_counts_repeated_word_ngrams() -> None:
    assert copy_share("", "one two three four") == 0
    assert copy_share("", "a b c a b c a") == pytest.approx(2 / 5)
    assert copy_share("the cat sat on the mat", "the cat sat down") == pytest.approx(1 / 2)


def test_p_min_wins_where_most_drafts_are_rejected(plan: Plan) -> None:
    result = tune(plan.but(k=3), Law(alpha=0.5), max_k=8)
    assert (result.method, result.k, result.p_min) == ("draft", 1, 0.5)
    assert result.speedup > 1.05


def test_off_when_nothing_beats_the_baseline(plan: Plan) -> None:
    result = tune(plan.but(k=3), Law(alpha=0.5, cost=0.7), max_k=8)
    assert (result.method, result.k) == ("none", 0)
    assert "speculation off" in result.summary


def test_a_setting_that_slows_chat_down_gives_way_to_one_that_keeps_every_category(
        plan: Plan) -> None:
    # code and summaries accept nearly everything, chat little: long drafts win on the whole
    # but slow chat down; a p-min (or a shorter k) keeps chat whole
    law = Law(alphas=(0.97, 0.45, 0.97), cost=0.1, mix={"code": 1, "chat": 1, "summarize": 1})
    result = tune(plan.but(k=3), law, max_k=8)
    assert result.method == "draft"
    assert result.categories and all(v >= 0.98 for v in result.categories.values()), result.summary
    probe = next(m for m in result.measured if m.label == "draft k=8")
    assert probe.categories["chat"] < 0.98  # what would have been picked on the whole


def test_the_mix_decides(plan: Plan) -> None:
    alphas = (0.97, 0.45, 0.97)
    chat = tune(plan.but(k=3), Law(alphas=alphas, cost=0.1, mix={"chat": 1.0}), max_k=8)
    code = tune(plan.but(k=3), Law(alphas=alphas, cost=0.1, mix={"code": 1.0}), max_k=8)
    assert code.method == "draft" and code.k >= 6  # code wants long drafts
    assert chat.method == "none" or chat.k < code.k or chat.p_min is not None


def test_when_verification_is_not_linear_the_k_between_finds_the_peak(plan: Plan) -> None:
    # a few tokens cost more to verify than the line through the probe says (as measured on
    # this CPU: the model put the peak at k=2, the bench found k=4): the model overrates short
    # drafts; measuring between its pick and the probe recovers the peak
    law = Law(alpha=0.85, cost=0.25, verify_law=lambda k: 1 + 0.7 * k ** 0.5)
    share, best_k = picked_share(plan, law)
    assert best_k == 4 and share >= 0.97, (share, best_k)
