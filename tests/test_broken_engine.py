"""The broken llama-server builds of tests/broken_engine.py rewrite the command line as their
names say: only when asked to speculate, and into what their break is."""

from __future__ import annotations

from tests import broken_engine

SPEC = ["-m", "/t.gguf", "--port", "9", "--spec-type", "draft-simple", "-md", "/d.gguf",
        "--spec-draft-n-max", "3", "--spec-synth-rates", "0,0,0", "--metrics"]


def test_they_behave_when_not_asked_to_speculate() -> None:
    plain = ["-m", "/t.gguf", "--port", "9", "--metrics"]
    for mode in broken_engine.MODES:
        assert broken_engine.rewrite(mode, plain) == plain
        assert broken_engine.rewrite(mode, ["--version"]) == ["--version"]


def test_draft_alone_serves_the_draft_and_drafts_nothing() -> None:
    assert broken_engine.rewrite("draft-alone", SPEC) == ["-m", "/d.gguf", "--port", "9",
                                                          "--metrics"]


def test_no_draft_serves_the_target_without_drafting() -> None:
    assert broken_engine.rewrite("no-draft", SPEC) == ["-m", "/t.gguf", "--port", "9",
                                                       "--metrics"]


def test_top_k_speculates_with_a_cut_sampler() -> None:
    assert broken_engine.rewrite("top-k", SPEC) == [*SPEC, "--top-k", "1"]


def test_tool_call_speculates_unchanged_and_counts_every_spec_type() -> None:
    """Its break is the relay's (tests/broken_tools.py), not argv's; it relays whenever the
    command line speculates with drafts that may be accepted: a draft model or any --spec-type
    but none (n-gram has no -md), not the floor (--spec-synth-rates)."""
    assert broken_engine.rewrite("tool-call", SPEC) == SPEC
    assert not broken_engine.speculates(SPEC)  # the floor: every draft rejected
    assert broken_engine.speculates([a for a in SPEC if a not in ("--spec-synth-rates",
                                                                  "0,0,0")])
    assert broken_engine.speculates(["-m", "/t.gguf", "--spec-type", "ngram-simple"])
    assert not broken_engine.speculates(["-m", "/t.gguf", "--spec-type", "none"])
    assert not broken_engine.speculates(["-m", "/t.gguf", "--port", "9"])
