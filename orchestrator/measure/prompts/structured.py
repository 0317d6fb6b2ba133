"""The shipped tool-call and structured-output prompts (measure/prompts/structured.json): what
`bench --quality` asks to check that a speculative setting leaves tool calls and JSON-schema
answers as the target alone gives them.

Each prompt is one request: the API path it goes to (`chat/completions`, or `messages`:
Anthropic Messages), its body (messages, tools and tool_choice, or a `response_format` with a
JSON schema; never the model, stream or sampling fields, which the check sets), its answer
length, and whether it is the one whose completions the sampling test draws (`sampled`). Its
kind is what it asks for: `tools` (OpenAI tool calls), `tool_use` (Messages' tool use) or
`json_schema`; an adapter says which kinds its server answers (Adapter.structured).
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from specctl.orchestrator.errors import SpecctlError

Kind = Literal["tools", "tool_use", "json_schema"]
KINDS: tuple[Kind, ...] = ("tools", "tool_use", "json_schema")
SET = resources.files("specctl.orchestrator.measure.prompts") / "structured.json"
_SET_BY_THE_CHECK = frozenset({"model", "stream", "temperature", "top_p", "seed", "n",
                               "max_tokens", "logprobs"})


class StructuredPrompt(BaseModel):
    """One request whose answer is a tool call or fills a JSON schema."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(pattern=r"^[a-z0-9-]{1,32}$")
    api: Literal["chat/completions", "messages"]
    max_tokens: int = Field(ge=1, le=4096)
    sampled: bool = False
    body: dict[str, Any]

    @model_validator(mode="after")
    def _asks_for_structure(self) -> StructuredPrompt:
        messages = self.body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise ValueError("its body needs messages")
        taken = sorted(_SET_BY_THE_CHECK & set(self.body))
        if taken:
            raise ValueError(f"its body sets {', '.join(taken)}: the check sets those")
        if self.sampled and self.api != "chat/completions":
            raise ValueError("the sampled prompt is a chat/completions one")
        if self.api == "messages" and not self.body.get("tools"):
            raise ValueError("a Messages prompt asks for a tool (tools)")
        if self.api == "chat/completions" and bool(self.body.get("tools")) == (
                self.schema_format() is not None):
            raise ValueError("a chat prompt has tools or a json_schema response_format: one")
        return self

    def schema_format(self) -> dict[str, Any] | None:
        found = self.body.get("response_format")
        return found if isinstance(found, dict) and found.get("type") == "json_schema" else None

    @property
    def kind(self) -> Kind:
        if self.api == "messages":
            return "tool_use"
        return "tools" if self.body.get("tools") else "json_schema"


class StructuredSet(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    about: str = ""
    prompts: tuple[StructuredPrompt, ...] = Field(min_length=1, max_length=32)

    @model_validator(mode="after")
    def _one_each(self) -> StructuredSet:
        names = [p.name for p in self.prompts]
        if len(set(names)) < len(names):
            raise ValueError("two prompts share a name")
        if sum(p.sampled for p in self.prompts) > 1:
            raise ValueError("at most one prompt is sampled")
        return self


def load(text: str | None = None) -> tuple[StructuredPrompt, ...]:
    """The shipped prompts (or those of `text`, in the same format), validated; a malformed
    set is a bug of the set, said so in one line."""
    try:
        found = StructuredSet.model_validate(json.loads(SET.read_text() if text is None
                                                        else text))
    except (ValueError, ValidationError) as exc:
        first = str(exc).splitlines()
        raise SpecctlError(f"the structured-output prompts are malformed: "
                           f"{' '.join(first[:3])[:300]}") from None
    return found.prompts
