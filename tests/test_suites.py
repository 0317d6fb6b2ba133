"""The shipped prompt suites and the standard-format example files, read as JSON (no server).

A suite is `{"name": ..., "prompts": [...]}` with 12 prompts: 1-2 are what `tune` uses, 1-6 what
the router's rules were written from, 7-12 are held out. A prompt is a string (one user message)
or `{"turns": [user messages...], "system": optional}` (a conversation; later turns are sent with
the model's own earlier replies). The files are read directly, not through suites.load_suite.

Lengths are bounded by characters: the Qwen2.5 tokenizer counted 4.2-5.4 characters a token on
these English prompts, so at most 5 characters a token (for a floor) and at least 4 (for a
ceiling) keep a prompt inside its suite's token range.
"""

from __future__ import annotations

import json
import re
from importlib import resources
from pathlib import Path
from typing import Any

import pytest

PROMPTS = resources.files("specctl.orchestrator.measure.prompts")
FIXTURES = Path(__file__).parent / "fixtures" / "prompts"
NEW = ("docqa", "article", "multiturn", "math", "translate", "qa")
NOT_SUITES = ("structured.json",)  # bench --quality's tool-call prompts: tests/test_structured.py
SIZE = 12
HELD_OUT = range(6, 12)  # prompts 7-12, as indices

# characters: a floor at 5 a token, a ceiling at 4 a token
DOCQA = (500 * 5, 3000 * 4)
ARTICLE = (600 * 5, 2500 * 4)
LONG_DOC = 1200 * 4.5  # characters above which a document counts as long (about 1,200 tokens)
LONG_ARTICLE = 1300 * 4.5
SUMMARY_ASK = re.compile(r"summar|key points|abstract|bullet|tl;dr", re.IGNORECASE)


def suite_files() -> list[str]:
    return sorted(p.name for p in PROMPTS.iterdir()
                  if p.name.endswith(".json") and p.name not in NOT_SUITES)


def suite(name: str) -> list[Any]:
    data = json.loads((PROMPTS / f"{name}.json").read_text(encoding="utf-8"))
    assert set(data) <= {"name", "prompts", "max_tokens"} and data["name"] == name
    assert type(data.get("max_tokens", 1)) is int  # the answers' own length (edit: 256)
    prompts: list[Any] = data["prompts"]
    return prompts


def text(prompt: Any) -> str:
    return prompt if isinstance(prompt, str) else "\n\n".join(prompt["turns"])


def paragraphs(prompt: str) -> list[str]:
    return [p for p in re.split(r"\n\s*\n", prompt.strip()) if p.strip()]


def shape_error(prompt: Any) -> str | None:
    """Why `prompt` is not an allowed entry, or None."""
    if isinstance(prompt, str):
        return None if prompt.strip() else "an empty string"
    if not isinstance(prompt, dict):
        return f"a {type(prompt).__name__}"
    if set(prompt) - {"turns", "system"}:
        return f"unknown keys {sorted(set(prompt) - {'turns', 'system'})}"
    turns = prompt.get("turns")
    if not isinstance(turns, list) or not turns:
        return "no turns"
    if not all(isinstance(t, str) and t.strip() for t in turns):
        return "a turn that is not a non-empty string"
    system = prompt.get("system")
    if system is not None and not (isinstance(system, str) and system.strip()):
        return "a system message that is not a non-empty string"
    return None


def test_shape_error_refuses_what_the_loader_cannot_send() -> None:
    assert shape_error("Why is the sea salty?") is None
    assert shape_error({"turns": ["Hi", "Shorter"], "system": "Be brief."}) is None
    assert shape_error("  ") == "an empty string"
    assert shape_error(["a", "b"]) == "a list"
    assert shape_error({"turns": []}) == "no turns"
    assert shape_error({"turns": ["a", ""]}) == "a turn that is not a non-empty string"
    assert shape_error({"turns": ["a"], "system": 3}) is not None
    assert shape_error({"turns": ["a"], "role": "user"}) == "unknown keys ['role']"


def test_the_new_suites_ship_with_the_package() -> None:
    assert {f"{n}.json" for n in NEW} <= set(suite_files())


@pytest.mark.parametrize("file", suite_files())
def test_every_suite_has_twelve_prompts_of_the_allowed_shapes(file: str) -> None:
    prompts = suite(file.removesuffix(".json"))
    assert len(prompts) == SIZE
    assert [shape_error(p) for p in prompts] == [None] * SIZE
    assert len({text(p) for p in prompts}) == SIZE  # no prompt twice


def test_docqa_documents_are_500_to_3000_tokens_a_few_long_with_one_short_question() -> None:
    prompts = suite("docqa")
    sizes = [len(p) for p in prompts]
    assert all(DOCQA[0] <= n <= DOCQA[1] for n in sizes), sizes
    long = [i for i, n in enumerate(sizes) if n > LONG_DOC]
    assert 3 <= len(long) <= 4, sizes  # most are 500-1,200 tokens
    assert len([i for i in long if i in HELD_OUT]) >= 2, sizes
    for prompt in prompts:
        question = paragraphs(prompt)[-1]
        assert "?" in question and len(question) < 300, question


def test_articles_are_600_to_2500_tokens_with_an_ask_to_summarise_before_or_after() -> None:
    prompts = suite("article")
    sizes = [len(p) for p in prompts]
    assert all(ARTICLE[0] <= n <= ARTICLE[1] for n in sizes), sizes
    assert sum(n <= LONG_ARTICLE for n in sizes) >= 8, sizes  # most are 600-1,300 tokens
    before = after = 0
    for prompt in prompts:
        first, *_, last = paragraphs(prompt)
        before += bool(SUMMARY_ASK.search(first))
        after += bool(SUMMARY_ASK.search(last))
    assert before + after == SIZE and before >= 3 and after >= 3


def test_multiturn_holds_conversations_of_two_or_three_turns_half_with_a_system() -> None:
    prompts = suite("multiturn")
    assert all(isinstance(p, dict) and 2 <= len(p["turns"]) <= 3 for p in prompts)
    assert 4 <= sum("system" in p for p in prompts) <= 8


def test_translate_passages_are_40_to_200_words() -> None:
    for prompt in suite("translate"):
        parts = paragraphs(prompt)
        ask = parts[0] if parts[0].lower().startswith(("translate", "please translate")) \
            else parts[-1]
        assert "ranslate" in ask, prompt[:60]
        passage = prompt.replace(ask, "")
        assert 40 <= len(passage.split()) <= 200, prompt[:60]


def test_qa_and_math_are_short_questions_with_nothing_pasted() -> None:
    for name, most in (("qa", 200), ("math", 500)):
        prompts = suite(name)
        assert all(isinstance(p, str) and len(p) <= most and "\n" not in p for p in prompts)


def test_the_spec_bench_example_is_question_jsonl() -> None:
    lines = (FIXTURES / "specbench_question.jsonl").read_text(encoding="utf-8").splitlines()
    items = [json.loads(line) for line in lines]
    assert len(items) == 6
    assert [q["question_id"] for q in items] == list(range(1, 7))
    for q in items:
        assert isinstance(q["category"], str) and q["category"]
        assert shape_error({"turns": q["turns"]}) is None
    assert sum(len(q["turns"]) == 2 for q in items) >= 3


def test_the_sharegpt_example_alternates_human_and_gpt() -> None:
    items = json.loads((FIXTURES / "sharegpt.json").read_text(encoding="utf-8"))
    assert isinstance(items, list) and len(items) == 6
    assert len({i["id"] for i in items}) == 6
    systems = 0
    for item in items:
        roles = [m["from"] for m in item["conversations"]]
        assert all(isinstance(m["value"], str) and m["value"].strip()
                   for m in item["conversations"])
        if roles[0] == "system":
            systems += 1
            roles = roles[1:]
        assert roles == ["human", "gpt"] * (len(roles) // 2), roles
    assert systems >= 1
    assert sum([m["from"] for m in i["conversations"]].count("human") == 2 for i in items) >= 3
