"""Bench report arithmetic on hand-made samples: paired speedups, acceptance, identity, verdict."""

from __future__ import annotations

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
    code = bench._group(samples, "k4", "code")
    assert code["n"] == 2
    assert code["speedup"] == 1.35  # median of 1.5 and 1.2
    assert code["acceptance"] == 50 / 80
    assert code["accepted_per_step"] == 50 / 20
    assert code["identical"] == 0.5
    overall = bench._group(samples, "k4", None)
    assert overall["n"] == 3 and overall["speedup"] == 1.2


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
