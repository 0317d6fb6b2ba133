"""Bench report arithmetic on hand-made samples: paired speedups, acceptance, identity, verdict."""

from __future__ import annotations

import pytest

from specctl.orchestrator.measure import bench

BASE = bench.BASELINE


def sample(config: str, cat: str, prompt: int, tps: float, drafted: int = 0,
           accepted: int = 0, drafts: int = 0, sha: str = "same") -> bench.Sample:
    return bench.Sample(config=config, method="draft", k=4, category=cat, prompt=prompt,
                        repeat=0, tokens=64, decode_tps=tps, wall_s=1.0, timed_by="server",
                        drafted=drafted, accepted=accepted, drafts=drafts, text_sha=sha)


def test_groups_pair_each_sample_with_its_baseline() -> None:
    samples = [sample(BASE, "code", 0, 10.0), sample("k4", "code", 0, 15.0, 40, 30, 10),
               sample(BASE, "code", 1, 10.0), sample("k4", "code", 1, 12.0, 40, 20, 10, "diff"),
               sample(BASE, "chat", 0, 8.0), sample("k4", "chat", 0, 6.0, 40, 10, 10)]
    mix = {"code": 0.5, "chat": 0.5}
    code = bench._group(samples, "k4", "code", mix)
    assert code["n"] == 2
    # throughput: 128 tokens in 64/15 + 64/12 s against 128 tokens in 12.8 s
    assert code["speedup"] == pytest.approx(12.8 / (64 / 15 + 64 / 12))
    assert (code["speedup_min"], code["speedup_max"]) == (1.2, 1.5)
    assert code["acceptance"] == 50 / 80
    assert code["accepted_per_step"] == 50 / 20
    assert code["identical"] == 0.5
    overall = bench._group(samples, "k4", None, mix)
    # the mix: each category's mean request time, weighted alike
    spec_t = 0.5 * (64 / 15 + 64 / 12) / 2 + 0.5 * 64 / 6
    base_t = 0.5 * 6.4 + 0.5 * 8.0
    assert overall["n"] == 3 and overall["speedup"] == pytest.approx(base_t / spec_t)
    chat_heavy = bench._group(samples, "k4", None, {"code": 0.1, "chat": 0.9})
    assert chat_heavy["speedup"] < overall["speedup"] < code["speedup"]


def test_concurrency_levels_pair_rounds_and_find_where_speculation_stops_paying() -> None:
    def rnd(config: str, level: int, n: int, wall: float) -> list[bench.Sample]:
        return [bench.Sample(config=config, method="draft", k=4, category="code", prompt=j,
                             repeat=0, tokens=50, decode_tps=10.0, wall_s=wall,
                             timed_by="server", drafted=0, accepted=0, drafts=0, text_sha="x",
                             level=level, round=n, round_wall_s=wall) for j in range(level)]
    samples = [*rnd(BASE, 2, 0, 10.0), *rnd("k4", 2, 0, 8.0),
               *rnd(BASE, 4, 0, 10.0), *rnd("k4", 4, 0, 12.5)]
    levels = bench.concurrency(samples, "k4")
    assert [(r["level"], r["speedup"]) for r in levels] == [(2, 1.25), (4, 0.8)]
    assert levels[1]["baseline_tps"] == 20.0 and levels[1]["tps"] == 16.0
    assert bench.stops_paying(levels, 1.4) == 4
    assert bench.stops_paying(levels, 0.9) == 1


def test_verdicts() -> None:
    def table(speedup: float) -> dict[str, dict[str, dict[str, object]]]:
        return {"k4": {"overall": {"speedup": speedup, "noisy": False},
                       "code": {"speedup": speedup}}}

    assert bench.verdict(table(1.43), ["code"]).startswith("speculation helps (k4: 1.43x")
    assert "does not pay here: turn it off" in bench.verdict(table(0.57), ["code"])
    assert "no clear difference" in bench.verdict(table(1.01), ["code"])


def test_every_suite_has_a_dozen_distinct_prompts() -> None:
    for name in bench.SUITES:
        prompts = bench.load_suite(name)
        assert len(prompts) >= 12 and len(set(prompts)) == len(prompts)
