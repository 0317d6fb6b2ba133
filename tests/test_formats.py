"""`--prompts FILE` in the standard formats (measure/prompts/formats.py): MT-Bench / Spec-Bench
questions, ShareGPT, OpenAI chat lines, text lines; each malformed case is one line naming file:line
or the item, never a traceback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specctl.orchestrator.errors import ProfileError, StateError
from specctl.orchestrator.measure.prompts import formats, workload
from tests.cli import run_main


def _write(tmp_path: Path, text: str, name: str = "prompts.jsonl") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def _lines(*items: object) -> str:
    return "".join(json.dumps(i) + "\n" for i in items)


def _load(path: Path, per_category: int = 12) -> workload.Workload:
    return workload.from_file(path, {}, per_category)


def test_specbench_questions(tmp_path: Path) -> None:
    path = _write(tmp_path, _lines(
        {"question_id": 81, "category": "mt_bench", "turns": ["Write a poem.", "Now shorter."]},
        {"question_id": 82, "category": "translation", "turns": ["Translate: bonjour"]}))
    work = _load(path)
    first, second = work.prompts
    assert (first.category, first.text, first.earlier) == ("mt_bench", "Now shorter.",
                                                           ("Write a poem.",))
    assert first.turns == ("Write a poem.", "Now shorter.")
    assert (second.category, second.turns, second.system) == ("translation",
                                                              ("Translate: bonjour",), None)
    assert formats.parse(path, path.read_text()).format == formats.SPECBENCH


def test_mtbench_category_is_sanitised_and_bounded(tmp_path: Path) -> None:
    path = _write(tmp_path, _lines(
        {"category": " writing & role\x1b[31mplay ", "turns": ["a"]},
        {"category": "x" * 300, "turns": ["b"]}))
    cats = [p.category for p in _load(path).prompts]
    assert cats[0] == "writing_role_31mplay"  # no ESC, no spaces, no '&'
    assert cats[1] == "x" * formats.MAX_CATEGORY


def test_sharegpt_array(tmp_path: Path) -> None:
    data = [{"id": "a", "conversations": [
                {"from": "system", "value": "Be brief."},
                {"from": "human", "value": "What is TCP?"},
                {"from": "gpt", "value": "A protocol."},
                {"from": "human", "value": "And UDP?"},
                {"from": "gpt", "value": "Another one."}]},  # ends with a gpt turn: fine
            {"id": "b", "conversations": [{"from": "user", "value": "Hi"}]}]
    path = _write(tmp_path, json.dumps(data, indent=2), "sharegpt.json")
    a, b = _load(path).prompts
    assert (a.earlier, a.text, a.system) == (("What is TCP?",), "And UDP?", "Be brief.")
    assert b.turns == ("Hi",) and a.category == b.category == workload.USER
    assert "A protocol." not in str(a)  # the model's own replies are sent instead
    assert formats.parse(path, path.read_text()).format == formats.SHAREGPT


def test_sharegpt_lines(tmp_path: Path) -> None:
    path = _write(tmp_path, _lines(
        {"conversations": [{"from": "human", "value": "one"}, {"from": "gpt", "value": "r"},
                           {"from": "human", "value": "two"}], "category": "chat"}))
    (p,) = _load(path).prompts
    assert (p.turns, p.category) == (("one", "two"), "chat")


def test_openai_chat_lines(tmp_path: Path) -> None:
    path = _write(tmp_path, _lines(
        {"messages": [{"role": "system", "content": "You are terse."},
                      {"role": "user", "content": "First?"},
                      {"role": "assistant", "content": "Yes."},
                      {"role": "user", "content": [{"type": "text", "text": "Second?"},
                                                   {"type": "image_url", "image_url": {}}]}],
         "max_tokens": 50, "category": "qa"},
        {"messages": [{"role": "user", "content": "Alone"}], "max_completion_tokens": 7},
        {"custom_id": "r1", "method": "POST", "url": "/v1/chat/completions",
         "body": {"messages": [{"role": "user", "content": "Batch"}], "max_tokens": 9}}))
    a, b, c = _load(path).prompts
    assert (a.earlier, a.text, a.system, a.max_tokens, a.category) == (
        ("First?",), "Second?", "You are terse.", 50, "qa")
    assert (b.turns, b.max_tokens, b.system, b.category) == (("Alone",), 7, None, workload.USER)
    assert (c.turns, c.max_tokens) == (("Batch",), 9)


def test_text_lines(tmp_path: Path) -> None:
    path = _write(tmp_path, "first prompt\n\n[Q] second prompt\n", "prompts.txt")
    assert [p.turns for p in _load(path).prompts] == [("first prompt",), ("[Q] second prompt",)]
    starts = _write(tmp_path, "[Q] a bracket first\nthen text\n", "brackets.txt")
    assert [p.text for p in _load(starts).prompts] == ["[Q] a bracket first", "then text"]
    bom = _write(tmp_path, "\ufeff" + json.dumps([{"turns": ["x"]}]), "bom.json")
    assert _load(bom).prompts[0].text == "x"


def test_sampling_is_fixed_per_category(tmp_path: Path) -> None:
    path = _write(tmp_path, _lines(*[{"category": "a" if i % 3 else "b", "turns": [f"q{i}"]}
                                     for i in range(60)]))
    one, two = _load(path, 5), _load(path, 5)
    assert one.prompts == two.prompts
    assert [p.category for p in one.prompts].count("a") == 5
    assert {p.category for p in one.prompts} == {"a", "b"}


def test_ambiguous_content_is_said_in_one_line(tmp_path: Path) -> None:
    said: list[str] = []
    path = _write(tmp_path, "plain prompt\n{not json, a prompt about braces}\n", "p.txt")
    assert len(workload.from_file(path, {}, 12, said.append).prompts) == 2
    both = _write(tmp_path, _lines({"messages": [{"role": "user", "content": "m"}],
                                    "turns": ["t"]}))
    (p,) = workload.from_file(both, {}, 12, said.append).prompts
    assert p.text == "m"
    assert len(said) == 2 and "line 2 starts with '{'" in said[0]
    assert f"{both}:1" in said[1] and "read as OpenAI chat" in said[1]


BAD = [
    ("not json", '{"turns": ["a"]}\n{"turns": [\n', ":2: not JSON"),
    ("no known key", _lines({"prompt": "x"}), ':1: a JSON prompt needs "messages"'),
    ("turns not a list", _lines({"turns": "x"}), ':1: "turns" must be a list'),
    ("empty turn", _lines({"turns": ["a", " "]}), ':1: "turns" must be a list of non-empty'),
    ("no turns", _lines({"turns": []}), ":1: no user turn"),
    ("too many turns", _lines({"turns": ["a"] * (formats.MAX_TURNS + 1)}), "user turns; at most"),
    ("bad category", _lines({"turns": ["a"], "category": 5}), ':1: "category" must be a name'),
    ("category of symbols", _lines({"turns": ["a"], "category": "!!!"}), '"category" must be'),
    ("sharegpt no human", _lines({"conversations": [{"from": "gpt", "value": "hello"}]}),
     ":1: a conversation with no human turn"),
    ("sharegpt unknown role", _lines({"conversations": [{"from": "robot", "value": "x"}]}),
     ":1: turn 1 is from 'robot'"),
    ("sharegpt no value", _lines({"conversations": [{"from": "human"}]}),
     ':1: turn 1 needs "from" and a text "value"'),
    ("sharegpt not a list", _lines({"conversations": {"from": "human"}}),
     '"conversations" must be a list'),
    ("openai no user", _lines({"messages": [{"role": "assistant", "content": "x"}]}),
     ":1: a JSON line needs \"messages\" with a user message"),
    ("openai messages not a list", _lines({"messages": "hi"}), '"messages" must be a list'),
    ("max_tokens bool", _lines({"messages": [{"role": "user", "content": "x"}],
                                "max_tokens": True}), ':1: "max_tokens" must be a whole'),
    ("max_tokens zero", _lines({"messages": [{"role": "user", "content": "x"}],
                                "max_tokens": 0}), '"max_tokens" must be a whole'),
    ("text line in json lines", _lines({"turns": ["a"]}) + "plain\n",
     ":2: not JSON (Expecting value at column 1); a prompts file whose first line"),
    ("deep nesting", '{"turns": ' + "[" * 100_000 + "]" * 100_000 + "}\n", ":1: "),
    ("empty", "\n\n", "holds no prompts"),
]


@pytest.mark.parametrize(("text", "said"), [(t, s) for _, t, s in BAD], ids=[n for n, _, _ in BAD])
def test_malformed_lines(tmp_path: Path, text: str, said: str) -> None:
    path = _write(tmp_path, text)
    with pytest.raises(ProfileError) as caught:
        _load(path)
    line = str(caught.value)
    assert said in line and "\n" not in line and str(path) in line


def test_malformed_sharegpt_items_are_named(tmp_path: Path) -> None:
    good = {"conversations": [{"from": "human", "value": "x"}]}
    for data, said in [([good, {"conversations": [{"from": "gpt", "value": "y"}]}],
                        ": item 2: a conversation with no human turn"),
                       ([good, ["not", "an", "object"]], ': item 2: a JSON prompt needs'),
                       ([good, {"conversations": [{"from": "human", "value": 3}]}],
                        ": item 2: turn 1 needs")]:
        path = _write(tmp_path, json.dumps(data), "sharegpt.json")
        with pytest.raises(ProfileError, match=said):
            _load(path)
    path = _write(tmp_path, '[\n{"conversations": [}]', "broken.json")
    with pytest.raises(ProfileError, match=r"broken\.json:2: not JSON"):
        _load(path)


def test_bounded_counts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(formats, "MAX_PROMPTS", 3)
    for text in (_lines(*[{"turns": [str(i)]} for i in range(4)]),
                 json.dumps([{"conversations": [{"from": "human", "value": "x"}]}] * 4),
                 "a\nb\nc\nd\n"):
        with pytest.raises(ProfileError, match="more than 3 prompts"):
            _load(_write(tmp_path, text))
    monkeypatch.setattr(workload, "MAX_FILE", 2048)
    with pytest.raises(StateError, match="larger than 2 KB"):
        _load(_write(tmp_path, "x" * 3000))


def test_bench_says_a_bad_file_in_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    path = _write(tmp_path, _lines({"conversations": [{"from": "gpt", "value": "y"}]}))
    monkeypatch.setenv("SPECCTL_STATE_DIR", str(tmp_path / "state"))
    code, _out, err = run_main(monkeypatch, capsys, "bench", "-p", "cpu-demo", "--prompts",
                              str(path))
    assert code == 2 and "Traceback" not in err
    assert err.strip().count("\n") == 0 and "a conversation with no human turn" in err
