"""The statistics under `specctl bench --quality`, on synthetic samples whose answer is known.

The synthetic "language model": per prompt and token position a categorical distribution over 50
tokens, peaked with a long Zipf tail, that depends on the previous token (three context classes),
so the positions of one completion are dependent as in real text. A "draft" model is the target
with noisy logits. Every trial is seeded.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from specctl.orchestrator.measure.lossless import twosample as quality
from tests import plans

Array = npt.NDArray[np.float64]
VOCAB = 50
CONTEXTS = 3
PERMUTATIONS = 499  # tests may use fewer than the default: the permutation p is exact for any


@dataclass(frozen=True)
class Model:
    """Token distributions, shape (positions, contexts, vocab); context = previous token % 3."""

    probs: Array

    def sample(self, rng: np.random.Generator, n: int, mix: Model | None = None,
               eps: float = 0.0) -> tuple[list[list[int]], list[float]]:
        """n completions from (1 - eps) * self + eps * mix at every position, with each one's
        mean log-likelihood under self (the target)."""
        positions = self.probs.shape[0]
        tokens = np.zeros((n, positions), dtype=np.intp)
        context = np.zeros(n, dtype=np.intp)
        loglik = np.zeros(n)
        for j in range(positions):
            dist = self.probs[j, context]
            if mix is not None:
                dist = (1.0 - eps) * dist + eps * mix.probs[j, context]
            tokens[:, j] = _draw(rng, dist)
            loglik += np.log(self.probs[j, context, tokens[:, j]])
            context = tokens[:, j] % CONTEXTS
        return tokens.tolist(), (loglik / positions).tolist()

    def speculative(self, rng: np.random.Generator, n: int, draft: Model,
                    residual_bug: bool = False) -> list[list[int]]:
        """n completions through token-level rejection sampling: the draft proposes x ~ q, the
        target keeps it with probability min(1, p(x)/q(x)), else draws from the residual
        norm(max(0, p - q)) — or, with the bug, from p itself."""
        positions = self.probs.shape[0]
        tokens = np.zeros((n, positions), dtype=np.intp)
        context = np.zeros(n, dtype=np.intp)
        for j in range(positions):
            p, q = self.probs[j, context], draft.probs[j, context]
            proposal = _draw(rng, q)
            rows = np.arange(n)
            keep = rng.random(n) * q[rows, proposal] < p[rows, proposal]
            residual = p if residual_bug else np.maximum(p - q, 0.0)
            fallback = _draw(rng, residual + 1e-300)
            tokens[:, j] = np.where(keep, proposal, fallback)
            context = tokens[:, j] % CONTEXTS
        return tokens.tolist()


def _draw(rng: np.random.Generator, dist: Array) -> npt.NDArray[np.intp]:
    cdf = dist.cumsum(axis=1)
    u = rng.random((len(dist), 1)) * cdf[:, -1:]
    drawn: npt.NDArray[np.intp] = np.minimum((cdf < u).sum(axis=1), VOCAB - 1)
    return drawn


def target_model(rng: np.random.Generator, positions: int) -> Model:
    """Peaked with a long tail: Zipf over 50 tokens with exponent 1-2 (top token 0.2-0.6)."""
    exponents = rng.uniform(1.0, 2.0, size=(positions, CONTEXTS, 1))
    weights = 1.0 / np.arange(1, VOCAB + 1) ** exponents
    weights = rng.permuted(np.broadcast_to(weights, weights.shape).copy(), axis=2)
    return Model(weights / weights.sum(axis=2, keepdims=True))


def draft_model(rng: np.random.Generator, target: Model, noise: float = 1.5) -> Model:
    logits = np.log(target.probs) + rng.normal(0.0, noise, size=target.probs.shape)
    weights = np.exp(logits - logits.max(axis=2, keepdims=True))
    return Model(weights / weights.sum(axis=2, keepdims=True))


def tv(a: Array, b: Array) -> float:
    """Mean total variation over positions and contexts."""
    return float(0.5 * np.abs(a - b).sum(axis=2).mean())


def category(rng: np.random.Generator, *, prompts: int = 6, positions: int = 8, n: int = 40,
             eps: float = 0.0, noise: float = 1.5) -> list[quality.PromptSamples]:
    return category_and_shift(rng, prompts=prompts, positions=positions, n=n, eps=eps,
                              noise=noise)[0]


def category_and_shift(rng: np.random.Generator, *, prompts: int, positions: int, n: int,
                       eps: float, noise: float) -> tuple[list[quality.PromptSamples], float]:
    """A category's samples (candidate = (1 - eps) target + eps draft) and the mean total
    variation between the candidate's and the target's token distributions."""
    out = []
    shifts = []
    for i in range(prompts):
        target = target_model(rng, positions)
        draft = draft_model(rng, target, noise)
        base, base_ll = target.sample(rng, n)
        cand, cand_ll = target.sample(rng, n, draft, eps)
        out.append(quality.PromptSamples(base, cand, base_ll, cand_ll, label=f"p{i}"))
        shifts.append(tv(target.probs, (1 - eps) * target.probs + eps * draft.probs))
    return out, float(np.mean(shifts))


def flagged(trials: int, seed: int, permutations: int = PERMUTATIONS, **kw: Any) -> float:
    rng = np.random.default_rng(seed)
    hits = sum(quality.compare(category(rng, **kw), permutations=permutations, seed=t).differs
               for t in range(trials))
    return hits / trials


def binomial_allowance(rate: float, trials: int) -> float:
    return 3.0 * math.sqrt(rate * (1.0 - rate) / trials)


# -- false alarms and power ---------------------------------------------------------------------


def test_false_alarm_rate_is_within_alpha_on_identical_distributions() -> None:
    """Both families, Bonferroni-combined, 5 prompts x 6 dependent positions x 30 a side."""
    trials = 300
    rate = flagged(trials, seed=11, prompts=5, positions=6, n=30, permutations=199)
    assert rate <= 0.05 + binomial_allowance(0.05, trials), rate


def test_correct_rejection_sampling_passes_and_a_wrong_residual_is_caught() -> None:
    """Token-level rejection sampling against a draft that the target accepts ~57% of the time;
    the bug draws rejected tokens from p instead of norm(max(0, p - q)). 8 prompts x 60 a side
    (at 40 a side the bug is caught ~75% of the time)."""
    rng = np.random.default_rng(5)
    trials = 15
    passed = caught = 0
    for t in range(trials):
        good, bad = [], []
        for _ in range(8):
            target = target_model(rng, 8)
            draft = draft_model(rng, target)
            base, _ = target.sample(rng, 60)
            good.append(quality.PromptSamples(base, target.speculative(rng, 60, draft)))
            bad.append(quality.PromptSamples(base, target.speculative(rng, 60, draft, True)))
        passed += not quality.compare(good, permutations=PERMUTATIONS, seed=t).differs
        caught += quality.compare(bad, permutations=PERMUTATIONS, seed=t).differs
    assert passed >= trials - 3  # P(more than 3 of 15 false alarms at 5%) < 0.01
    assert caught >= 0.8 * trials


def test_a_leaking_draft_is_detected() -> None:
    """candidate = 0.7 target + 0.3 draft (TV(target, draft) ~0.43, so ~0.13 per position),
    40 samples a side, 8 prompts x 8 positions; ~0.9 of trials in a 200-trial run."""
    assert flagged(40, seed=3, prompts=8, eps=0.3) >= 0.8


def test_a_small_shift_is_not_detected_and_the_detectable_shift_is_larger() -> None:
    """eps = 0.03 of the draft: a shift of ~0.013 per position, far below what 40 a side see."""
    rng = np.random.default_rng(8)
    trials = 20
    hits = 0
    for t in range(trials):
        prompts, shift = category_and_shift(rng, prompts=6, positions=8, n=40, eps=0.03,
                                            noise=1.5)
        result = quality.compare(prompts, permutations=PERMUTATIONS, seed=t)
        hits += result.differs
        assert result.tokens is not None and result.tokens.min_detectable_tv is not None
        assert result.tokens.min_detectable_tv > 3 * shift
    assert hits <= 4
    assert "could have detected a shift of" in quality.compare(
        category(rng, prompts=6, eps=0.03), permutations=PERMUTATIONS).message()


def test_a_shift_of_the_minimum_detectable_size_is_detected_about_as_often_as_promised() -> None:
    """Worst-case direction: the top token holds exactly half the mass and gains d, the rest
    loses d in proportion (chi-square divergence 4 d^2). Promised power 0.8 (conservatively)."""
    rng = np.random.default_rng(21)
    prompts, positions, n = 6, 8, 40

    def dist() -> Array:
        tail = 1.0 / np.arange(1, VOCAB) ** 1.5
        return np.concatenate([[0.5], 0.5 * tail / tail.sum()])

    def side(probs: Array) -> list[list[int]]:
        drawn = np.stack([_draw(rng, np.tile(probs, (n, 1))) for _ in range(positions)], axis=1)
        rows: list[list[int]] = drawn.tolist()
        return rows

    def sample(d: float) -> list[quality.PromptSamples]:
        p = dist()
        q = np.concatenate([[0.5 + d], p[1:] * (0.5 - d) / 0.5])
        return [quality.PromptSamples(side(p), side(q)) for _ in range(prompts)]

    tokens = quality.compare(sample(0.0), permutations=PERMUTATIONS).tokens
    assert tokens is not None and tokens.min_detectable_tv is not None
    d = tokens.min_detectable_tv
    assert 0.05 < d < 0.2
    trials = 40
    hits = sum(quality.compare(sample(d), permutations=PERMUTATIONS, seed=t).differs
               for t in range(trials))
    assert hits >= 0.7 * trials


# -- log-likelihood -----------------------------------------------------------------------------


def loglik_only(rng: np.random.Generator, shift: float,
                n: int = 40) -> list[quality.PromptSamples]:
    """Identical token draws on both sides (so only the log-likelihood can tell)."""
    out = []
    for i in range(6):
        mean = rng.uniform(-2.5, -0.5)
        tokens = [[0, 1, 2]] * n
        base = rng.normal(mean, 0.4, n).tolist()
        cand = rng.normal(mean + shift, 0.4, n).tolist()
        out.append(quality.PromptSamples(tokens, tokens, base, cand, label=f"p{i}"))
    return out


def test_loglik_test_flags_a_shift_and_passes_equal_ones() -> None:
    rng = np.random.default_rng(2)
    shifted = quality.compare(loglik_only(rng, -0.25), permutations=PERMUTATIONS)
    assert shifted.differs and shifted.loglik is not None
    assert shifted.loglik.mean_shift == pytest.approx(-0.25, abs=0.1)
    assert "less likely under the target" in shifted.message()
    assert shifted.loglik.min_detectable_shift is not None
    assert 0.05 < shifted.loglik.min_detectable_shift < 0.25
    hits = sum(quality.compare(loglik_only(rng, 0.0), permutations=PERMUTATIONS,
                               seed=t).differs for t in range(40))
    assert hits <= 6  # P(more than 6 of 40 at 5%) < 0.02


def test_loglik_stratifies_by_prompt() -> None:
    """Prompts with very different likelihood levels and unequal sample counts per side: a
    pooled test would see a shift; the stratified one does not."""
    rng = np.random.default_rng(4)
    prompts = []
    for mean, n_base, n_cand in ((-0.5, 40, 10), (-3.0, 10, 40)):
        tokens_b, tokens_c = [[1]] * n_base, [[1]] * n_cand
        prompts.append(quality.PromptSamples(
            tokens_b, tokens_c, rng.normal(mean, 0.3, n_base).tolist(),
            rng.normal(mean, 0.3, n_cand).tolist()))
    result = quality.compare(prompts, permutations=PERMUTATIONS)
    assert not result.differs
    assert result.loglik is not None and abs(result.loglik.mean_shift) < 0.2


def test_a_leaking_draft_moves_the_target_loglik() -> None:
    rng = np.random.default_rng(9)
    result = quality.compare(category(rng, eps=0.5), permutations=PERMUTATIONS)
    assert result.loglik is not None
    assert result.loglik.mean_shift < 0 and result.loglik.p_value < 0.05


# -- edge cases ---------------------------------------------------------------------------------


def test_greedy_identical_samples() -> None:
    same = [["The", " cat", " sat"]] * 20
    result = quality.compare([quality.PromptSamples(same, same)] * 4, permutations=99)
    assert result.verdict == quality.NO_DIFFERENCE and result.p_value == 1.0
    assert result.tokens is not None and result.tokens.cells_tested == 0
    assert result.tokens.cells == 12 and result.tokens.min_detectable_tv is not None
    assert "could have detected" in result.message()


def test_greedy_but_different_is_detected() -> None:
    prompts = [quality.PromptSamples([["a", "b"]] * 20, [["a", "c"]] * 20, label=f"q{i}")
               for i in range(4)]
    result = quality.compare(prompts, permutations=999)
    assert result.differs
    assert result.tokens is not None and result.tokens.strongest is not None
    assert result.tokens.strongest.position == 1
    assert "position 1 of prompt 'q" in result.message()


def test_all_samples_one_token() -> None:
    result = quality.compare([quality.PromptSamples([[7]] * 30, [[7]] * 30)], permutations=99)
    assert result.verdict == quality.NO_DIFFERENCE
    assert result.tokens is not None and result.tokens.strongest is None


@pytest.mark.parametrize("prompts", [
    [],
    [quality.PromptSamples([], [[1, 2]] * 5)],
    [quality.PromptSamples([[1, 2]] * 5, [], [-1.0] * 5, [])],
])
def test_one_side_empty_is_insufficient(prompts: Sequence[quality.PromptSamples]) -> None:
    result = quality.compare(prompts, permutations=99)
    assert result.verdict == quality.INSUFFICIENT and not result.differs
    assert result.tokens is None and result.loglik is None
    assert result.message().startswith("insufficient data")
    json.dumps(result.to_json())


def test_a_prompt_missing_one_side_is_skipped() -> None:
    rng = np.random.default_rng(6)
    prompts = [*category(rng, prompts=3), quality.PromptSamples([[1, 2]] * 9, [])]
    result = quality.compare(prompts, permutations=PERMUTATIONS)
    assert result.prompts == 3 and result.baseline_samples == 120


@pytest.mark.parametrize("n", [1, 2, 3])
def test_tiny_counts(n: int) -> None:
    prompts = [quality.PromptSamples([[1, 2, 3]] * n, [[4, 5]] * n, [-1.0] * n, [-9.0] * n)]
    result = quality.compare(prompts, permutations=199)
    assert result.verdict == quality.NO_DIFFERENCE  # no test can reach 5% with 2n samples
    assert 0.0 < result.p_value <= 1.0
    json.dumps(result.to_json())


def test_ragged_lengths_and_unscored_samples() -> None:
    base = [["a", "b", "c"], ["a"], [], ["a", "b"]] * 5
    cand = [["a", "b"], ["a", "b", "c", "d", "e"], ["a"], []] * 5
    lls = [-1.0, float("nan"), -1.2, -0.9] * 5
    result = quality.compare([quality.PromptSamples(base, cand, lls, lls)], positions=4,
                             permutations=199)
    assert result.verdict == quality.NO_DIFFERENCE
    assert result.loglik is not None and result.loglik.baseline_samples == 15
    assert result.positions == 4


def test_loglik_length_must_match() -> None:
    with pytest.raises(ValueError):
        quality.compare([quality.PromptSamples([[1]] * 3, [[1]] * 3, [-1.0] * 2, [-1.0] * 3)])


def test_parameters_are_checked() -> None:
    with pytest.raises(ValueError):
        quality.compare([], alpha=0.0)
    with pytest.raises(ValueError):
        quality.compare([], permutations=0)


def _plain(value: object) -> bool:
    if isinstance(value, dict):
        return all(isinstance(k, str) and _plain(v) for k, v in value.items())
    return value is None or type(value) in (str, int, float, bool)


def test_result_json_is_plain_and_deterministic() -> None:
    prompts = category(np.random.default_rng(1), prompts=3, eps=0.3)
    a = quality.compare(prompts, permutations=PERMUTATIONS, seed=3, category="chat").to_json()
    b = quality.compare(prompts, permutations=PERMUTATIONS, seed=3, category="chat").to_json()
    assert a == b and _plain(a)
    assert json.loads(json.dumps(a)) == a
    assert a["category"] == "chat" and a["verdict"] in (quality.DIFFERS, quality.NO_DIFFERENCE)
    assert a["message"].startswith(("distributions differ", "no difference detected"))


def test_min_detectable_tv_shrinks_with_samples() -> None:
    small = quality.min_detectable_tv([20.0] * 48, [4] * 48, 0.0125, 0.8)
    large = quality.min_detectable_tv([80.0] * 48, [4] * 48, 0.0125, 0.8)
    assert small is not None and large is not None
    assert large == pytest.approx(small / 2, rel=0.01)  # noncentrality grows as n_eff d^2
    assert quality.min_detectable_tv([], [], 0.05, 0.8) is None
    assert quality.min_detectable_tv([0.5], [1], 0.05, 0.8) == 1.0


def test_the_sampler_never_gives_two_choices_one_seed(monkeypatch: pytest.MonkeyPatch) -> None:
    """A server seeds choice i of a request with seed + i: requests must step their seed by the
    batch, or two samples are one sample twice (seen on llama-server: a false 'differs')."""
    from specctl.orchestrator.contract.launch import Endpoint
    from specctl.orchestrator.measure.lab import engine
    from specctl.orchestrator.measure.lossless import check as lossless
    from specctl.orchestrator.runtime import client

    seeds: list[int] = []

    def sample(_ep: object, _p: str, _t: int, _temp: float, _top: float, seed: int, n: int,
               _model: object = None, extra: object = None) -> list[list[int]]:
        seeds.extend(seed + i for i in range(n))
        return [[seed + i] for i in range(n)]

    monkeypatch.setattr(client, "sample", sample)
    served = engine.Served(plans.plan(), None, Endpoint("http://x/v1"))  # type: ignore[arg-type]
    got = lossless.draw(served, "p", lossless.Sampling(0.8, 0.95, samples=30, batch=8), 100)
    assert len(got) == 30 and len(set(seeds)) == len(seeds) == 30
