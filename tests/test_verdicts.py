"""bench's one verdict (measure/bench/verdicts.py) on simulated engines whose answer is known.

A simulated reply is a sequence of 4-character words (one word = one token). A correct engine
copies the baseline's reply and flips a near-tie with a known per-token probability (numerics),
after which it goes its own way; a broken engine (the draft served alone) leaves the baseline's
reply within its first few tokens. Speeds follow a known law with injected noise.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from specctl.orchestrator.measure.bench import flow as bench
from specctl.orchestrator.measure.bench import verdicts, versus
from specctl.orchestrator.measure.lossless import numerics
from tests import plans

BASE, SPEC, FLOOR = bench.BASELINE, "draft k=3", bench.FLOOR
TOKENS = 64
PLAN = plans.plan()  # summarize reads only the labels


def words(rng: np.random.Generator, n: int) -> list[str]:
    return [f"w{int(x):03d}" for x in rng.integers(0, 1000, n)]


def reply_after(base: list[str], start: int | None, rng: np.random.Generator) -> str:
    """The baseline's reply up to token `start`, then different tokens (None: identical)."""
    if start is None or start >= len(base):
        return "".join(base)
    return "".join(base[:start]) + "".join(f"x{int(x):03d}" for x in
                                           rng.integers(0, 1000, len(base) - start))


def numerics_start(rng: np.random.Generator, rate: float) -> int | None:
    start = int(rng.geometric(rate)) - 1 if rate > 0 else TOKENS
    return start if start < TOKENS else None


def sample(config: str, cat: str, prompt: int, tps: float, text: str, drafted: int = 40
           ) -> bench.Sample:
    return bench.Sample(config=config, method="draft", k=3, category=cat, prompt=prompt,
                        repeat=0, tokens=TOKENS, decode_tps=tps, wall_s=1.0, timed_by="server",
                        drafted=drafted if config != BASE else 0, accepted=drafted // 2,
                        drafts=drafted // 3, text_sha=str(hash(text)), text=text)


def report(rng: np.random.Generator, spec_start: Any, floor_start: Any = None, prompts: int = 3,
           speedup: float = 1.5, drafted: int = 40, cats: tuple[str, ...] = ("chat",),
           with_floor: bool = True) -> dict[str, Any]:
    """A bench report of simulated engines: the speculative server `speedup` times as fast
    (10% noise), its replies leaving the baseline's where `spec_start()` says."""
    samples = []
    for cat in cats:
        for i in range(prompts):
            base = words(rng, TOKENS)
            tps = 10.0 * rng.lognormal(0, 0.1)
            samples.append(sample(BASE, cat, i, tps, "".join(base)))
            samples.append(sample(SPEC, cat, i, tps * speedup * rng.lognormal(0, 0.1),
                                  reply_after(base, spec_start(), rng), drafted))
            if with_floor:
                samples.append(sample(FLOOR, cat, i, tps * 0.8,
                                      reply_after(base, floor_start and floor_start(), rng)))
    configs = [bench.Config(label, PLAN) for label in (BASE, SPEC, *([FLOOR] * with_floor))]
    out = bench.summarize(samples, configs, objective="decode")  # the samples' decode speeds
    out["samples"] = [vars(s) for s in samples]
    return out


def test_divergence_is_located_in_tokens() -> None:
    assert numerics.divergence("abcdefgh", "abcdefgh", 2) is None
    assert numerics.divergence("abcdXXXX", "abcdefgh", 2) == 1.0  # 4 chars shared, 4 per token
    assert numerics.divergence("", "abcdefgh", 2) == 0.0


def test_numerics_pass_and_early_divergence_fails_at_the_stated_rates() -> None:
    """Both sides of the model: a correct engine flipping near-ties at half the stated bound
    (1 in 200 tokens) is called "output changed" in at most LEVEL of runs; an engine whose
    replies leave the baseline's within the first tokens (the draft alone) is caught with 3
    prompts in almost every run, and late flips in every reply are still numerics."""
    rng = np.random.default_rng(1)
    false_alarms = sum(
        not numerics.greedy([(reply_after(b, numerics_start(rng, 0.005), rng), "".join(b),
                              TOKENS) for b in (words(rng, TOKENS) for _ in range(4))]).explained
        for _ in range(400))
    assert false_alarms / 400 <= numerics.LEVEL
    caught = sum(
        not numerics.greedy([(reply_after(b, int(rng.integers(0, 4)), rng), "".join(b), TOKENS)
                             for b in (words(rng, TOKENS) for _ in range(3))]).explained
        for _ in range(400))
    assert caught / 400 >= 0.99
    late = [words(rng, TOKENS) for _ in range(4)]
    everyone_late = numerics.greedy([(reply_after(b, 50, rng), "".join(b), TOKENS) for b in late])
    assert everyone_late.identical == 0 and everyone_late.explained
    one_reply = numerics.greedy([(reply_after(late[0], 0, rng), "".join(late[0]), TOKENS)])
    assert one_reply.early == 1 and not one_reply.explained  # a first-token flip: not numerics


def test_a_fast_engine_whose_output_changed_is_no_speedup() -> None:
    """The broken engine of the issue: 4x as fast, replies diverging from the first tokens, the
    floor on the same broken engine at 0% too. The verdict says "output changed", never
    "speculation helps"; the floor is reported failing, not read as numerics."""
    rng = np.random.default_rng(2)
    found = verdicts.judge(report(rng, lambda: int(rng.integers(0, 3)),
                                  lambda: int(rng.integers(0, 3)), speedup=4.0), True)
    assert found["outcome"] == verdicts.OUTPUT_CHANGED and found["usable"] == []
    assert found["verdict"].startswith(f"output changed: {SPEC} must not be used (chat: greedy")
    assert "helps" not in found["verdict"] and "broken engine" in found["verdict"]
    assert found["floor_check"]["passed"] is False
    row = found["configs"][SPEC]
    assert "speedup" not in row["overall"] and row["overall"]["ratio_not_a_speedup"]["speedup"] > 2
    assert "FAILS its own check" in row["chat"]["identity"]
    assert ": numerics explain it" not in row["chat"]["identity"]
    assert {f["kind"] for f in found["findings"]} == {verdicts.OUTPUT_CHANGED,
                                                     verdicts.BROKEN_ENGINE}


def test_a_broken_floor_is_named_even_when_the_speculative_side_looks_fine() -> None:
    rng = np.random.default_rng(3)
    found = verdicts.judge(report(rng, lambda: None, lambda: 0), True)
    assert found["outcome"] == verdicts.BROKEN_ENGINE
    assert found["verdict"].startswith("broken engine: the floor (every draft rejected) fails")
    assert found["usable"] == []


def test_a_correct_engine_keeps_its_speed_verdict() -> None:
    rng = np.random.default_rng(4)
    found = verdicts.judge(report(rng, lambda: numerics_start(rng, 0.005),
                                  lambda: numerics_start(rng, 0.005), prompts=4), True)
    assert found["outcome"] == "speed" and found["usable"] == [SPEC]
    assert found["verdict"].startswith("speculation helps (draft k=3: 1.")
    assert found["floor_check"]["passed"] is True
    assert found["configs"][SPEC]["overall"]["speedup"] > 1.2


def test_a_sampled_difference_changes_the_verdict_and_names_the_category() -> None:
    rng = np.random.default_rng(5)
    base = report(rng, lambda: None, cats=("chat", "code"))
    differs = {"verdict": "differs", "message": "distributions differ (p<=0.0005; strongest at "
               "position 6 of prompt 'code#1')"}
    same = {"verdict": "no difference detected", "message": "no difference detected (p=0.4)"}
    quality = {"against": "speculative", "config": SPEC,
               "categories": {"chat": same, "code": differs}}
    found = verdicts.judge({**base, "quality": quality}, True)
    assert found["outcome"] == verdicts.OUTPUT_CHANGED
    assert "code: sampled distributions differ (p<=0.0005; strongest at position 6" in \
        found["verdict"]
    assert "chat: sampled" not in found["verdict"]
    # checking the check (--quality-against draft) says nothing about the speculative setting
    check = verdicts.judge({**report(rng, lambda: None), "quality": {
        **quality, "against": "draft"}}, True)
    assert check["outcome"] == "speed"
    # the floor sampled at temperature > 0: a difference there is a broken engine
    floor = verdicts.judge({**report(rng, lambda: None), "floor_quality": {
        "categories": {"chat": differs}}}, True)
    assert floor["outcome"] == verdicts.BROKEN_ENGINE and floor["floor_check"]["passed"] is False


def test_an_engine_that_drafted_nothing_is_flagged_where_its_adapter_counts_drafts() -> None:
    rng = np.random.default_rng(6)
    found = verdicts.judge(report(rng, lambda: None, drafted=0, speedup=1.02), True)
    assert found["outcome"] == verdicts.DID_NOT_DRAFT
    assert found["verdict"].startswith(f"the engine did not draft ({SPEC})")
    assert "not a speculation speedup" in found["verdict"]
    assert "speedup" not in found["configs"][SPEC]["overall"]
    unknown = verdicts.judge(report(rng, lambda: None, drafted=0), False)
    assert unknown["outcome"] == "speed" and "reports no draft counters" in unknown["verdict"]


def test_bench_backends_never_picks_a_setting_whose_output_changed() -> None:
    rng = np.random.default_rng(7)
    judged = verdicts.judge(report(rng, lambda: 0, speedup=3.0, with_floor=False), True)
    samples = [bench.Sample(**s) for s in judged["samples"]]
    speed = versus.speed_of(judged, samples, {"chat": 1.0}, "llamacpp")
    assert (speed.setting, speed.speedup) == ("no draft", 1.0)
    fine = verdicts.judge(report(rng, lambda: None, speedup=3.0, with_floor=False), True)
    good = versus.speed_of(fine, [bench.Sample(**s) for s in fine["samples"]], {"chat": 1.0},
                           "llamacpp")
    assert good.setting == SPEC and good.speedup == pytest.approx(3.0, rel=0.3)
