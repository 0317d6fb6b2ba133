"""The shipped `edit` suite (code edits, answers from a pasted document): every prompt carries
its source text, and `bench --suite edit` / `tune --mix edit=...,code=...` take it."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from specctl.orchestrator.cli.measure import _workload
from specctl.orchestrator.errors import ProfileError
from specctl.orchestrator.measure.bench import flow as bench
from specctl.orchestrator.measure.prompts import suites

SOURCE = re.compile(r"```[a-z]*\n(.+?)```|---\n(.+?)---", re.DOTALL)


def test_every_edit_prompt_holds_its_source_text() -> None:
    prompts = suites.suite_texts("edit")
    assert "edit" in suites.SUITES
    code = document = 0
    for prompt in prompts:
        found = SOURCE.search(prompt)
        assert found, prompt[:60]
        source = found.group(1) or found.group(2)
        # the text to edit or quote is most of the prompt: the reply copies from it
        assert len(source) >= 0.5 * len(prompt), prompt[:60]
        code += found.group(1) is not None
        document += found.group(2) is not None
    assert code >= 6 and document >= 3  # both kinds of editing work


def test_bench_suite_and_tune_mix_take_edit() -> None:
    only = _workload("edit", "3", None)
    assert only.categories == ["edit"] and len(only.prompts) == 3
    mixed = _workload("code,chat,summarize", "2", "edit=0.5,code=0.5")
    assert mixed.categories == ["edit", "code"]
    assert mixed.weights() == {"edit": 0.5, "code": 0.5}
    assert mixed.describe() == "edit 50%, code 50%"
    # edits are asked at their own length (the whole text copied back), the others at the run's
    assert {p.max_tokens for p in mixed.prompts if p.category == "edit"} == {256}
    assert {p.max_tokens for p in mixed.prompts if p.category == "code"} == {None}
    assert "edit" in _workload("code,multiturn,docqa,edit", "2", None).categories  # tune's


def test_a_suite_whose_length_is_not_a_count_is_said(monkeypatch: pytest.MonkeyPatch,
                                                      tmp_path: Path) -> None:
    (tmp_path / "edit.json").write_text(json.dumps({"name": "edit", "max_tokens": "256",
                                                    "prompts": ["x"]}))
    monkeypatch.setattr(suites, "_FOLDER", tmp_path)
    with pytest.raises(ProfileError, match="max_tokens is a whole number"):
        suites.load_suite("edit")


def test_bench_also_measures_other_methods_in_the_same_run() -> None:
    from tests import plans

    plan = plans.plan(k=4)
    labels = [c.label for c in bench.configs_for(plan, [2, 4], None,
                                                 ["ngram-mod", "draft+ngram-mod"])]
    assert labels == [bench.BASELINE, "draft k=2", "draft k=4", "ngram-mod k=16",
                      "draft k=2 + ngram-mod k=16", "draft k=4 + ngram-mod k=16"]
    mod = bench.configs_for(plan, [4], None, ["ngram-mod"])[2].plan
    assert (mod.method, mod.draft, mod.k) == ("ngram-mod", None, 16)
    # tune's pick as tune measured it: a method at its own k, a chain's at its own
    at = bench.configs_for(plan, [8], None, ["ngram:8", "draft+ngram-mod:12"])
    assert [c.label for c in at[2:]] == ["ngram k=8", "draft k=8 + ngram-mod k=12"]
    assert (at[2].plan.method, at[2].plan.k, at[2].plan.draft) == ("ngram", 8, None)
    # ngram-mod at the engine's own copying length, as tune races it (issue 60)
    assert [c.label for c in bench.configs_for(plan, [4], None, ["ngram-mod:64"])[2:]] == [
        "ngram-mod k=64"]
    # the setting tune saved, asked again by --also: one server, not two under one label
    # (whose samples would pool as one configuration's, each prompt asked twice)
    ngram = at[2].plan
    again = bench.configs_for(ngram, [8], None, ["ngram:8", "ngram:16"])
    assert [c.label for c in again] == [bench.BASELINE, "ngram k=8", "ngram k=16"]
    # a draft at one k, with a p-min (tune's pick `draft k=3 p-min 0.5`), and chained
    one = bench.configs_for(plan, [2, 8], None, ["draft:3@0.5", "draft:3+ngram-mod"])
    assert [c.label for c in one[3:]] == ["draft k=3 p-min 0.5", "draft k=3 + ngram-mod k=16"]
    assert (one[3].plan.k, one[3].plan.p_min, one[4].plan.p_min) == (3, 0.5, None)
    assert bench.asks_for_draft(["draft:3@0.5"]) and not bench.asks_for_draft(["ngram:8"])
    for bad in ("ngram-mod+draft", "warp", "draft+", "ngram:0", "ngram:x", "ngram@0.5",
                "ngram:129", "ngram:\u00b2", "ngram:-1", "draft@1.5", "draft@x", "draft@nan",
                "draft@\u00bd", "draft:3@"):
        with pytest.raises(ProfileError, match="--also"):
            bench.configs_for(plan, [4], None, [bad])
