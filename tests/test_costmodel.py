"""The speculative-decoding cost model against the paper's numbers (Leviathan et al. 2023)."""

from __future__ import annotations

import itertools

import pytest

from specctl.orchestrator.planning import costmodel
from specctl.orchestrator.planning.costmodel import (
    best,
    curve,
    linear_verify,
    modelled_speedup,
    tokens_per_step,
)


@pytest.mark.parametrize("max_k", [16, 10])
def test_alpha_08_c_005_best_k_8(max_k: int) -> None:
    pick = best(curve(0.8, 0.05, max_k))
    assert pick.k == 8
    assert pick.speedup == pytest.approx(3.09, abs=0.02)


@pytest.mark.parametrize("max_k", [16, 10])
def test_alpha_07_c_02_best_k_3(max_k: int) -> None:
    pick = best(curve(0.7, 0.2, max_k))
    assert pick.k == 3
    assert pick.speedup == pytest.approx(1.58, abs=0.02)


def test_curve_covers_1_to_max_k() -> None:
    points = curve(0.8, 0.05, max_k=16)
    assert [p.k for p in points] == list(range(1, 17))
    assert curve(0.8, 0.05)[-1].k == 16  # default max_k


def test_curve_rises_then_falls_around_the_best() -> None:
    speeds = [p.speedup for p in curve(0.8, 0.05, 16)]
    peak = speeds.index(max(speeds))
    assert 0 < peak < len(speeds) - 1
    assert all(a < b for a, b in itertools.pairwise(speeds[:peak + 1]))
    assert all(a > b for a, b in itertools.pairwise(speeds[peak:]))


def test_a_small_max_k_caps_the_pick() -> None:
    assert best(curve(0.8, 0.05, max_k=5)).k == 5


@pytest.mark.parametrize("k", [0, 1, 4, 16])
def test_tokens_per_step_at_alpha_1_is_k_plus_1(k: int) -> None:
    assert tokens_per_step(1.0, k) == k + 1


def test_tokens_per_step_formula() -> None:
    assert tokens_per_step(0.0, 5) == 1.0
    assert tokens_per_step(0.5, 1) == pytest.approx(1.5)
    assert tokens_per_step(0.8, 8) == pytest.approx((1 - 0.8**9) / 0.2)


@pytest.mark.parametrize("alpha", [-0.1, 1.01])
def test_alpha_out_of_range(alpha: float) -> None:
    with pytest.raises(ValueError, match="alpha"):
        tokens_per_step(alpha, 3)


def test_speedup() -> None:
    assert modelled_speedup(0.9, 0.1, 0) == 1.0
    assert modelled_speedup(1.0, 0.0, 4) == pytest.approx(5.0)
    assert modelled_speedup(0.8, 0.05, 8) == pytest.approx(tokens_per_step(0.8, 8) / 1.4)
    assert modelled_speedup(0.8, 0.05, 8, verify=lambda _k: 2.0) == pytest.approx(
        tokens_per_step(0.8, 8) / 2.4)


def test_costly_verification_moves_the_best_k_down() -> None:
    cheap = best(curve(0.8, 0.05, 16)).k
    costly = best(curve(0.8, 0.05, 16, verify=lambda k: 1.0 + 0.3 * k)).k
    assert costly < cheap


def test_linear_verify_interpolates() -> None:
    v = linear_verify({4: 2.0})
    assert v(0) == pytest.approx(1.0)
    assert v(2) == pytest.approx(1.5)
    assert v(4) == pytest.approx(2.0)


def test_linear_verify_extrapolates_past_the_last_sample() -> None:
    v = linear_verify({2: 1.5, 4: 2.5})
    assert v(3) == pytest.approx(2.0)
    assert v(8) == pytest.approx(4.5)  # slope 0.5 from the last two samples


def test_linear_verify_without_samples_is_one() -> None:
    v = linear_verify({})
    assert v(0) == 1.0
    assert v(7) == 1.0


def test_linear_verify_with_the_cpu_measurement() -> None:
    # TESTBED.md: on the CPU, verifying 5 tokens costs ~4 single steps (Q4 target)
    v = linear_verify({4: 4.0})
    pick = best(curve(0.72, 0.69, 8, verify=v))
    assert pick.speedup < 1.0  # speculation does not pay there


def test_point_fields() -> None:
    p = costmodel.curve(0.7, 0.2, 3)[2]
    assert p == costmodel.Point(3, tokens_per_step(0.7, 3), modelled_speedup(0.7, 0.2, 3))


def test_curve_over_prompts_takes_the_median_prompt() -> None:
    easy, hard, mid = (0.95, 0.9, 0.86), (0.3, 0.1, 0.03), (0.8, 0.64, 0.5)
    one = costmodel.curve_measured(mid, 0.8, 0.2, 3)
    assert costmodel.curve_over_prompts([mid], 0.8, 0.2, 3) == one
    over = costmodel.curve_over_prompts([easy, hard, mid], 0.8, 0.2, 3)
    assert [p.speedup for p in over] == pytest.approx([p.speedup for p in one])
