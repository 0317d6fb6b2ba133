"""`specctl tune` end to end against real llama-server processes: SmolLM2-135M drafting for itself
(fast; greedy self-drafting accepts nearly every token, and the draft costs as much as the
target). Checks what the tuner reads off real servers and that `plan` then follows its result,
not speed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli import specctl

pytestmark = pytest.mark.server


def test_tune_measures_real_servers_saves_the_result_and_plan_follows_it(tmp_path: Path) -> None:
    profile = tmp_path / "smol.toml"
    profile.write_text('target = "testbed:smollm2-135m"\ndraft = "testbed:smollm2-135m"\n'
                       'k = "auto"\n[server]\ncontext = 2048\n')
    done = specctl("tune", "--profile", str(profile), "--suite", "code,chat,summarize",
                   "--max-k", "3", "--max-tokens", "24", "--precision", "0.25", "--budget", "3m",
                   "--json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout[:done.stdout.rindex("}") + 1])
    assert 0.5 < result["cost"] < 2.0  # the draft is the target: c is about 1
    assert result["alpha"] > 0.8  # greedy self-drafting accepts (nearly) everything
    assert [p["k"] for p in result["predicted"]] == [1, 2, 3]
    drafts = [m for m in result["measured"] if m["method"] == "draft" and not m["p_min"]]
    assert {m["k"] for m in drafts} >= {2, 3}  # the race's own draft lengths
    assert all(m["acceptance"] > 0.8 for m in drafts)
    assert set(result["verify"]) >= {"2", "3"}  # v from the race's step times at each
    assert result["stopped"] in ("precision", "decided", "budget")  # saved either way
    assert result["settled"] == (result["stopped"] != "budget")
    assert {w["category"] for w in result["winners"]} == {"code", "chat", "summarize"}
    if result["method"] != "none":  # the headline carries its interval
        assert result["low"] <= result["speedup"] <= result["high"]
    assert all(m["bound"] is None or m["speedup"] <= m["bound"] or m["flag"]
               for m in result["measured"])
    labels = [m["label"] for m in result["measured"]]
    assert any(label.startswith("ngram k=") for label in labels)
    assert any("p-min 0.5" in line for line in labels)  # every candidate in the first block
    assert result["method"] in ("draft", "ngram", "ngram-mod", "none")
    if result["method"] != "none":  # checked by sampling before it was saved (and says so)
        assert result["quality"].startswith("sampling at temperature 0.8, top-p "), result
        assert "no difference detected (16 samples x 1 prompt per category" in result["quality"]

    shown = specctl("tune", "--profile", str(profile), "--show", "--json")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout) == result

    planned = specctl("plan", "--profile", str(profile), "--json")
    assert planned.returncode == 0, planned.stderr
    plan = json.loads(planned.stdout)
    served = result["method"] != "none" and result["low"] > 1.0 and result["speedup"] > 1.05
    assert plan["method"] == (result["method"] if served else "none")
    if served:
        assert (plan["k"], plan["k_source"]) == (result["k"], "tuned")
    assert "`specctl tune`" in plan["reasons"][-1]
    if result["method"] != "none" and not served:  # not surely faster: served without
        assert plan["method"] == "none" and "not surely faster" in plan["reasons"][-1]

    swept = specctl("tune", "--profile", str(profile), "--exhaustive", "--max-k", "2",
                    "--max-tokens", "24", "--json")
    assert swept.returncode == 0, swept.stderr
    sweep = json.loads(swept.stdout)
    assert [row["k"] for row in sweep["sweep"]] == [1, 2]
    assert sweep["tuned"]["time_ratio"] == pytest.approx(result["seconds"] / sweep["seconds"],
                                                         abs=0.01)
