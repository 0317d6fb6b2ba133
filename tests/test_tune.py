"""The tuner's decisions on measurements from a known speed law (no servers): it must find the
best k from two measured points, keep screens that drafted nothing from winning, say "off" when
nothing pays, and recover alpha, c and v(k) from step timings."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from specctl.adapters.base import SpecStats
from specctl.orchestrator import costmodel
from specctl.orchestrator.app import App
from specctl.orchestrator.plan import Plan
from specctl.orchestrator.tune import Run, estimate, fit_alpha, sweep, tune

ALPHA, COST, VERIFY_SLOPE, BASE_TPS = 0.8, 0.25, 0.2, 10.0


class Law:
    """Decode speed of each configuration by the cost model with known alpha, c and v(k)."""

    def __init__(self, alpha: float = ALPHA, cost: float = COST, ngram_drafts: bool = False,
                 ngram_tps: float = 14.0, ngram_copy_only: bool = False) -> None:
        self.alpha, self.cost = alpha, cost
        self.ngram_drafts, self.ngram_tps = ngram_drafts, ngram_tps
        self.ngram_copy_only = ngram_copy_only  # fast only on prompt 0, the one screened
        self.labels: list[str] = []
        self.say: Callable[[str], None] = lambda _msg: None

    def run(self, plan: Plan, label: str, only: tuple[int, ...] | None = None) -> Run:
        self.labels.append(label)
        which = only if only is not None else (0, 1, 2)
        k = plan.k
        if label == "draft alone":
            return Run(label, plan, tuple(BASE_TPS / self.cost for _ in which), SpecStats(), 1,
                       which)
        if not plan.speculative:
            return Run(label, plan, tuple(BASE_TPS for _ in which), SpecStats(), 1, which)
        if plan.method == "ngram":
            drafted = 10 if self.ngram_drafts else 0
            fast = tuple(BASE_TPS if self.ngram_copy_only and i != 0 else self.ngram_tps
                         for i in which)
            return Run(label, plan, fast, SpecStats(drafted, drafted // 2, 5 if drafted else 0),
                       1, which)
        verify = lambda kk: 1 + VERIFY_SLOPE * kk  # noqa: E731
        tps = BASE_TPS * costmodel.speedup(self.alpha, self.cost, k, verify)
        steps = 100
        accepted = round(steps * (costmodel.tokens_per_step(self.alpha, k) - 1))
        per_pos = tuple(round(steps * self.alpha ** (i + 1)) for i in range(k))
        return Run(label, plan, tuple(tps for _ in which),
                   SpecStats(steps * k, accepted, steps, per_pos), 1, which)


@pytest.fixture
def plan(tmp_path: Path) -> Plan:
    profile = tmp_path / "p.toml"
    profile.write_text('target = "testbed:qwen-1.5b-f16"\ndraft = "testbed:qwen-0.5b-q4"\nk = 3\n')
    return App.from_env().resolve(str(profile)).plan


def test_fit_alpha_inverts_the_expected_accepted_length() -> None:
    for alpha in (0.3, 0.6, 0.8, 0.95):
        for k in (1, 3, 8):
            mean = costmodel.tokens_per_step(alpha, k) - 1
            assert fit_alpha(mean, k) == pytest.approx(alpha, abs=2e-3)


def test_estimates_recover_alpha_cost_and_verification(plan: Plan) -> None:
    law = Law()
    base = law.run(plan.baseline(), "baseline")
    alone = law.run(plan.baseline(), "draft alone", only=(0,))
    probe = law.run(plan.but(k=4), "draft k=4")
    est = estimate(base, alone, probe)
    assert est.alpha == pytest.approx(ALPHA, abs=0.01)
    assert est.cost == pytest.approx(COST, abs=1e-3)
    assert est.verify[4] == pytest.approx(1 + VERIFY_SLOPE * 4, abs=0.05)
    assert est.accept_at == pytest.approx([ALPHA ** i for i in range(1, 5)], abs=0.01)


def test_tune_reaches_the_best_k_of_an_exhaustive_sweep(plan: Plan) -> None:
    law = Law()
    result = tune(plan.but(k=3), law, max_k=8)
    swept, _base, _secs = sweep(plan, Law(), range(1, 9))
    best = max(swept, key=lambda m: m.speedup)
    mine = next(m for m in swept if m.k == result.k)
    assert result.method == "draft"
    assert mine.speedup >= 0.97 * best.speedup
    measured_ks = {lbl.split()[1] for lbl in law.labels
                   if lbl.startswith("draft k=") and "p-min" not in lbl}
    assert len(measured_ks) == 2  # the probe and the model's pick: not a sweep
    assert json.dumps(result.to_json())  # serialisable as saved


def test_near_ties_are_measured_again(plan: Plan) -> None:
    law = Law(alpha=0.97, cost=0.05)  # long drafts all pay about the same
    tune(plan.but(k=3), law, max_k=8)
    again = [lbl for lbl in law.labels if lbl.endswith("(again)")]
    assert len(again) == 2


def test_a_screen_that_drafted_nothing_cannot_win(plan: Plan) -> None:
    result = tune(plan.but(k=3), Law(ngram_drafts=False, ngram_tps=30.0), max_k=8)
    assert result.method == "draft"
    result = tune(plan.but(k=3), Law(ngram_drafts=True, ngram_tps=30.0), max_k=8)
    assert result.method == "ngram"


def test_a_screen_fast_on_its_one_prompt_only_loses_the_full_run(plan: Plan) -> None:
    law = Law(ngram_drafts=True, ngram_tps=40.0, ngram_copy_only=True)
    result = tune(plan.but(k=3), law, max_k=8)
    assert result.method == "draft"
    assert any("(other prompts)" in label for label in law.labels)


def test_off_when_nothing_beats_the_baseline(plan: Plan) -> None:
    result = tune(plan.but(k=3), Law(alpha=0.5, cost=0.7), max_k=8)
    assert (result.method, result.k) == ("none", 0)
    assert "speculation off" in result.summary
