"""One name and one estimate per model (issue 54): `plan` and `drafts` said the testbed draft's
name two ways ("Qwen2.5 Coder 0.5B Instruct AWQ" from the file, the catalog's
"Qwen2.5-Coder-0.5B-Instruct") and predicted the pair 1.79x and 1.97x. Both now come from one
place: the model's own name, and drafts.predict (whose cost input `plan` states, quoting no
speedup before a tune: issue 59, and `drafts` ranks by)."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from specctl.orchestrator.contract.dirs import Dirs
from specctl.orchestrator.models import testbed
from tests.cli import run_main

HUB_TARGET = "hf:Qwen/Qwen2.5-Coder-7B-Instruct-GGUF:Q4_K_M"  # planned from the catalog offline


def as_json(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
            *args: str) -> Any:
    code, out, err = run_main(monkeypatch, capsys, *args, "--json")
    assert code == 0, err
    return json.loads(out)


def found(pattern: str, text: str) -> str:
    hits = re.findall(pattern, text)
    assert hits, text
    return str(hits[-1])


def same_in_plan_and_drafts(monkeypatch: pytest.MonkeyPatch,
                            capsys: pytest.CaptureFixture[str], target: str,
                            plan_args: tuple[str, ...]) -> None:
    plan = as_json(monkeypatch, capsys, "plan", *plan_args)
    ranked = as_json(monkeypatch, capsys, "drafts", "--target", target)["candidates"]
    draft = plan["draft"]
    mine = next(c for c in ranked if ((c["path"] == draft["path"]) if draft["path"] else
                                      (c["model"] == draft["ref"])))
    assert mine["name"] == draft["name"]  # one name
    speculation = next(r for r in plan["reasons"] if r.startswith("Speculation:"))
    # one estimate: the cost drafts ranks by is the one plan's k came from, and only drafts
    # (a ranking) quotes a speedup
    assert found(r"draft/target cost (\d+\.\d\d)", speculation) == \
        found(r"size ratio (\d+\.\d\d)", mine["reason"])
    assert "predicted" not in speculation and "predicted" in mine["reason"]


def test_an_auto_draft_has_one_name_and_one_estimate(monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    same_in_plan_and_drafts(monkeypatch, capsys, HUB_TARGET, (HUB_TARGET,))


@pytest.mark.server
def test_the_testbed_pair_has_one_name_and_one_estimate(isolated_dirs: Dirs,
                                                        monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture[str]
                                                        ) -> None:
    for key in ("qwen-1.5b-f16", "qwen-0.5b-q4"):
        if not testbed.path_of(key, isolated_dirs.models).is_file():
            pytest.skip("the testbed is not provisioned (`specctl models testbed`)")
    same_in_plan_and_drafts(monkeypatch, capsys, "testbed:qwen-1.5b-f16", ("-p", "cpu-demo"))


def test_drafts_takes_the_model_as_plan_does(monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    by_argument = as_json(monkeypatch, capsys, "drafts", HUB_TARGET)
    by_flag = as_json(monkeypatch, capsys, "drafts", "--target", HUB_TARGET)  # kept, hidden
    assert by_argument == by_flag
    code, _, err = run_main(monkeypatch, capsys, "drafts", HUB_TARGET, "--target", HUB_TARGET)
    assert code == 2 and len(err.strip().splitlines()) == 1
