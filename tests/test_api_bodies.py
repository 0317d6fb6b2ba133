"""Each API's body read in its own format (measure/prompts/bodies.py): the router's facts (its
kind, the characters the engine prefills, the answer it asks for) from Anthropic Messages,
OpenAI Responses and fill-in-the-middle, and what the kept traffic keeps of each (or why not)."""

from __future__ import annotations

import json
from typing import Any

from specctl.orchestrator.contract.dirs import Dirs
from specctl.orchestrator.measure.prompts import bodies
from specctl.orchestrator.measure.route import classify
from specctl.orchestrator.measure.route.classify import Facts
from specctl.orchestrator.measure.traffic import store as traffic

SECRET = "sk-live-0123456789abcdefSECRET"
CODE_ASK = "Write a Python function that reverses a linked list."
FILE = "def main():\n    print('hello')\n"


def messages_body() -> dict[str, Any]:
    """An agent's turn as Claude Code sends it: a system prompt in blocks, the ask, a tool call
    and its result, then the model to answer."""
    return {"model": "m", "max_tokens": 300, "temperature": 0.2, "stop_sequences": ["END"],
            "metadata": {"user_id": SECRET},
            "system": [{"type": "text", "text": "You are a coding agent."}],
            "messages": [
                {"role": "user", "content": CODE_ASK},
                {"role": "assistant", "content": [
                    {"type": "text", "text": "Reading the file."},
                    {"type": "tool_use", "id": "t1", "name": "read", "input": {"path": SECRET}}]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "t1",
                     "content": [{"type": "text", "text": FILE}]}]}]}


def test_messages_facts_count_tool_blocks_and_read_the_kind_from_the_ask() -> None:
    body = messages_body()
    tool = len("read") + len(json.dumps({"path": SECRET}))
    chars = len("You are a coding agent.") + len(CODE_ASK) + len("Reading the file.") + \
        tool + len(FILE)
    assert classify.facts(body, bodies.MESSAGES) == Facts("code", chars, 300)
    said = bodies.conversation(bodies.MESSAGES, body)
    assert said.turns == (("system", "You are a coding agent."), ("user", CODE_ASK),
                          ("assistant", "Reading the file."))
    assert said.ask() == CODE_ASK  # the tool result is no ask
    assert classify.facts({"model": "m", "system": "Be brief.", "messages": [
        {"role": "user", "content": "Hello there"}]}, bodies.MESSAGES) == \
        Facts("chat", len("Be brief.") + len("Hello there"), None)


def test_responses_facts_from_instructions_and_input_items() -> None:
    body = {"model": "m", "instructions": "Be exact.", "max_output_tokens": 64, "top_p": 0.9,
            "input": [{"role": "developer", "content": "Use tabs."},
                      {"type": "message", "role": "user",
                       "content": [{"type": "input_text", "text": CODE_ASK},
                                   {"type": "input_image", "image_url": SECRET}]},
                      {"type": "function_call", "call_id": "c", "name": "ls",
                       "arguments": "{}"},
                      {"type": "function_call_output", "call_id": "c", "output": FILE}]}
    chars = len("Be exact.") + len("Use tabs.") + len(CODE_ASK) + len("ls{}") + len(FILE)
    assert classify.facts(body, bodies.RESPONSES) == Facts("code", chars, 64)
    assert classify.facts({"input": "Hello there"}, bodies.RESPONSES) == \
        Facts("chat", len("Hello there"), None)
    assert bodies.conversation(bodies.RESPONSES, body).turns[:2] == (
        ("system", "Be exact."), ("system", "Use tabs."))


def test_infill_is_code_counted_whole_and_asks_n_predict() -> None:
    body = {"input_prefix": "def f(", "input_suffix": "):\n", "prompt": "a",
            "input_extra": [{"filename": "x.py", "text": FILE}], "n_predict": 16,
            "max_tokens": 99}
    assert classify.facts(body, bodies.INFILL) == Facts("code", 6 + 3 + 1 + len(FILE), 16)
    assert classify.facts({"input_prefix": "x", "input_suffix": "", "max_tokens": 9},
                          bodies.INFILL) == Facts("code", 1, 9)


def test_any_shape_is_tolerated() -> None:
    """The schema refuses bad bodies before this reads them; whatever comes, it does not
    fail."""
    odd: list[Any] = [{}, {"messages": "x"}, {"messages": [5, {"role": 5}, {"role": "user"}]},
                      {"system": 5, "messages": [{"role": "user", "content": [5, {"type": 5}]}]},
                      {"input": 5}, {"input": [5, {"type": "function_call_output"}]},
                      {"input_prefix": 5, "input_extra": "x"}, {"max_tokens": True}]
    for fmt in (bodies.MESSAGES, bodies.RESPONSES, bodies.INFILL, "embeddings"):
        for body in odd:
            found = classify.facts(body, fmt)
            assert found.kind in classify.KINDS and found.chars >= 0, (fmt, body)
    assert classify.facts({"input": ["hi"]}, "embeddings") == Facts("chat", 0, None)


def test_kept_as_the_chat_request_they_amount_to(isolated_dirs: Dirs) -> None:
    """Messages and Responses are kept as chat messages (tool calls and results dropped, as
    chat's are, and never a field off the allow-list); fill-in-the-middle and token counts are
    not kept."""
    assert traffic.record(isolated_dirs, "m", messages_body(), "code", 40, 9, keep=10,
                          fmt=bodies.MESSAGES).kept
    responses = {"model": "m", "instructions": "Be exact.", "input": "Say hi",
                 "max_output_tokens": 5, "user": SECRET}
    assert traffic.record(isolated_dirs, "m", responses, "chat", 9, 2, keep=10,
                          fmt=bodies.RESPONSES).kept
    infill = traffic.record(isolated_dirs, "m", {"input_prefix": "a", "input_suffix": "b"},
                            "code", 3, 1, keep=10, fmt=bodies.INFILL)
    assert not infill.kept and not infill.skipped and infill.note
    assert not traffic.record(isolated_dirs, "m", {"input": "x"}, "chat", 1, 0, keep=10,
                              fmt="embeddings").kept
    text = traffic.path_of(isolated_dirs, "m").read_text()
    assert SECRET not in text and FILE not in text
    found = traffic.load(isolated_dirs, "m")
    assert found is not None
    first, second = found.requests
    assert [m.model_dump() for m in first.messages] == [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": CODE_ASK},
        {"role": "assistant", "content": "Reading the file."}]
    assert (first.params.max_tokens, first.params.temperature, first.params.stop) == \
        (300, 0.2, ["END"])
    assert [m.role for m in second.messages] == ["system", "user"]
    assert second.params.max_tokens == 5 and (first.kind, second.kind) == ("code", "chat")
