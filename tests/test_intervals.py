"""The estimators under tune and bench on timings whose answers are known: low quantiles that
outside load cannot pull up, exact steps, the physical bound, the baseline's drift, and the
memory rule that decides whether two servers run side by side."""

from __future__ import annotations

from dataclasses import replace

import pytest

from specctl.orchestrator.contract import registry
from specctl.orchestrator.contract.memory import Budget
from specctl.orchestrator.contract.stats import SpecStats
from specctl.orchestrator.measure.estimates import intervals
from specctl.orchestrator.measure.lab.servers import Timed, fits_together
from tests import plans
from tests.conftest import recorded


def timed(label: str, prompt: int, seconds: float, accepted: int = 0, block: int = 0,
          drafted: int = 0) -> Timed:
    return Timed(label, prompt, 64, seconds, SpecStats(drafted, accepted, 10), block=block)


def test_quantile_interpolates_and_its_low_end_is_the_minimum() -> None:
    assert intervals.quantile([3.0, 1.0, 2.0], 0.0) == 1.0
    assert intervals.quantile([1.0, 2.0, 3.0, 4.0], 0.5) == 2.5
    with pytest.raises(ValueError):
        intervals.quantile([], 0.1)


def test_a_servers_decode_time_leaves_out_the_first_token() -> None:
    """As llama-server logged it: 16 tokens, 13 drafts accepted, 'mean len = 7.50', eval time
    786 ms: 2 verification steps of 393 ms (not 3 of 262), 15 tokens decoded. The client's
    clock covers the prompt's pass too: there it counts as a step."""
    server = Timed("k8", 0, 16, 0.786, SpecStats(13, 13, 2), timed_by="server")
    assert intervals.steps(server) == 2 and (13 + 2) / 2 == 7.5
    assert intervals.step_time(server) == pytest.approx(0.393)
    assert server.per_token == pytest.approx(0.786 / 15)
    client = replace(server, timed_by="client")
    assert intervals.steps(client) == 3 and client.per_token == pytest.approx(0.786 / 16)
    one = Timed("baseline", 0, 1, 0.05, SpecStats(), timed_by="server")
    assert intervals.steps(one) == 1 and one.per_token == pytest.approx(0.05)


def test_steps_are_exact_and_noise_only_lengthens_their_time() -> None:
    cats = {0: "code", 1: "code"}
    pairs: intervals.Pairs = {}
    for block in range(6):
        slow = 3.0 if block == 2 else 1.0  # one block hit by outside load, on one side each
        for i, accepted in ((0, 32), (1, 16)):
            s = timed("k4", i, (64 - accepted) * 0.2 * (slow if i == 0 else 1.0), accepted,
                      block, drafted=40)
            b = timed("baseline", i, 64 * 0.1 * (slow if i == 1 else 1.0), block=block)
            pairs.setdefault(i, []).append((s, b))
    got = intervals.paired_speedup(pairs, cats, {"code": 1.0})
    assert got is not None
    # 128 tokens in (32 + 48) steps of 0.2 s against 128 steps of 0.1 s
    assert got.point == pytest.approx(12.8 / (80 * 0.2))
    assert got.low <= got.point <= got.high and got.half_width < 0.05


def test_a_request_beside_outside_load_counts_with_that_load_taken_out() -> None:
    """One request of each side, the configuration's beside a burst (0.4 cores of other
    processes on average, as the CPU watch reports them): its 10 s count as 8 quiet (LOADED
    0.5 of its speed lost while the burst ran), and the speedup of a configuration as fast as
    the baseline reads 1.0x, not 0.8x. Beyond one core the loss is a core's."""
    from specctl.orchestrator.measure.lab.servers import LOADED
    quiet = timed("baseline", 0, 8.0)
    loaded = replace(timed("same", 0, 10.0), busy=0.4)
    assert LOADED == 0.5 and loaded.quiet_s == pytest.approx(8.0) and quiet.quiet_s == 8.0
    assert intervals.step_time(loaded) == pytest.approx(8.0 / 64)
    got = intervals.paired_speedup({0: [(loaded, quiet)]}, {0: "code"}, {"code": 1.0})
    assert got is not None and got.point == pytest.approx(1.0)
    raw = intervals.paired_speedup({0: [(replace(loaded, busy=0.0), quiet)]}, {0: "code"},
                            {"code": 1.0})
    assert raw is not None and raw.point == pytest.approx(0.8)
    assert replace(loaded, busy=1.7).quiet_s == pytest.approx(5.0)


def test_two_configurations_are_told_apart_directly_where_the_baseline_is_noisy() -> None:
    # A takes 8% fewer steps than B on every prompt; every request is slowed by outside load,
    # the baseline's much more (1-2x) than A's and B's (1-1.05x). Against the baseline their
    # intervals overlap; against each other (the baseline's time cancels) A is surely ahead.
    import random
    rng = random.Random(5)
    cats = {i: "code" for i in range(4)}
    a: intervals.Pairs = {}
    b: intervals.Pairs = {}
    for block in range(3):
        for i in range(4):
            base = timed("baseline", i, 64 * 0.1 * rng.uniform(1.0, 2.0), block=block)
            a.setdefault(i, []).append(
                (timed("A", i, 24 * 0.2 * rng.uniform(1.0, 1.05), 40, block, 40), base))
            b.setdefault(i, []).append(
                (timed("B", i, 26 * 0.2 * rng.uniform(1.0, 1.05), 38, block, 40), base))
    weights = {"code": 1.0}
    ia, ib = intervals.paired_speedup(a, cats, weights), intervals.paired_speedup(b, cats, weights)
    rel = intervals.relative(a, b, cats, weights)
    assert ia is not None and ib is not None and rel is not None
    assert ia.low < ib.point  # the old test (A's bottom above B's point) cannot decide
    assert rel.point == pytest.approx(ia.point / ib.point)
    assert rel.low > 1.0 and rel.point > 1.05  # directly: A is ahead by the margin, surely
    assert intervals.relative(a, {}, cats, weights) is None  # nothing in common


def test_pairs_above_the_physical_bound_are_discarded_and_counted() -> None:
    assert intervals.bound("draft", 2, 0.235) == pytest.approx(3 / 1.47)
    assert intervals.bound("ngram", 4, 0.0) == 5.0
    fine = (timed("k2", 0, 3.2), timed("baseline", 0, 6.4))  # 2x
    noise = (timed("k2", 0, 1.6, block=1), timed("baseline", 0, 9.6, block=1))  # 6x
    kept, dropped = intervals.plausible({0: [fine, noise]}, intervals.bound("draft", 2, 0.235))
    assert dropped == 1 and kept == {0: [fine]}


def test_drift_is_the_baselines_own_change_between_blocks() -> None:
    steady = [timed("baseline", i, 6.4, block=b) for b in range(3) for i in range(2)]
    assert intervals.drift(steady, "baseline") == 0.0
    slower = [*steady, *(timed("baseline", i, 8.0, block=3) for i in range(2))]
    assert intervals.drift(slower, "baseline") == pytest.approx(0.25)


def test_mmapped_weights_count_once_only_where_the_backend_shares_them() -> None:
    llama = registry.adapter_classes()["llamacpp"]
    tight = plans.plan(memory=replace(plans.memory(), budget=Budget(6_000_000_000, "6 GB")))
    baseline, speculative = tight.baseline(), tight
    adapter = llama.__new__(llama)  # shares_weights reads the plan only
    # target 3.56 + draft 0.49 + caches and buffers: two copies of the target do not fit in
    # 6 GB, one shared copy does (llama.cpp on the CPU maps the file once)
    assert adapter.shares_weights(tight)
    assert fits_together(adapter, [baseline, speculative])
    cuda = tight.but(hardware=recorded("linux_1x_rtx4090_24g"))
    assert not adapter.shares_weights(cuda)
    assert not fits_together(adapter, [cuda.baseline(), cuda])
    assert fits_together(adapter, [cuda])  # one server always "fits" here


def test_only_a_draft_model_pays_c_in_the_bound() -> None:
    # a draft model's k drafts cost k*c: (k+1)/(k*c+1); n-gram methods and heads draft for free
    assert intervals.bound("draft", 4, 0.5) == pytest.approx(5 / 3)
    assert intervals.bound("ngram", 8, 0.5) == intervals.bound("ngram-mod", 8, 0.5) == 9.0
    # a draft chained with ngram-mod k=16: the n-gram drafts are free, up to 17 tokens a step
    assert intervals.bound("draft", 4, 0.5, (16,)) == 17.0
    assert intervals.bound("draft", 0, 0.5) == 1.0


def test_a_routed_configuration_pools_each_prompt_apart() -> None:
    """Routed: one summary goes to n-gram (cheap steps, many tokens each), the other to a draft
    of k=3 (dearer steps). Pooled by category, the low quantile took n-gram's step time for
    both and measured the category above both prompts' own speedups (cpu-demo: 1.64x where
    its prompts gave 1.21-1.49x); pooled by prompt, the estimate is the throughput's."""
    def timed(label: str, i: int, steps: int, step_s: float, jitter: float) -> Timed:
        return Timed(label, i, 64, steps * step_s * jitter,
                     SpecStats(drafted=64 - steps, accepted=64 - steps, drafts=steps))
    pairs: intervals.Pairs = {}
    for jitter in (1.0, 1.01, 1.03, 1.02):
        for i, (steps, step_s) in enumerate(((32, 0.11), (20, 0.25))):  # n-gram, draft
            pairs.setdefault(i, []).append((timed("routed", i, steps, step_s, jitter),
                                            timed("baseline", i, 64, 0.1, jitter)))
    cats, weights = {0: "summarize", 1: "summarize"}, {"summarize": 1.0}
    own = [6.4 / (32 * 0.11), 6.4 / (20 * 0.25)]  # 1.82x and 1.28x
    routed = intervals.paired_speedup(pairs, cats, weights, poolable="prompt")
    assert routed is not None
    assert min(own) <= routed.point <= max(own)
    assert routed.point == pytest.approx(12.8 / (32 * 0.11 + 20 * 0.25), rel=0.01)
    pooled = intervals.paired_speedup(pairs, cats, weights, poolable="category")
    assert pooled is not None and pooled.point > max(own)  # what it measured before


def test_both_sides_pool_alike_so_the_pools_size_pulls_neither() -> None:
    """Three servers of one argv, every request's time drawn from the same spread (a quiet
    host whose requests vary by a third, as cpu-demo's did: 9.2-13.2 tok/s on one server). A
    low quantile of two timings is slower than one of forty-eight: pooled by prompt against the
    baseline pooled as one, an equal server measured 0.93x (cpu-demo's routed figure against
    n-gram, 0.93x [0.88-0.98], where the requests' throughput gave 1.06x). Pooled alike, it is
    1.00x, against the baseline and against another equal server pooled otherwise. Pooled by
    category (twelve timings against the baseline's forty-eight) it keeps a pull of about 3% at
    this spread, which offsets in part the opposite pull of pooling unlike steps (intervals.py)."""
    import random
    rng = random.Random(11)
    cats = {i: ("chat", "code", "summarize", "edit")[i % 4] for i in range(24)}
    weights = dict.fromkeys(("chat", "code", "summarize", "edit"), 0.25)
    a: intervals.Pairs = {}
    b: intervals.Pairs = {}
    for block in range(2):
        for i in range(24):
            base = timed("baseline", i, 6.4 * rng.uniform(1.0, 1.4), block=block)
            a.setdefault(i, []).append((timed("A", i, 6.4 * rng.uniform(1.0, 1.4),
                                              block=block), base))
            b.setdefault(i, []).append((timed("B", i, 6.4 * rng.uniform(1.0, 1.4),
                                              block=block), base))
    for pooling in ("prompt", "steps"):
        got = intervals.paired_speedup(a, cats, weights, poolable=pooling)
        assert got is not None and got.low <= 1.0 <= got.high, (pooling, got)
        assert got.point == pytest.approx(1.0, abs=0.04), (pooling, got)
    category = intervals.paired_speedup(a, cats, weights, poolable="category")
    assert category is not None and 0.94 < category.point < 1.0, category
    rel = intervals.relative(a, b, cats, weights, poolable=("prompt", "steps"))
    assert rel is not None and rel.low <= 1.0 <= rel.high and rel.point == pytest.approx(
        1.0, abs=0.04), rel
