"""tune tries ngram-mod and the pick chained with ngram-mod where the backend has them, as paired
challengers in the same race as n-gram and p-min, kept only when their interval beats the pick
by the margin. Simulated engine (tests/simengine.py: the Leviathan law for the draft, a simulated
clock) with a known speed for ngram-mod on copying prompts, and injected noise bursts; no servers
(the real runs are the `server` tests and the bench in the closing note)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pytest

from specctl.orchestrator.contract.plan import Plan
from specctl.orchestrator.measure.lab.servers import Config
from specctl.orchestrator.measure.results.tuned import Result, steps_of
from specctl.orchestrator.measure.tune.flow import tune
from specctl.orchestrator.planning import costmodel
from tests import plans
from tests.simengine import CATEGORIES, Law, SimLab

LLAMACPP = frozenset({"none", "draft", "ngram", "ngram-mod", "ngram-map-k", "mtp"})
COPYING = frozenset(i for i, c in enumerate(CATEGORIES) if c == "code")  # edits: replies copy


@dataclass
class CopyLaw(Law):
    """The code prompts copy their input: ngram-mod drafts long runs there and runs `mod_gain`
    times the baseline; elsewhere it finds nothing to copy and drafts nothing. A chain drafts
    with whichever proposes: ngram-mod where it copies, the draft model elsewhere."""

    mod_gain: float = 4.0

    def per_token(self, plan: Plan, i: int, draft_ref: str,
                  tokens: int = 64) -> tuple[float, float, float]:
        uses_mod = plan.method == "ngram-mod" or any(s.method == "ngram-mod" for s in plan.chain)
        if uses_mod and i in COPYING:
            return 1 / self.base_tps / self.mod_gain, self.mod_gain, float(plan.k)
        if plan.method == "ngram-mod":
            return 1 / self.base_tps, 1.0, 0.0
        return super().per_token(plan.but(chain=()), i, draft_ref, tokens)


class Recording(SimLab):
    """The simulated lab, remembering every configuration it served."""

    def __init__(self, law: Law, plan: Plan, **kw: object) -> None:
        super().__init__(law, plan, **kw)  # type: ignore[arg-type]
        self.labels: list[str] = []

    def keep(self, configs: Sequence[Config]) -> None:
        self.labels += [label for label, _ in configs if label not in self.labels]
        super().keep(configs)


def law(alpha: float, cost: float, mod_gain: float) -> CopyLaw:
    return CopyLaw(alphas=(alpha,) * len(CATEGORIES), cost=cost, mod_gain=mod_gain)


@pytest.fixture
def plan() -> Plan:
    return plans.plan().but(k=3)


def run(plan: Plan, sim: CopyLaw, noise: float = 0.0, **kw: object) -> tuple[Result, Recording]:
    lab = Recording(sim, plan, seed=3, noise=noise)
    return tune(plan, lab, max_k=8, **kw), lab  # type: ignore[arg-type]


@pytest.mark.parametrize("noise", [0.0, 0.3])
def test_the_chain_wins_where_edits_copy_and_the_draft_pays_elsewhere(
        plan: Plan, noise: float) -> None:
    # the chain's per-prompt ratios are bimodal (4x where edits copy, the draft's elsewhere):
    # its interval needs more blocks than the default budget allows under bursts
    result, lab = run(plan, law(0.8, 0.2, 4.0), noise, methods=LLAMACPP, chains=True,
                      budget=600.0)
    assert result.settled, result.summary
    assert "ngram-mod k=16" in lab.labels and any("+ ngram-mod" in x for x in lab.labels)
    assert result.method == "draft" and [c.method for c in result.chain] == ["ngram-mod"]
    alone = [m for m in result.measured if m.method == "draft" and not m.chain and
             m.p_min is None and m.high is not None]
    assert alone and result.low is not None and result.low > max(m.speedup for m in alone)
    assert min(result.categories.values()) >= 0.98  # and keeps every category
    chosen = plan.but(method=result.method, k=result.k, chain=steps_of(result.chain))
    assert chosen.short() == f"draft k={result.k} + ngram-mod k=16"
    if not noise:  # and measures what the law says (a chain's steps are not pooled across
        # prompts: its copying steps, free of the draft model, would pass for all of them)
        truth = lab.law.true_speedup(chosen, plan.draft.ref if plan.draft else "")
        assert result.speedup == pytest.approx(truth, rel=0.05)


def test_ngram_mod_alone_wins_where_the_draft_does_not_pay(plan: Plan) -> None:
    # a draft that costs as much as it saves: only the copying pays
    result, _ = run(plan, law(0.5, 0.7, 4.0), methods=LLAMACPP, chains=True)
    assert result.method == "ngram-mod" and result.k == 16 and not result.chain


def test_without_copying_the_draft_alone_stays(plan: Plan) -> None:
    # ngram-mod finds nothing to copy (gain 1): the chain is the draft, and the margin keeps it
    result, _ = run(plan, law(0.8, 0.2, 1.0), methods=LLAMACPP, chains=True)
    assert result.method == "draft" and not result.chain


def test_not_tried_where_the_backend_lacks_them(plan: Plan) -> None:
    _, lab = run(plan, law(0.8, 0.2, 4.0))  # e.g. vLLM: n-gram and p-min only
    assert not any("ngram-mod" in x for x in lab.labels)
    _, lab = run(plan, law(0.8, 0.2, 4.0), methods=LLAMACPP, chains=False)  # one at a time
    assert "ngram-mod k=16" in lab.labels and not any("+" in x for x in lab.labels)


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


def test_the_law_is_what_the_cost_model_says(plan: Plan) -> None:
    """Off the copying prompts the simulated chain runs at the draft's law (the tests above
    rest on it)."""
    sim = law(0.8, 0.25, 4.0)
    chat = CATEGORIES.index("chat")
    chained = plans.plan().but(k=4).but(chain=steps_of(
        Result.from_json({"profile": "p", "method": "draft", "k": 4, "p_min": None,
                          "speedup": 1.0, "summary": "s", "alpha": 0.8, "cost": 0.2,
                          "verify": {}, "baseline_tps": 1.0,
                          "chain": [{"method": "ngram-mod", "k": 16}]}).chain))
    per_token, _, _ = sim.per_token(chained, chat, "")
    expected = 1 / sim.base_tps / costmodel.modelled_speedup(0.8, 0.25, 4, sim.verify)
    assert per_token == pytest.approx(expected)
