"""The fields checked in the bodies of Anthropic Messages (and its token count), OpenAI Responses
(and its token count) and fill-in-the-middle, where engines fail on or misread a wrong shape
(gateway/schema.py checks chat's and those of every request). What each needs:

- Messages: `messages` a non-empty array of user and assistant turns, each with `content` (a
  string or content blocks of known types, each with its fields: a text block its `text`, a
  tool_use its `id`, `name` and `input`, a tool_result its `tool_use_id` and text or image
  blocks); `system` a string or text blocks.
- Responses: `input` a string or a non-empty array of items; a message item a known `role`
  and `content` (a string or parts, input_text and output_text with their `text`); a
  function_call its `call_id`, `name` and `arguments`; a function_call_output its `call_id`
  and `output`; `instructions` a string. Other items go on: the engine names what it cannot
  read (a 400).
- Fill-in-the-middle: `input_prefix` and `input_suffix` strings, `prompt` a string,
  `input_extra` an array of chunks each with its `text`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from specctl.orchestrator.gateway.errors import Refused

ANTHROPIC_ROLES = ("user", "assistant")
# a content block's type -> the fields it needs and their types
BLOCKS: Mapping[str, Mapping[str, type]] = {
    "text": {"text": str}, "image": {"source": dict}, "document": {"source": dict},
    "tool_use": {"id": str, "name": str, "input": dict}, "tool_result": {"tool_use_id": str},
    "thinking": {"thinking": str}, "redacted_thinking": {"data": str},
}
RESULT_BLOCKS = ("text", "image", "document")  # inside a tool_result
RESPONSE_ROLES = ("user", "assistant", "system", "developer")
PARTS: Mapping[str, Mapping[str, type]] = {  # a Responses message's parts that need a field
    "input_text": {"text": str}, "output_text": {"text": str}, "refusal": {"refusal": str}}
ITEMS: Mapping[str, Mapping[str, type]] = {
    "function_call": {"call_id": str, "name": str, "arguments": str},
    "function_call_output": {"call_id": str},
}
_NAMES: Mapping[type, str] = {str: "a string", dict: "an object", list: "an array"}


def anthropic(body: Mapping[str, Any]) -> None:
    system = body.get("system")
    if system is not None and not isinstance(system, str):
        _blocks(system, "system", ("text",), "a string or an array of text blocks")
    for at, message in objects(body.get("messages"), "messages", "a non-empty array of messages",
                               "invalid_messages"):
        role = message.get("role")
        if not isinstance(role, str) or role not in ANTHROPIC_ROLES:
            raise Refused(400, f"{at}.role must be one of {', '.join(ANTHROPIC_ROLES)} (the "
                          "system prompt is the body's \"system\")", param=f"{at}.role",
                          code="invalid_value")
        if "content" not in message:
            raise Refused(400, f"{at}.content is missing: give a string or an array of "
                          "content blocks", param=f"{at}.content", code="missing_field")
        if not isinstance(message["content"], str):
            _blocks(message["content"], f"{at}.content", tuple(BLOCKS),
                    "a string or an array of content blocks")


def _blocks(found: Any, at: str, types: tuple[str, ...], kind: str) -> None:
    if not isinstance(found, list):
        raise wrong(at, kind)
    for j, block in enumerate(found):
        here = f"{at}[{j}]"
        _typed(block, here, types, BLOCKS)
        if block["type"] == "tool_result":
            inner = block.get("content")
            if inner is not None and not isinstance(inner, str):
                _blocks(inner, f"{here}.content", RESULT_BLOCKS,
                        "a string or an array of text or image blocks")


def responses(body: Mapping[str, Any]) -> None:
    if body.get("instructions") is not None and not isinstance(body["instructions"], str):
        raise wrong("instructions", "a string")
    found = body.get("input")
    if isinstance(found, str):
        return
    for at, item in objects(found, "input", "a string or a non-empty array of input items",
                            "invalid_input"):
        kind = item.get("type", "message")
        if not isinstance(kind, str):
            raise wrong(f"{at}.type", "a string")
        if kind == "message" or "role" in item:
            _message(item, at)
        elif kind in ITEMS:
            _fields(item, at, ITEMS[kind])
            output = item.get("output")
            if kind == "function_call_output" and not isinstance(output, (str, list)):
                raise wrong(f"{at}.output", "a string or an array")


def _message(item: Mapping[str, Any], at: str) -> None:
    role = item.get("role")
    if not isinstance(role, str) or role not in RESPONSE_ROLES:
        raise Refused(400, f"{at}.role must be one of {', '.join(RESPONSE_ROLES)}",
                      param=f"{at}.role", code="invalid_value")
    content = item.get("content")
    if isinstance(content, str):
        return
    if not isinstance(content, list):
        raise wrong(f"{at}.content", "a string or an array of content parts")
    for j, part in enumerate(content):
        here = f"{at}.content[{j}]"
        if not isinstance(part, dict):
            raise wrong(here, "an object")
        if not isinstance(part.get("type"), str):
            raise wrong(f"{here}.type", "a string")
        _fields(part, here, PARTS.get(part["type"], {}))


def infill(body: Mapping[str, Any]) -> None:
    for name in ("input_prefix", "input_suffix"):
        if not isinstance(body.get(name), str):
            raise Refused(400, f"\"{name}\" must be a string: the code before (input_prefix) "
                          "and after (input_suffix) the gap to fill", param=name,
                          code="invalid_type")
    if body.get("prompt") is not None and not isinstance(body["prompt"], str):
        raise wrong("prompt", "a string")
    extra = body.get("input_extra")
    if extra is None:
        return
    if not isinstance(extra, list):
        raise wrong("input_extra", "an array of {\"filename\", \"text\"} chunks")
    for i, chunk in enumerate(extra):
        if not isinstance(chunk, dict):
            raise wrong(f"input_extra[{i}]", "an object")
        _fields(chunk, f"input_extra[{i}]", {"text": str})


def _typed(part: Any, at: str, types: tuple[str, ...],
           needs: Mapping[str, Mapping[str, type]]) -> None:
    """A part (an object) whose `type` is one of `types`, with the fields its type needs."""
    if not isinstance(part, dict):
        raise wrong(at, "an object")
    kind = part.get("type")
    if not isinstance(kind, str) or kind not in types:
        raise Refused(400, f"{at}.type must be one of {', '.join(types)}", param=f"{at}.type",
                      code="invalid_value")
    _fields(part, at, needs.get(kind, {}))


def _fields(part: Mapping[str, Any], at: str, needs: Mapping[str, type]) -> None:
    for name, kind in needs.items():
        if not isinstance(part.get(name), kind):
            raise wrong(f"{at}.{name}", _NAMES[kind])


def objects(found: Any, name: str, what: str, code: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """Each item of the body's array `name` with where it is (`messages[2]`), each an object;
    Refused (400, `code`) where it is no non-empty array."""
    if not isinstance(found, list) or not found:
        raise Refused(400, f"\"{name}\" must be {what}", param=name, code=code)
    for i, item in enumerate(found):
        at = f"{name}[{i}]"
        if not isinstance(item, dict):
            raise wrong(at, "an object")
        yield at, item


def wrong(param: str, kind: str) -> Refused:
    return Refused(400, f"{param} must be {kind}", param=param, code="invalid_type")
