"""tune tries ngram-mod and the best draft chained with ngram-mod where the backend has them,
measured like the other screens and kept only when better by the margin. Simulated engine: the
cost model's law for the draft, a known speed for ngram-mod on copying prompts, and injected
noise (no servers; the real runs are the `server` tests and the bench in the report)."""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import replace

import pytest

from specctl.adapters.base import SpecStats
from specctl.orchestrator.measure.trials import GiveUp, Run
from specctl.orchestrator.measure.tune import tune
from specctl.orchestrator.measure.tuned import Result, steps_of
from specctl.orchestrator.planning import costmodel
from specctl.orchestrator.planning.plan import Plan
from tests import plans
from tests.test_tune import BASE_TPS, Law

LLAMACPP = frozenset({"none", "draft", "ngram", "ngram-mod", "ngram-map-k", "mtp"})
CATS = ("edit", "code", "chat")


class CopyLaw(Law):
    """Prompt 0 is an edit (its reply copies the prompt): ngram-mod drafts long runs there and
    is `mod_gain` times the baseline; elsewhere it finds nothing to copy and drafts nothing.
    A chain drafts with whichever proposes: ngram-mod where it copies, the draft elsewhere.
    Every speed is off by up to `noise` (seeded)."""

    def __init__(self, mod_gain: float, noise: float = 0.02, **kw: object) -> None:
        super().__init__(**kw)  # type: ignore[arg-type]
        self.mod_gain, self.rng, self.noise = mod_gain, random.Random(7), noise
        self.mix = {"edit": 1.0, "code": 1.0, "chat": 1.0}

    def one(self, plan: Plan, label: str, i: int) -> tuple[float, SpecStats]:
        copies = i == 0
        uses_mod = plan.method == "ngram-mod" or any(s.method == "ngram-mod"
                                                      for s in plan.chain)
        if uses_mod and copies:
            tps, spec = BASE_TPS * self.mod_gain, SpecStats(200, 180, 20, (20,) * 16)
        elif plan.method == "ngram-mod":
            tps, spec = BASE_TPS, SpecStats()
        else:
            tps, spec = super().one(plan.but(chain=()), label, i)
        return tps * (1 + self.rng.uniform(-self.noise, self.noise)), spec

    def run(self, plan: Plan, label: str, order: Sequence[int] | None = None,
            give_up: GiveUp | None = None) -> Run:
        self.labels.append(label)
        which = tuple(order) if order is not None else (0, 1, 2)
        run = replace(Run(label, plan, (), (), (), 1.0, 3), categories=CATS,
                      weights=tuple((self.mix or {}).items()))
        for i in which:
            tps, spec = self.one(plan, label, i)
            run = run.plus(i, tps, spec, self.replies[i])
            if give_up is not None and len(run.prompts) < len(which) and give_up(run):
                break
        return run


@pytest.fixture
def plan() -> Plan:
    return plans.plan(k=3)


def test_the_chain_wins_where_edits_copy_and_the_draft_pays_elsewhere(plan: Plan) -> None:
    law = CopyLaw(mod_gain=4.0, alpha=0.8, cost=0.25)
    result = tune(plan, law, max_k=8, methods=LLAMACPP, chains=True)
    assert "ngram-mod k=16" in law.labels and any("+ ngram-mod" in x for x in law.labels)
    assert result.method == "draft" and [c.method for c in result.chain] == ["ngram-mod"]
    draft_alone = max(m.speedup for m in result.measured
                      if m.method == "draft" and not m.chain and m.p_min is None)
    assert result.speedup > draft_alone * 1.05  # won by the margin, measured in full
    assert result.categories["chat"] >= 0.98  # and keeps every category
    chosen = plan.but(method=result.method, k=result.k, chain=steps_of(result.chain))
    assert chosen.short() == f"draft k={result.k} + ngram-mod k=16"


def test_ngram_mod_alone_wins_where_the_draft_does_not_pay(plan: Plan) -> None:
    # a draft that costs as much as it saves: only the copying pays
    law = CopyLaw(mod_gain=4.0, alpha=0.5, cost=0.7)
    result = tune(plan, law, max_k=8, methods=LLAMACPP, chains=True)
    assert result.method == "ngram-mod" and result.k == 16 and not result.chain


def test_without_copying_the_draft_alone_stays(plan: Plan) -> None:
    # ngram-mod finds nothing to copy (gain 1: the baseline's speed): the chain is the draft
    # plus noise, and the margin keeps the plain draft
    law = CopyLaw(mod_gain=1.0, alpha=0.8, cost=0.25)
    result = tune(plan, law, max_k=8, methods=LLAMACPP, chains=True)
    assert result.method == "draft" and not result.chain


def test_not_tried_where_the_backend_lacks_them(plan: Plan) -> None:
    law = CopyLaw(mod_gain=4.0, alpha=0.8, cost=0.25)
    tune(plan, law, max_k=8)  # e.g. vLLM: n-gram and p-min only
    assert not any("ngram-mod" in x for x in law.labels)
    law = CopyLaw(mod_gain=4.0, alpha=0.8, cost=0.25)
    tune(plan, law, max_k=8, methods=LLAMACPP, chains=False)  # one --spec-type at a time
    assert "ngram-mod k=16" in law.labels and not any("+" in x for x in law.labels)


def test_a_saved_chain_is_validated_like_fresh_input() -> None:
    base = {"profile": "p", "method": "draft", "k": 4, "p_min": None, "speedup": 1.6,
            "summary": "s", "alpha": 0.8, "cost": 0.2, "verify": {}, "baseline_tps": 10.0}
    ok = Result.from_json({**base, "chain": [{"method": "ngram-mod", "k": 16}]})
    assert steps_of(ok.chain)[0].method == "ngram-mod"
    for bad in ([{"method": "draft", "k": 4}], [{"method": "ngram-mod", "k": 0}],
                [{"method": "ngram-mod", "k": "16"}]):
        with pytest.raises(ValueError):
            Result.from_json({**base, "chain": bad})
    with pytest.raises(ValueError):
        Result.from_json({**base, "method": "none", "k": 0,
                          "chain": [{"method": "ngram-mod", "k": 16}]})


def test_the_law_is_what_the_cost_model_says() -> None:
    """The simulated draft runs at the cost model's speed (the tests above rest on it)."""
    law = CopyLaw(mod_gain=1.0, noise=0.0, alpha=0.8, cost=0.25)
    tps, _ = law.one(plans.plan(k=4), "draft k=4", 1)
    assert tps == pytest.approx(BASE_TPS * costmodel.speedup(0.8, 0.25, 4, law.verify))
