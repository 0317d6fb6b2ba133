"""The fields of a request checked before it reaches an engine, by its API's format: not each
API's whole schema, only what engines fail on or misread (llama-server answers a chat message
without a `role`, or a content part of the wrong type, with a 500; an Anthropic text block
without `text`, or a fill-in-the-middle body without `input_suffix`, too; it answers Messages
whose `messages` is a string, or Responses whose `input` is empty, as if they asked nothing) and
what the gateway itself reads (`model`, `stream`, the messages, the answer's length). Each
failure is a 400 whose `param` names the field (`messages[2].content[0].text`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from specctl.orchestrator.gateway import fields
from specctl.orchestrator.gateway.errors import Refused
from specctl.orchestrator.measure.prompts import bodies

MAX_MODEL = 256  # characters of a model name (a profile's name is at most 64)
ROLES = ("system", "developer", "user", "assistant", "tool", "function")
# a content part's type -> its field, that field's type, and the fields inside it
PARTS: Mapping[str, tuple[str, type, Mapping[str, type]]] = {
    "text": ("text", str, {}), "refusal": ("refusal", str, {}),
    "image_url": ("image_url", dict, {"url": str}),
    "input_audio": ("input_audio", dict, {"data": str, "format": str}),
    "file": ("file", dict, {}),
}
_TYPE_NAMES = {str: "a string", dict: "an object", list: "an array", bool: "true or false"}


def _integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


# optional fields of every request: (what it must be, the check); null is always allowed
FIELDS: Mapping[str, tuple[str, Callable[[Any], bool]]] = {
    "stream": ("true or false", lambda v: isinstance(v, bool)),
    "max_tokens": ("an integer", _integer),
    "max_completion_tokens": ("an integer", _integer),
    "n": ("an integer", _integer),
    "max_output_tokens": ("an integer", _integer),  # Responses'
    "n_predict": ("an integer", _integer),  # fill-in-the-middle's
    "temperature": ("a number", _number),
    "top_p": ("a number", _number),
    "tools": ("an array", lambda v: isinstance(v, list)),
}


def model_of(body: Mapping[str, Any]) -> str:
    """The model the body names (Refused, 400, when it names none)."""
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise Refused(400, "name the model in the body's \"model\" field (GET /v1/models lists "
                      "them)", param="model", code="missing_model")
    if len(model) > MAX_MODEL:
        raise Refused(400, f"\"model\" is longer than {MAX_MODEL} characters; GET /v1/models "
                      "lists the names", param="model", code="invalid_model")
    return model


def check(fmt: str, body: Mapping[str, Any]) -> None:
    """Refused (400) at the first field of a body of format `fmt` (gateway/apis.py) that is
    missing or of the wrong type."""
    for name, (kind, ok) in FIELDS.items():
        value = body.get(name)
        if value is not None and not ok(value):
            raise fields.wrong(name, kind)
    if fmt == bodies.CHAT:
        messages(body.get("messages"))
    elif fmt in FORMATS:
        FORMATS[fmt](body)


def messages(found: Any) -> None:
    for at, message in fields.objects(found, "messages", "a non-empty array of messages",
                                      "invalid_messages"):
        role = message.get("role")
        if "role" not in message:
            raise Refused(400, f"{at} has no \"role\"", param=f"{at}.role",
                          code="missing_field")
        if not isinstance(role, str) or role not in ROLES:
            raise Refused(400, f"{at}.role must be one of {', '.join(ROLES)}",
                          param=f"{at}.role", code="invalid_value")
        for name, kind in (("name", str), ("tool_calls", list)):
            if message.get(name) is not None and not isinstance(message[name], kind):
                raise fields.wrong(f"{at}.{name}", _TYPE_NAMES[kind])
        content(message.get("content"), f"{at}.content")


def content(found: Any, at: str) -> None:
    if found is None or isinstance(found, str):
        return
    if not isinstance(found, list):
        raise fields.wrong(at, "a string, null or an array of content parts")
    for j, part in enumerate(found):
        here = f"{at}[{j}]"
        if not isinstance(part, dict):
            raise fields.wrong(here, "an object")
        kind = part.get("type")
        if not isinstance(kind, str) or kind not in PARTS:
            raise Refused(400, f"{here}.type must be one of {', '.join(PARTS)}",
                          param=f"{here}.type", code="invalid_value")
        field, wanted, inner = PARTS[kind]
        value = part.get(field)
        if not isinstance(value, wanted):
            raise fields.wrong(f"{here}.{field}", _TYPE_NAMES[wanted])
        for name, kind_of in inner.items():
            if not isinstance(value, dict) or not isinstance(value.get(name), kind_of):
                raise fields.wrong(f"{here}.{field}.{name}", _TYPE_NAMES[kind_of])


FORMATS: Mapping[str, Callable[[Mapping[str, Any]], None]] = {
    bodies.MESSAGES: fields.anthropic, bodies.RESPONSES: fields.responses,
    bodies.INFILL: fields.infill}

