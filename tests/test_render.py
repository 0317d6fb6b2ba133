"""Rich tables keep every URL, path and figure whole, in an 80-column terminal and when piped."""

from __future__ import annotations

import io
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from specctl.orchestrator.cli import render
from specctl.orchestrator.contract.stats import SpecStats
from specctl.orchestrator.planning.drafts import Candidate
from specctl.orchestrator.runs import Row

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
URL = "http://127.0.0.1:18080/v1"


def rendered(draw: Callable[[Console], None], terminal: bool) -> str:
    out = io.StringIO()
    draw(Console(file=out, width=80, force_terminal=terminal))
    return ANSI.sub("", out.getvalue())


def whole(text: str, *figures: str) -> None:
    assert "…" not in text, text
    for figure in figures:
        assert figure in text, f"{figure!r} cut in:\n{text}"


def line_with(text: str, first: str) -> str:
    return next(line for line in text.splitlines() if first in line)


both = pytest.mark.parametrize("terminal", [True, False], ids=["terminal", "piped"])


def rows() -> list[Row]:
    stats = SpecStats(drafted=1000, accepted=870, drafts=250)
    return [Row(profile="cuda-h100-llama70b-eagle3", status="running", url=URL, uptime_s=7260.0,
                restarts=12, spec="eagle3 draft Llama-3.3-70B-EAGLE3 k=5, p_min 0.75",
                stats=stats),
            Row(profile="m3-ultra-70b", status="stopped", url="http://127.0.0.1:18081/v1",
                uptime_s=0.0, restarts=0, spec="off", stats=None, note="exited with code 1")]


def bench_row(speedup: float, noisy: bool = False) -> dict[str, Any]:
    return {"baseline_tps": 41.37, "tps": 50.91, "speedup": speedup, "speedup_low": 0.98,
            "speedup_high": 1.12, "speedup_min": 0.60, "speedup_max": 1.40, "noisy": noisy,
            "acceptance": 0.87, "accepted_per_step": 2.31, "identical": 1.0, "n": 120}


def bench_result() -> dict[str, Any]:
    cats = ["chat", "code", "summarize"]
    return {"profile": "cuda-h100-llama70b", "hardware": "linux_1x_h100_80g", "backend": "vllm",
            "configs": {"draft k=5": {"overall": bench_row(1.23, noisy=True),
                                      **{c: bench_row(1.23) for c in cats}}},
            "categories": cats,
            "verdict": "speculation helps (draft k=5: 1.23x overall, 0.98x-1.12x)"}


def candidates() -> list[Candidate]:
    path = Path("/home/someone/.cache/specctl/models/Llama-3.2-1B-Instruct-Q4_K_M.gguf")
    return [Candidate(model="bartowski/Llama-3.2-1B-Instruct-GGUF",
                      name="Llama-3.2-1B-Instruct-Q4_K_M", path=path, source="cache",
                      compatible=True, score=1.87,
                      reason="same tokenizer (vocab 128256), 0.8 GB, 88x smaller than the target"),
            Candidate(model="HuggingFaceTB/SmolLM2-135M-Instruct-GGUF", name="SmolLM2-135M",
                      path=None, source="hf", compatible=False, score=0.0,
                      reason="vocabulary differs: 49152 tokens vs the target's 128256")]


@both
def test_status_keeps_the_url_and_figures_whole(terminal: bool) -> None:
    text = rendered(lambda c: render.show_status(c, rows()), terminal)
    whole(text, URL, "http://127.0.0.1:18081/v1", "cuda-h100-llama70b-eagle3",
          "87% (870/1000)", "2 h 1 min", "12")


def test_status_piped_prints_one_row_per_line() -> None:
    text = rendered(lambda c: render.show_status(c, rows()), terminal=False)
    line = line_with(text, URL)
    for cell in ("cuda-h100-llama70b-eagle3", "running", "2 h 1 min", "12",
                 "eagle3 draft Llama-3.3-70B-EAGLE3 k=5, p_min 0.75", "87% (870/1000)"):
        assert cell in line, line
    assert not set(text) & set("┃│━─┏┡└╇")


@both
def test_bench_keeps_every_figure_whole(terminal: bool) -> None:
    text = rendered(lambda c: render.show_bench(c, bench_result()), terminal)
    whole(text, "speedup", "1.23x*", "1.23x", "0.98x-1.12x", "0.60x-1.40x", "87%", "41.4",
          "50.9", "2.31", "100%", "120", "summarize", "linux_1x_h100_80g")


def test_bench_piped_prints_one_row_per_line() -> None:
    text = rendered(lambda c: render.show_bench(c, bench_result()), terminal=False)
    line = line_with(text, "summarize")
    for cell in ("41.4", "50.9", "1.23x", "0.98x-1.12x", "0.60x-1.40x", "87%", "2.31", "100%",
                 "120"):
        assert cell in line, line


@both
def test_drafts_keep_paths_and_scores_whole(terminal: bool) -> None:
    text = rendered(lambda c: render.show_drafts(c, "Llama-3.3-70B-Instruct", candidates()),
                    terminal)
    whole(text, "Llama-3.2-1B-Instruct-Q4_K_M",
          "/home/someone/.cache/specctl/models/Llama-3.2-1B-Instruct-Q4_K_M.gguf",
          "hf: HuggingFaceTB/SmolLM2-135M-Instruct-GGUF", "1.87x", "128256", "49152")


def test_drafts_piped_prints_one_row_per_line() -> None:
    text = rendered(lambda c: render.show_drafts(c, "Llama-3.3-70B-Instruct", candidates()),
                    terminal=False)
    line = line_with(text, "SmolLM2-135M ")
    assert "vocabulary differs: 49152 tokens vs the target's 128256" in line, line


@both
def test_status_shows_what_the_engine_chose(terminal: bool) -> None:
    chose = "37/81 layers on the GPU, context 8192, weights CUDA0 10.00 GiB + CPU_Mapped 20.00 GiB"
    running = [Row(profile="big", status="running", url=URL, uptime_s=60.0, restarts=0,
                   spec="off", stats=None, placement=chose)]
    text = rendered(lambda c: render.show_status(c, running), terminal)
    assert f"big: the engine chose {chose}" in " ".join(text.split())
    assert render.status_json(running[0])["placement"] == chose


@both
def test_doctor_shows_each_gpus_total_used_and_free_and_what_was_hidden(terminal: bool) -> None:
    from specctl.orchestrator.machine import hardware
    from tests.conftest import recorded

    hw = hardware.visible(recorded("linux_2x_rtx3090_24g"), "1")
    text = " ".join(rendered(lambda c: render.show_hardware(c, hw), terminal).split())
    assert "gpu 1 NVIDIA GeForce RTX 3090, 24.0 GiB, 0.0 GiB used by other processes, 24.0 GiB " \
           "free" in text
    assert "gpu 0" not in text
    assert "visible CUDA_VISIBLE_DEVICES=1: 1 of 2 GPUs visible (hidden: 0)" in text
    shared = recorded("linux_1x_l40s_48g_shared")
    text = " ".join(rendered(lambda c: render.show_hardware(c, shared), terminal).split())
    assert "NVIDIA L40S, 45.0 GiB, 22.5 GiB used by other processes, 22.5 GiB free" in text
    assert " GB" not in text


def test_the_sweeps_time_ratio_is_of_the_seconds_it_shows() -> None:
    from specctl.orchestrator.measure.results.tuned import Measured, Result
    row = Measured(label="draft k=1", method="draft", k=1, p_min=None, speedup=1.2, tps=12.0)
    tuned = Result(profile="p", method="draft", k=1, p_min=None, speedup=1.2, summary="s",
                   alpha=0.8, cost=0.3, verify={}, baseline_tps=10.0, seconds=71.4)
    data = render.sweep_json([row], 10.0, 19.96, tuned)  # shown as 20.0 s
    assert data["seconds"] == 20.0
    assert data["tuned"]["time_ratio"] == round(71.4 / 20.0, 3)  # 3.570, not 71.4/19.96 = 3.577
