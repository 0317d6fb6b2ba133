"""A short real bench against real llama-server processes (SmolLM2-135M drafting for itself: fast,
and its acceptance is high, so the counters must be non-zero). Checks structure, not speed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.cli import specctl

pytestmark = pytest.mark.server


def test_short_bench_reports_raw_samples_that_recompute_the_speedups(tmp_path: Path) -> None:
    profile = tmp_path / "smol.toml"
    profile.write_text('target = "testbed:smollm2-135m"\ndraft = "testbed:smollm2-135m"\n'
                       'k = 3\n[server]\ncontext = 2048\n')
    out = tmp_path / "report.json"
    done = specctl("bench", "--profile", str(profile), "--suite", "code,summarize",
                   "--prompts", "2", "--repeats", "2", "--max-tokens", "24", "--output", str(out))
    assert done.returncode == 0, done.stderr
    assert "verdict:" in done.stdout
    report = json.loads(out.read_text())
    assert report["categories"] == ["code", "summarize"]
    row = report["configs"]["draft k=3"]
    samples = report["samples"]
    assert len(samples) == 2 * 2 * 2 * 2  # categories x prompts x repeats x (baseline + spec)
    spec = [s for s in samples if s["config"] == "draft k=3"]
    base = {(s["category"], s["prompt"], s["repeat"]): s for s in samples
            if s["config"] == "baseline"}
    assert sum(s["drafted"] for s in spec) > 0 and sum(s["accepted"] for s in spec) > 0
    assert row["overall"]["acceptance"] > 0.5
    def seconds(rows: list[dict[str, Any]]) -> float:
        return float(sum(r["tokens"] / r["decode_tps"] for r in rows)) / len(rows)

    def tokens(rows: list[dict[str, Any]]) -> float:
        return float(sum(r["tokens"] for r in rows)) / len(rows)

    paired = {c: ([s for s in spec if s["category"] == c],
                  [base[(s["category"], s["prompt"], s["repeat"])] for s in spec
                   if s["category"] == c]) for c in ("code", "summarize")}
    per_cat = {c: (tokens(a) / seconds(a)) / (tokens(b) / seconds(b))
               for c, (a, b) in paired.items()}
    assert row["code"]["speedup"] == pytest.approx(per_cat["code"])
    # overall: the two categories weighed alike, tokens over time
    num = sum(0.5 * tokens(a) for a, _ in paired.values())
    spec_t = sum(0.5 * seconds(a) for a, _ in paired.values())
    base_t = sum(0.5 * seconds(b) for _, b in paired.values())
    base_n = sum(0.5 * tokens(b) for _, b in paired.values())
    assert row["overall"]["speedup"] == pytest.approx((num / spec_t) / (base_n / base_t))
    assert all(s["drafted"] == 0 for s in samples if s["config"] == "baseline")
    saved = list((Path(done.stderr.split("raw samples:")[1].strip())).parent.glob("*.json"))
    assert saved, "the report is also saved under the state dir"


def test_sampling_check_passes_speculation_and_flags_the_draft_alone(tmp_path: Path) -> None:
    """bench --quality on real servers (the Qwen Q4 pair, chat, small budget): the speculative
    side is not flagged (p far from 0: a correct engine's p is uniform, so p < 0.001 is a 1 in
    1000 event), the draft served alone is (a really different distribution)."""
    profile = tmp_path / "qwen.toml"
    profile.write_text('target = "testbed:qwen-1.5b-q4"\ndraft = "testbed:qwen-0.5b-q4"\n'
                       'k = 3\n[server]\ncontext = 2048\n')
    found = {}
    for against in ("speculative", "draft"):
        out = tmp_path / f"{against}.json"
        done = specctl("bench", "--profile", str(profile), "--suite", "chat", "--prompts", "1",
                       "--repeats", "1", "--max-tokens", "8", "--quality", "--no-floor",
                       "--samples", "24", "--quality-against", against, "--output", str(out))
        assert done.returncode == 0, done.stderr
        found[against] = json.loads(out.read_text())["quality"]["categories"]["chat"]
    assert found["speculative"]["p_value"] > 0.001, found["speculative"]["message"]
    assert found["draft"]["verdict"] == "differs", found["draft"]["message"]


def test_tunes_short_sampling_check_passes_speculation_and_refuses_the_draft_alone(
        tmp_path: Path) -> None:
    """The gate `tune` runs before it saves (16 samples, one prompt per category), on the Qwen Q4
    pair: the speculative setting passes with a line that says what was checked; the draft served
    alone in its place (a really different distribution) is refused in one line."""
    import re

    from specctl.orchestrator.app import App
    from specctl.orchestrator.errors import SpecctlError
    from specctl.orchestrator.measure import bench as bench_mod
    from specctl.orchestrator.measure import lossless

    profile = tmp_path / "qwen.toml"
    profile.write_text('target = "testbed:qwen-1.5b-q4"\ndraft = "testbed:qwen-0.5b-q4"\n'
                       'k = 3\n[server]\ncontext = 2048\n')
    app = App.from_env()
    got = app.resolve(str(profile))
    prompts = {c: bench_mod.load_suite(c)[:1] for c in ("chat", "code", "summarize")}
    how = lossless.short(0.8, 0.95)
    said = lossless.gate(got.plan, got.backend, got.installed, prompts, how, app.dirs.logs,
                         lambda _m: None)
    assert said.startswith("sampling at temperature 0.8, top-p 0.95: no difference detected")
    assert re.search(r"chat p=[0-9.e-]+, code p=[0-9.e-]+, summarize p=", said), said
    with pytest.raises(SpecctlError) as refused:
        lossless.gate(got.plan, got.backend, got.installed, prompts, how, app.dirs.logs,
                      lambda _m: None, against="draft")
    assert "distributions differ" in str(refused.value) and "not saved" in str(refused.value)
    assert "\n" not in str(refused.value)
