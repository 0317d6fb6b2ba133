"""The statistics under `specctl bench`, on samples whose answers are known."""

from __future__ import annotations

from specctl.orchestrator.measure.estimates import estimate


def test_summary_of_known_samples() -> None:
    s = estimate.summarize([1.2, 1.4, 1.3, 1.5, 1.1])
    assert s.median == 1.3
    assert (s.minimum, s.maximum, s.n) == (1.1, 1.5, 5)
    assert s.minimum <= s.low <= s.median <= s.high <= s.maximum


def test_bootstrap_is_deterministic_and_tight_for_constant_samples() -> None:
    assert estimate.bootstrap_median([2.0] * 8) == (2.0, 2.0)
    a = estimate.bootstrap_median([1.0, 2.0, 3.0, 4.0, 10.0], seed=7)
    assert a == estimate.bootstrap_median([1.0, 2.0, 3.0, 4.0, 10.0], seed=7)


def test_noisy_flag() -> None:
    assert not estimate.summarize([1.40, 1.41, 1.42, 1.39, 1.40, 1.41]).noisy
    assert estimate.summarize([0.5, 1.6, 0.9, 2.2, 1.1, 0.7]).noisy
    assert estimate.summarize([1.4, 1.4]).noisy  # too few samples to trust
