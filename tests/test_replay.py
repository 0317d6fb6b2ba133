"""The kept traffic read back (measure/traffic/replay.py): `specctl traffic` (summary and forget),
`--prompts traffic` (the observed mix, each request's own answer length) and `enough`, the idle
tuner's threshold."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specctl.orchestrator.cli.measure import _workload
from specctl.orchestrator.contract.dirs import Dirs
from specctl.orchestrator.errors import ProfileError
from specctl.orchestrator.measure.traffic import replay
from specctl.orchestrator.measure.traffic import store as traffic
from tests.cli import run_main


def _keep(dirs: Dirs, kind: str, text: str, tokens_in: int = 10, tokens_out: int = 20,
          model: str = "cpu-demo", at: float | None = None, **more: object) -> None:
    body = {"messages": [{"role": "user", "content": text}], **more}
    found = traffic.entry(body, kind, tokens_in, tokens_out, at)
    assert found is not None
    assert traffic.record(dirs, model, body, kind, tokens_in, tokens_out, keep=1000).kept


def test_summary_counts_kinds_and_lengths(isolated_dirs: Dirs) -> None:
    lengths = [10, 100, 255, 256, 1000, 1023, 1024, 4095, 4096, 9000]
    for i, n in enumerate(lengths):
        _keep(isolated_dirs, "chat" if i < 6 else "summarize", f"q{i}", n, 10 * (i + 1))
    (s,), notes = replay.summaries(isolated_dirs, None)
    assert notes == [] and s["model"] == "cpu-demo" and s["requests"] == 10
    assert s["kinds"] == {"chat": {"requests": 6, "share": 0.6},
                          "summarize": {"requests": 4, "share": 0.4}}
    assert s["tokens_in"] == {"median": 1011.5, "p90": 4096, "max": 9000, "buckets": {
        "<256": 3, "256-1k": 3, "1k-4k": 2, ">=4k": 2}}
    assert s["tokens_out"] == {"median": 55.0, "p90": 90, "max": 100}
    assert s["oldest"] <= s["newest"] and s["oldest"].endswith("Z")
    assert s["enough_for_idle_tune"] is False and s["file"].endswith("cpu-demo.jsonl")


def test_replay_takes_the_observed_mix_and_each_answer_length(isolated_dirs: Dirs) -> None:
    for i in range(6):
        _keep(isolated_dirs, "chat", f"chat {i}", tokens_out=40 + i)
    for i in range(3):
        _keep(isolated_dirs, "code", f"code {i}", tokens_out=500)
    _keep(isolated_dirs, "code", "code zero", tokens_out=0)  # its answer length is unknown
    _keep(isolated_dirs, "edit", "edit alone")  # 1 of 11: left out
    conversation = {"messages": [{"role": "system", "content": "Be terse."},
                                 {"role": "user", "content": "First?"},
                                 {"role": "assistant", "content": "Recorded reply."},
                                 {"role": "user", "content": "Second?"}]}
    assert traffic.record(isolated_dirs, "cpu-demo", conversation, "chat", 30, 7,
                          keep=1000).kept
    said: list[str] = []
    work = replay.workload_of(isolated_dirs, "cpu-demo", {}, 64, said.append)
    assert work.categories == ["chat", "code"]
    assert work.weights() == pytest.approx({"chat": 7 / 11, "code": 4 / 11})
    assert len(said) == 1 and "edit (1) left out" in said[0]
    by_text = {p.text: p for p in work.prompts}
    assert by_text["chat 3"].max_tokens == 43  # its own tokens out
    assert by_text["code 1"].max_tokens == 64  # capped by the run's --max-tokens
    assert by_text["code zero"].max_tokens == 64
    second = by_text["Second?"]
    assert (second.earlier, second.system, second.max_tokens) == (("First?",), "Be terse.", 7)
    assert "Recorded reply." not in str(work)  # the model's own reply is sent instead
    chosen = replay.workload_of(isolated_dirs, "cpu-demo", {"code": 1.0}, 64)
    assert chosen.weights() == {"chat": 0.0, "code": 1.0}
    with pytest.raises(ProfileError, match="--mix names edit, not in cpu-demo's kept"):
        replay.workload_of(isolated_dirs, "cpu-demo", {"edit": 1.0}, 64)


def test_replay_samples_a_fixed_few_per_kind(isolated_dirs: Dirs) -> None:
    for i in range(30):
        _keep(isolated_dirs, "chat", f"chat {i}")
    one = replay.workload_of(isolated_dirs, "cpu-demo", {}, 64)
    assert len(one.prompts) == replay.PER_KIND
    assert one.prompts == replay.workload_of(isolated_dirs, "cpu-demo", {}, 64).prompts


def test_too_few_says_how_many_there_are_and_are_needed(isolated_dirs: Dirs) -> None:
    with pytest.raises(ProfileError, match=r"no requests kept for cpu-demo \(it needs 2 of a"):
        replay.workload_of(isolated_dirs, "cpu-demo", {}, 64)
    _keep(isolated_dirs, "chat", "one")
    _keep(isolated_dirs, "code", "two")
    with pytest.raises(ProfileError) as caught:
        replay.workload_of(isolated_dirs, "cpu-demo", {}, 64)
    assert "cpu-demo has 2 kept requests (chat 1, code 1); it needs 2 of a kind" in str(
        caught.value)


def test_enough_for_the_idle_tuner(isolated_dirs: Dirs) -> None:
    assert not replay.enough(None)
    for i in range(replay.ENOUGH - 1):
        _keep(isolated_dirs, ("chat", "code", "summarize")[i % 3], f"r{i}")
    assert not replay.enough(traffic.load(isolated_dirs, "cpu-demo"))
    _keep(isolated_dirs, "edit", "the fortieth")
    kept = traffic.load(isolated_dirs, "cpu-demo")
    assert replay.enough(kept)
    assert replay.ENOUGH * replay.MIN_SHARE >= replay.MIN_PER_KIND  # the docstring's argument


def test_bench_prompts_traffic_reads_the_profiles_model(isolated_dirs: Dirs) -> None:
    for i in range(4):
        _keep(isolated_dirs, "code", f"code {i}", tokens_out=30)
    work = _workload("chat", "traffic", None, "cpu-demo", 16)
    assert work.categories == ["code"] and {p.max_tokens for p in work.prompts} == {16}


def test_bench_prompts_traffic_too_few_is_one_line(isolated_dirs: Dirs,
                                                   monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    _keep(isolated_dirs, "code", "only one")
    code, _out, err = run_main(monkeypatch, capsys, "bench", "-p", "cpu-demo", "--prompts",
                               "traffic")
    assert code == 2 and "Traceback" not in err and err.strip().count("\n") == 0
    assert "cpu-demo has 1 kept requests (code 1); it needs 2 of a kind" in err


def test_cli_traffic_shows_and_forgets(isolated_dirs: Dirs, monkeypatch: pytest.MonkeyPatch,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    _keep(isolated_dirs, "chat", "A SECRET-ISH PROMPT", model="cpu-demo")
    _keep(isolated_dirs, "code", "def f():", model="coder")
    code, out, _err = run_main(monkeypatch, capsys, "traffic")
    assert code == 0 and "cpu-demo: 1 requests" in out and "coder: 1 requests" in out
    assert "prompt tokens: median 10" in out and "<256 1" in out
    code, out, _err = run_main(monkeypatch, capsys, "traffic", "coder", "--json")
    assert code == 0 and [s["model"] for s in json.loads(out)] == ["coder"]
    code, _out, err = run_main(monkeypatch, capsys, "traffic", "cpu-dmeo")
    assert code == 2 and "did you mean cpu-demo?" in err
    code, _out, err = run_main(monkeypatch, capsys, "traffic", "forget", "cpu-dmeo")
    assert code == 2 and "did you mean cpu-demo?" in err
    code, out, _err = run_main(monkeypatch, capsys, "traffic", "forget", "cpu-demo")
    assert code == 0 and "deleted" in out and "cpu-demo.jsonl" in out
    code, out, _err = run_main(monkeypatch, capsys, "traffic", "forget")
    assert code == 0 and "coder.jsonl" in out
    code, out, _err = run_main(monkeypatch, capsys, "traffic", "forget")
    assert code == 0 and "nothing deleted" in out
    assert not traffic.folder(isolated_dirs).exists()
    for path in Path(isolated_dirs.state).rglob("*"):  # nothing left anywhere under state
        assert not path.is_file() or b"SECRET-ISH" not in path.read_bytes()


def test_cli_traffic_says_a_corrupt_file(isolated_dirs: Dirs, monkeypatch: pytest.MonkeyPatch,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    _keep(isolated_dirs, "chat", "fine", model="good")
    bad = traffic.path_of(isolated_dirs, "bad")
    bad.write_text('{"version": 1, "model": "bad", "requests": "oops"}')
    code, out, err = run_main(monkeypatch, capsys, "traffic")
    assert code == 1 and "good: 1 requests" in out
    assert err.count("\n") == 1 and "bad.jsonl.corrupt" in err and "Traceback" not in err
