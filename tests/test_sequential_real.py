"""One server at a time, for real: `bench --sequential` on llama-server (SmolLM2-135M drafting
for itself, the smallest testbed pair) runs the baseline and the speculative server in
alternating blocks, reports the baseline's drift between blocks, and its interval agrees with
the paired mode's (both servers up) on the same prompts. Checks agreement, not speed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli import specctl

pytestmark = [pytest.mark.server, pytest.mark.timeout(1800)]  # two benches, a busy machine


def test_sequential_blocks_report_drift_and_agree_with_paired(tmp_path: Path) -> None:
    profile = tmp_path / "smol.toml"
    profile.write_text('target = "testbed:smollm2-135m"\ndraft = "testbed:smollm2-135m"\n'
                       'k = 3\n[server]\ncontext = 2048\n')
    found = {}
    for mode in ("paired", "sequential"):
        out = tmp_path / f"{mode}.json"
        done = specctl("bench", "--profile", str(profile), "--suite", "code,chat",
                       "--prompts", "1", "--repeats", "3", "--max-tokens", "24",
                       *(["--sequential"] if mode == "sequential" else []), "--output", str(out),
                       timeout=900)
        assert done.returncode == 0, done.stderr
        found[mode] = (json.loads(out.read_text()), done.stdout)
    paired, _ = found["paired"]
    seq, shown = found["sequential"]
    assert paired["conditions"]["sequential"] is False
    assert seq["conditions"]["sequential"] is True
    assert 0 <= seq["conditions"]["drift"] < 5  # measured between the baseline's blocks
    assert "one server at a time" in shown and "between blocks" in shown
    # the same prompts, the same exact steps: the two intervals overlap
    a, b = paired["configs"]["draft k=3"]["overall"], seq["configs"]["draft k=3"]["overall"]
    assert a["speedup_low"] <= b["speedup_high"] and b["speedup_low"] <= a["speedup_high"], \
        (a, b)
    # every sample of the sequential run came from blocks of one server: per pass, all of one
    # configuration's requests before any of the other's
    assert len(seq["samples"]) == len(paired["samples"])
