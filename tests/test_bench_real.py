"""A short real bench against real llama-server processes (SmolLM2-135M drafting for itself: fast,
and its acceptance is high, so the counters must be non-zero). Checks structure, not speed."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from tests.cli import specctl

pytestmark = pytest.mark.server


def test_short_bench_reports_raw_samples_that_recompute_the_medians(tmp_path: Path) -> None:
    profile = tmp_path / "smol.toml"
    profile.write_text('target = "testbed:smollm2-135m"\ndraft = "testbed:smollm2-135m"\n'
                       'k = 3\n[server]\ncontext = 2048\n')
    out = tmp_path / "report.json"
    done = specctl("bench", "--profile", str(profile), "--suite", "code,summarize",
                   "--prompts", "2", "--repeats", "2", "--max-tokens", "24", "--json", str(out))
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
    ratios = [s["decode_tps"] / base[(s["category"], s["prompt"], s["repeat"])]["decode_tps"]
              for s in spec]
    assert row["overall"]["speedup"] == pytest.approx(statistics.median(ratios))
    code = [r for s, r in zip(spec, ratios, strict=True) if s["category"] == "code"]
    assert row["code"]["speedup"] == pytest.approx(statistics.median(code))
    assert all(s["drafted"] == 0 for s in samples if s["config"] == "baseline")
    saved = list((Path(done.stdout.split("raw samples:")[1].strip())).parent.glob("*.json"))
    assert saved, "the report is also saved under the state dir"
