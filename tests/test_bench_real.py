"""A short real bench against real llama-server processes (SmolLM2-135M drafting for itself: fast,
and its acceptance is high, so the counters must be non-zero). Checks structure, not speed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specctl.orchestrator.measure.bench import flow as bench
from specctl.orchestrator.measure.estimates import intervals
from specctl.orchestrator.measure.prompts import suites
from tests.cli import specctl

pytestmark = pytest.mark.server


def test_short_bench_reports_raw_samples_that_recompute_the_speedups(tmp_path: Path) -> None:
    profile = tmp_path / "smol.toml"
    profile.write_text('target = "testbed:smollm2-135m"\ndraft = "testbed:smollm2-135m"\n'
                       'k = 3\n[server]\ncontext = 2048\n')
    out = tmp_path / "report.json"
    done = specctl("bench", "--profile", str(profile), "--suite", "code,summarize",
                   "--prompts", "2", "--repeats", "2", "--precision", "0", "--max-tokens", "24",
                   "--also", "baseline",
                   "--output", str(out))
    assert done.returncode == 0, done.stderr
    assert "verdict:" in done.stdout and "A/A control (a second baseline server" in done.stdout
    report = json.loads(out.read_text())
    assert report["categories"] == ["code", "summarize"]
    assert list(report["configs"]) == ["draft k=3"]  # the A/A twin is no configuration
    row = report["configs"]["draft k=3"]
    samples = report["samples"]
    assert len(samples) == 2 * 2 * 2 * 3  # categories x prompts x repeats x (base, twin, spec)
    # the twin: the baseline's own argv on a server of its own, the same greedy replies
    twin = {(s["category"], s["prompt"], s["repeat"]): s["text_sha"] for s in samples
            if s["config"] == bench.TWIN}
    assert twin == {(s["category"], s["prompt"], s["repeat"]): s["text_sha"] for s in samples
                    if s["config"] == bench.BASELINE}
    control = report["control"]["rows"]["overall"]
    assert control["n"] == 8 and control["speedup_low"] <= control["speedup_high"]
    spec = [s for s in samples if s["config"] == "draft k=3"]
    assert sum(s["drafted"] for s in spec) > 0 and sum(s["accepted"] for s in spec) > 0
    assert row["overall"]["acceptance"] > 0.5
    # the figures recompute from the raw samples saved (read back as fresh input)
    raw = [bench.Sample(**s) for s in samples]
    for cat in ("code", "summarize", None):
        again = bench._group(raw, "draft k=3", cat, report["mix"],
                             intervals.bound("draft", 3, report["conditions"]["cost"]),
                             objective=report["objective"])
        mine = row[cat or "overall"]
        assert again["speedup"] == pytest.approx(mine["speedup"])
        for key in ("e2e_speedup", "ttft_ratio", "decode_speedup"):
            assert again[key] == pytest.approx(mine[key])
        assert (again["speedup_low"], again["speedup_high"]) == pytest.approx(
            (mine["speedup_low"], mine["speedup_high"]))
        assert mine["speedup_high"] <= mine["bound"] or "implausible" in mine
    assert report["conditions"]["sequential"] is False and report["conditions"]["cost"] > 0.5
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
                       "--repeats", "1", "--precision", "0", "--max-tokens", "8", "--quality",
                       "--no-floor",
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
    from specctl.orchestrator.measure.lossless import check as lossless

    profile = tmp_path / "qwen.toml"
    profile.write_text('target = "testbed:qwen-1.5b-q4"\ndraft = "testbed:qwen-0.5b-q4"\n'
                       'k = 3\n[server]\ncontext = 2048\n')
    app = App.from_env()
    got = app.resolve(str(profile))
    # docqa's first prompt (~750 tokens) does not fit a slot's share of -c 2048 over the check's
    # 8 slots (256): it runs because the slots share one KV pool (adapters/llamacpp.py)
    prompts = {c: suites.suite_texts(c)[:1] for c in ("chat", "code", "summarize", "docqa")}
    how = lossless.short(0.8, 0.95)
    raced = [("the same reply", "the same reply", 64)] * 5  # tune's race's greedy replies
    said = lossless.gate(got.plan, got.backend, got.installed, prompts, how, app.dirs.logs,
                         lambda _m: None, replies=raced)
    assert said.startswith("sampling at temperature 0.8, top-p 0.95: no difference detected")
    assert re.search(r"chat p=[0-9.e-]+, code p=[0-9.e-]+, summarize p=[0-9.e-]+, docqa p=",
                     said), said
    assert "greedy: 5/5 identical" in said  # the race's replies, not asked again
    with pytest.raises(SpecctlError) as refused:
        lossless.gate(got.plan, got.backend, got.installed, prompts, how, app.dirs.logs,
                      lambda _m: None, against="draft")
    assert "distributions differ" in str(refused.value) and "not saved" in str(refused.value)
    assert "\n" not in str(refused.value)


def test_bench_quality_starts_each_server_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    """One measure session: the speed passes and the sampling check (and the floor's) use the
    same servers, so each configuration's server starts once (before: the baseline three times,
    the candidate and the floor twice). Counted on the real engine.serve, wrapped."""
    from collections import Counter

    from specctl.orchestrator.measure.lab import engine
    from tests.cli import run_main

    starts: Counter[str] = Counter()
    real = engine.serve

    def counted(plan, backend, installed, logs, label):  # type: ignore[no-untyped-def]
        starts[label] += 1
        return real(plan, backend, installed, logs, label)

    monkeypatch.setattr(engine, "serve", counted)
    profile = tmp_path / "smol.toml"
    profile.write_text('target = "testbed:smollm2-135m"\ndraft = "testbed:smollm2-135m"\n'
                       'k = 3\n[server]\ncontext = 2048\n')
    out = tmp_path / "report.json"
    code, _out, err = run_main(monkeypatch, capsys, "bench", "--profile", str(profile),
                               "--suite", "chat", "--prompts", "1", "--repeats", "1",
                               "--precision", "0", "--max-tokens", "8", "--quality",
                               "--samples", "8",
                               "--output", str(out))
    assert code == 0, err
    report = json.loads(out.read_text())
    assert "quality" in report and "floor_quality" in report
    assert set(starts) == {"bench-baseline", "bench-draft k=3", "bench-floor",
                           "bench-draft alone"}, starts
    assert set(starts.values()) == {1}, starts
