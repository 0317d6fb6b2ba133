"""How a stream the gateway cuts short ends (its engine failed, hung, or the gateway stops), in
the events of its API (gateway/apis.py), so that the API's own client raises or reports it:

- OpenAI chat and text completions: `data: {"error": {...}}`, then `data: [DONE]` (the openai
  client raises on an event with an `error`).
- Anthropic Messages: `event: error` with `{"type": "error", "error": {"type": "api_error",
  "message"}}` (the anthropic client raises), as Anthropic's API ends a stream that fails.
- OpenAI Responses: `event: error` (`{"type": "error", "code", "message"}`), then, once the
  stream has said which response it is, `event: response.failed` with that response failed
  and its error, as OpenAI's API does.
- Fill-in-the-middle: `data: {"error": {...}}` (its stream has no `[DONE]`).
"""

from __future__ import annotations

import json
from typing import Any

from specctl.orchestrator.gateway import apis
from specctl.orchestrator.gateway.errors import anthropic_kind


def event(stream: str, message: str, status: int, reply_id: str | None = None,
          events: int = 0) -> bytes:
    """The last events of a stream of format `stream` (apis.OPENAI, ...) cut short with
    `status`; `reply_id` and `events`: what the stream said of itself so far (its response's
    id, how many events it sent)."""
    if stream == apis.ANTHROPIC:
        return _sse("error", {"type": "error", "error": {"type": anthropic_kind(status),
                                                          "message": message}})
    if stream == apis.RESPONSES:
        out = _sse("error", {"type": "error", "code": "server_error", "message": message,
                             "param": None, "sequence_number": events})
        if reply_id is not None:
            out += _sse("response.failed", {
                "type": "response.failed", "sequence_number": events + 1,
                "response": {"id": reply_id, "object": "response", "status": "failed",
                             "output": [], "error": {"code": "server_error",
                                                     "message": message}}})
        return out
    found = {"error": {"message": message, "type": "server_error", "code": status}}
    body = f"data: {json.dumps(found)}\n\n"
    return (body if stream == apis.INFILL else body + "data: [DONE]\n\n").encode()


def _sse(name: str, data: dict[str, Any]) -> bytes:
    return f"event: {name}\ndata: {json.dumps(data)}\n\n".encode()
