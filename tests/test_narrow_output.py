"""Output at 80 columns (and piped): prose wraps at spaces, never inside a word shorter than a
line (a longer one, a path, is broken after a '/'; argv is shell lines, tests/test_cli_width.py);
sizes and uptimes read as people write them; one offline note per command; no stutters."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import pytest

from specctl.orchestrator.humanize import duration, size
from specctl.orchestrator.runtime import state
from tests.cli import specctl
from tests.conftest import HARDWARE

CPU = str(HARDWARE / "linux_cpu_2c_24g.json")


def render(width: int, *args: str) -> str:
    env = {**os.environ, "COLUMNS": str(width), "NO_COLOR": "1"}
    done = specctl(*args, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def a_dead_run(runs: Path) -> None:
    """A run record whose supervisor is gone, three days old, with a long note."""
    runs.mkdir(parents=True, exist_ok=True)
    state.save(runs, state.RunState(
        profile="long-running-model-q4_k_m", supervisor_pid=999_999_99, supervisor_started=1.0,
        url="http://127.0.0.1:8123/v1", port=8123, host="127.0.0.1", log="/nonexistent.log",
        status="failed", started_at=time.time() - 3 * 86400 - 60, restarts=2,
        spec="draft Qwen2.5-Coder-0.5B-Instruct, k=3 (cost model)",
        error="the server exited with code 1 three times within a minute; see `specctl logs "
              "long-running-model-q4_k_m` for what it printed, and HF_ENDPOINT if it fetched"))


@pytest.mark.parametrize("args", [
    ["plan", "-p", "cpu-demo", "--hardware", CPU],
    ["plan", "-p", "m3-ultra-70b", "--hardware", str(HARDWARE / "macos_m3_ultra_96g.json")],
    ["doctor"],
    ["status"],
])
def test_no_word_is_broken_across_lines_at_80_columns(args: list[str],
                                                      isolated_dirs: object) -> None:
    a_dead_run(Path(os.environ["SPECCTL_STATE_DIR"]) / "runs")
    narrow, wide = render(80, *args), render(1000, *args)
    if "\nargv\n" in narrow:  # shell lines, cut where a shell joins them again
        narrow = narrow.split("\nargv\n")[0] + narrow.split("\n\nwhy\n")[1]
    words = set(wide.split())
    longer = [w for w in words if len(w) > 60]  # longer than the room beside a key
    broken = [w for w in narrow.split()
              if w not in words and not any(w in long for long in longer)]
    assert not broken, f"words cut at 80 columns: {broken[:5]}"
    for line in narrow.splitlines():  # a status row is a table's, kept whole
        if args[0] != "status":
            assert len(line) <= 80, line
    if args[0] == "status":
        assert "3 d" in narrow and "min" not in narrow.split("3 d")[0].splitlines()[-1]


def test_sizes_and_durations_read_as_people_write_them() -> None:
    # binary units, the family memory figures use (one unit on screen)
    assert size(2_800_000) == "2.7 MiB" and size(47_420_000_000) == "44.2 GiB"
    assert size(531_000_000) == "506 MiB" and size(512) == "512 bytes"
    assert duration(45) == "45 s" and duration(12 * 60 + 5) == "12 min"
    assert duration(3 * 3600 + 12 * 60) == "3 h 12 min"
    assert duration(1_605_092 * 60) == "3 y 19 d"  # was "1605092 min"


def test_the_offline_note_is_said_once_and_nothing_stutters(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    profile = tmp_path / "p.toml"
    profile.write_text('target = "hf:bartowski/Meta-Llama-3.1-70B-Instruct-GGUF:Q4_K_M"\n'
                       'draft = "hf:bartowski/Llama-3.2-1B-Instruct-GGUF:Q8_0"\n')
    out = render(80, "plan", "-p", str(profile), "--hardware",
                 str(HARDWARE / "macos_m3_ultra_96g.json"))
    flat = " ".join(out.split())
    assert flat.count("HF_HUB_OFFLINE is set") == 1, out
    assert flat.count("the Hub could not be asked") == 2  # once per model, the reason once
    none = render(80, "plan", "-p", str(profile), "--draft", "none", "--hardware",
                  str(HARDWARE / "macos_m3_ultra_96g.json"))
    assert "speculation off; speculation off" not in " ".join(none.split())
    assert not re.search(r"\b(\w+) \1\b", " ".join(none.split()))


def test_mtp_says_mtp_once() -> None:
    out = render(200, "plan", "-p", "dgx2-deepseek-r1", "--hardware",
                 str(HARDWARE / "linux_8x_h200_141g.json"))
    assert "mtp mtp" not in out and "mtp, k=" in out
