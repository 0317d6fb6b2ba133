"""The inference APIs the gateway knows, by path: the format of a body (how the router and the
kept traffic read it: measure/prompts/bodies.py, and which fields gateway/schema.py checks),
the shape of its errors, the events of its stream, whether it generates text and whether its
body must name the model. Which of them an engine serves its adapter declares
(`Adapter.api_paths`); a path an adapter declares that is not here is passed as an OpenAI one.

- OpenAI: chat and text completions, embeddings; Responses and its token count. Errors are
  `{"error": {"message", "type", "param", "code"}}`; a stream is `data:` events, chat's and
  completions' ending with `data: [DONE]`, Responses' with `response.completed` (or failed).
- Anthropic Messages and its token count (Claude Code, the `anthropic` SDK): errors are
  `{"type": "error", "error": {"type", "message"}}`; a stream is `event:` and `data:` lines
  from `message_start` to `message_stop`.
- Fill-in-the-middle (`/infill`, at the server's root: editor plugins): a stream of `data:`
  chunks, the last one `"stop": true`; a body without `model` goes to the one model of a
  gateway that serves one.
"""

from __future__ import annotations

from dataclasses import dataclass

from specctl.orchestrator.measure.prompts import bodies

OPENAI, ANTHROPIC, RESPONSES, INFILL = "openai", "anthropic", "responses", "infill"


@dataclass(frozen=True)
class Api:
    path: str  # from the server's root: /v1/messages, /infill
    format: str  # the body's, as measure reads it (bodies.CHAT, ...), and schema checks it
    errors: str = OPENAI  # OPENAI or ANTHROPIC: the shape of its error answers
    stream: str = OPENAI  # its stream's events: OPENAI (ends with [DONE]), ANTHROPIC,
    # RESPONSES, INFILL (data: chunks, the last "stop": true)
    generates: bool = True  # answers with generated text (False: a token count, embeddings)

    @property
    def anthropic(self) -> bool:
        return self.errors == ANTHROPIC


KNOWN = {api.path: api for api in (
    Api("/v1/chat/completions", bodies.CHAT),
    Api("/v1/completions", bodies.COMPLETIONS),
    Api("/v1/embeddings", "embeddings", generates=False),
    Api("/v1/responses", bodies.RESPONSES, stream=RESPONSES),
    Api("/v1/responses/input_tokens", bodies.RESPONSES, generates=False),
    Api("/v1/messages", bodies.MESSAGES, errors=ANTHROPIC, stream=ANTHROPIC),
    Api("/v1/messages/count_tokens", bodies.MESSAGES, errors=ANTHROPIC, generates=False),
    Api("/infill", bodies.INFILL, stream=INFILL),
)}


def of(path: str | None) -> Api:
    """The API at `path` (a normalised path from the root); an unknown one is passed as an
    OpenAI path whose body is read for nothing but its model."""
    if path is None:
        return Api("", "other")
    return KNOWN.get(path) or Api(path, "other")


def anthropic_path(path: str | None) -> bool:
    """Is `path` Anthropic's (below /v1/messages), whose clients read Anthropic's errors?"""
    return path is not None and (path == "/v1/messages" or path.startswith("/v1/messages/"))
