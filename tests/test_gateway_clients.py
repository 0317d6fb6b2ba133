"""Coding agents' APIs through the gateway for real (issue 60): `specctl gateway` in a subprocess
in front of real llama-server engines (SmolLM2 135M drafting for itself; Qwen2.5-Coder 0.5B for
tools and fill-in-the-middle), driven by the real client libraries: the `anthropic` SDK's
Messages (streamed and not, a tool round trip, the token count, its typed errors), the `openai`
SDK's Responses (streamed and not, its token count) and `models.retrieve`, and `/infill`.

Each answer is the engine's own: the same request sent straight to the engine (its port, from
`/gateway/status`) gets the same status and, at temperature 0, the same text and tokens. The
gateway's request goes first, once, to start the engine and fill its prompt cache; then the
engine is asked directly and the gateway again, so both are answered from the same cache."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import anthropic
import httpx
import openai
import pytest

from tests.test_gateway import (
    SMOL,
    Gateway,
    env,  # noqa: F401 (a fixture)
    gateways,  # noqa: F401 (a fixture)
    profile,
    start,
    stop,
)

pytestmark = pytest.mark.server
T = TypeVar("T")
TOOLS_TEMPLATE = Path(__file__).parent / "fixtures" / "chat-templates" / "json-tools.jinja"
CODER = ('target = "testbed:qwen-0.5b-q4"\ndraft = "none"\n'
         f'extra_args = ["--chat-template-file", "{TOOLS_TEMPLATE}"]\n[server]\ncontext = 2048\n')
GREEDY = {"temperature": 0}
WEATHER: Any = {"name": "get_weather", "description": "Get the current weather in a city",
           "input_schema": {"type": "object", "properties": {"city": {"type": "string"}},
                            "required": ["city"]}}


def engine_url(gw: Gateway, model: str) -> str:
    return f"http://127.0.0.1:{gw.engines()[model]['port']}"


def claude(url: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=url, api_key="none", max_retries=0, timeout=300)


def gpt(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0, timeout=300)


def same(gw: Gateway, model: str, ask: Callable[[str], T]) -> tuple[T, T]:
    """(the engine's answer, the gateway's) to `ask(base_url)`, asked of the gateway once first
    (so that the engine is up and both are answered from the same prompt cache)."""
    ask(gw.url)
    return ask(engine_url(gw, model)), ask(gw.url)


def test_claude_codes_api_answers_as_the_engine_does(
        env: dict[str, str], tmp_path: Path, gateways: list[Gateway]) -> None:  # noqa: F811
    """Messages through the anthropic SDK, as Claude Code sends them (ANTHROPIC_BASE_URL is
    the gateway's root): not streamed, streamed, the token count; the gateway's errors are the
    SDK's typed ones."""
    profile(env, "smol", SMOL + "k = 3\n[server]\ncontext = 2048\n")
    gw = start(env, tmp_path, "smol")
    gateways.append(gw)
    ask: Any = [{"role": "user", "content": "Name three colours."}]

    def create(url: str) -> anthropic.types.Message:
        return claude(url).messages.create(model="smol", max_tokens=24, messages=ask,
                                           system="Answer briefly.", extra_body=GREEDY)

    direct, via = same(gw, "smol", create)
    assert via.content[0].type == "text" and via.content[0].text
    assert (via.content, via.stop_reason, via.usage.output_tokens) == \
        (direct.content, direct.stop_reason, direct.usage.output_tokens)

    def streamed(url: str) -> tuple[str, list[str], int]:
        with claude(url).messages.stream(model="smol", max_tokens=24, messages=ask,
                                         extra_body=GREEDY) as stream:
            events: list[str] = [event.type for event in stream]
            final = stream.get_final_message()
        text = "".join(b.text for b in final.content if b.type == "text")
        return text, events, final.usage.output_tokens

    direct_stream, via_stream = same(gw, "smol", streamed)
    assert via_stream == direct_stream and via_stream[0]
    assert via_stream[1][0] == "message_start" and via_stream[1][-1] == "message_stop"

    def count(url: str) -> int:
        return claude(url).messages.count_tokens(model="smol", messages=ask,
                                                 system="Answer briefly.").input_tokens

    assert count(gw.url) == count(engine_url(gw, "smol")) > 10

    client = claude(gw.url)
    with pytest.raises(anthropic.NotFoundError, match="not served here"):
        client.messages.create(model="nope", max_tokens=4, messages=ask)
    bad: Any = [{"role": "user", "content": [{"type": "text", "text": 5}]}]
    with pytest.raises(anthropic.BadRequestError, match=r"messages\[0\]\.content\[0\]\.text"):
        client.messages.create(model="smol", max_tokens=4, messages=bad)
    metrics = gw.metrics()
    assert 'status="200"' in metrics and 'status="404"' not in metrics  # no engine for those
    assert stop(gw) == 0


def test_codex_and_the_openai_sdk_get_responses_and_models_as_the_engine_answers(
        env: dict[str, str], tmp_path: Path, gateways: list[Gateway]) -> None:  # noqa: F811
    profile(env, "smol", SMOL + "k = 3\n[server]\ncontext = 2048\n")
    gw = start(env, tmp_path, "smol")
    gateways.append(gw)

    def create(url: str) -> tuple[str, str, int]:
        reply = gpt(url).responses.create(model="smol", input="Name three colours.",
                                          instructions="Answer briefly.", max_output_tokens=24,
                                          temperature=0, extra_body={"seed": 7})
        assert reply.usage is not None
        return reply.output_text, reply.status or "", reply.usage.output_tokens

    direct, via = same(gw, "smol", create)
    assert via == direct and via[0] and via[1] == "completed"

    def streamed(url: str) -> tuple[str, str]:
        text, last = "", ""
        for event in gpt(url).responses.create(model="smol", input="Name three colours.",
                                               max_output_tokens=24, temperature=0,
                                               stream=True):
            if event.type == "response.output_text.delta":
                text += event.delta
            last = event.type
        return text, last

    direct_stream, via_stream = same(gw, "smol", streamed)
    assert via_stream == direct_stream and via_stream[0]
    assert via_stream[1] == "response.completed"

    def counted(url: str) -> int:
        return gpt(url).responses.input_tokens.count(model="smol",
                                                     input="Name three colours.").input_tokens

    assert counted(gw.url) == counted(engine_url(gw, "smol")) > 3

    client = gpt(gw.url)
    model = client.models.retrieve("smol")
    assert (model.id, model.object, model.owned_by) == ("smol", "model", "specctl")
    with pytest.raises(openai.NotFoundError, match="not served here"):
        client.models.retrieve("nope")
    with pytest.raises(openai.BadRequestError, match="input"):
        client.responses.create(model="smol", input=[])
    assert stop(gw) == 0


def test_a_tool_round_trip_and_fill_in_the_middle_answer_as_the_engine_does(
        env: dict[str, str], tmp_path: Path, gateways: list[Gateway]) -> None:  # noqa: F811
    """A tool defined, the model's tool_use answered with a tool_result, its next reply; and an
    editor's fill-in-the-middle, streamed and not (`/infill` at the gateway's root)."""
    profile(env, "coder", CODER)
    profile(env, "smol", SMOL + "k = 3\n[server]\ncontext = 1024\n")
    gw = start(env, tmp_path, "coder", "smol")
    gateways.append(gw)
    ask: Any = [{"role": "user", "content": "What is the weather in Paris?"}]

    def call(url: str) -> anthropic.types.Message:
        return claude(url).messages.create(model="coder", max_tokens=40, messages=ask,
                                           tools=[WEATHER], extra_body=GREEDY)

    direct, via = same(gw, "coder", call)
    (use,) = [b for b in via.content if b.type == "tool_use"]
    assert via.stop_reason == direct.stop_reason == "tool_use"
    assert [(b.name, b.input) for b in direct.content if b.type == "tool_use"] == \
        [(use.name, use.input)] == [("get_weather", {"city": "Paris"})]
    ask += [{"role": "assistant", "content": [use.model_dump(include={"type", "id", "name",
                                                                      "input"})]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id,
                                          "content": "18 C and sunny"}]}]

    def answered(url: str) -> tuple[str | None, list[Any]]:
        reply = call(url)
        return reply.stop_reason, [b.model_dump(exclude={"id"}) for b in reply.content]

    direct_next, via_next = same(gw, "coder", answered)
    assert via_next == direct_next and via_next[1]  # the reply to the result, as the engine's

    fim = {"model": "coder", "input_prefix": "def add(a, b):\n    ", "input_suffix": "\n\n",
           "n_predict": 12, "temperature": 0, "seed": 3}

    def infill(url: str) -> tuple[int, str]:
        reply = httpx.post(f"{url}/infill", json=fim, timeout=300)
        return reply.status_code, reply.json()["content"]

    direct_fim, via_fim = same(gw, "coder", infill)
    assert via_fim == direct_fim and via_fim[0] == 200 and "a + b" in via_fim[1]

    def infill_stream(url: str) -> str:
        text = ""
        with httpx.stream("POST", f"{url}/infill", json={**fim, "stream": True},
                          timeout=300) as reply:
            assert reply.status_code == 200
            for line in reply.iter_lines():
                if line.startswith("data: "):
                    text += json.loads(line[6:])["content"]
        return text

    direct_text, via_text = same(gw, "coder", infill_stream)
    assert via_text == direct_text == via_fim[1]
    without = httpx.post(f"{gw.url}/infill", json={k: v for k, v in fim.items()
                                                   if k != "model"}, timeout=60)
    assert without.status_code == 400 and "serves 2 (coder, smol)" in without.text
    no_fim = httpx.post(f"{gw.url}/infill", json={**fim, "model": "smol"}, timeout=300)
    assert no_fim.status_code == 400  # SmolLM2 has no FIM tokens: the engine's refusal, kept
    assert "Infill is not supported by this model" in no_fim.json()["error"]["message"]
    assert stop(gw) == 0
