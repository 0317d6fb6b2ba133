"""Each inference API at the gateway, in process (Starlette's TestClient; the one model served
has no file, so no engine ever starts): the paths adapters declare, each API's field checks, its
errors in its own shape (Anthropic's on its paths, so its SDK raises its typed errors), the
model retrieved by id, fill-in-the-middle without a model, keys as Anthropic's clients send
them; and the pure parts: how each API's stream ends when cut short, and the hang check.
The same APIs through a real llama-server are in tests/test_gateway_clients.py."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from starlette.testclient import TestClient

from specctl.adapters.llamacpp import LlamaCpp
from specctl.orchestrator.app import App, Resolved, Routable
from specctl.orchestrator.config import profiles
from specctl.orchestrator.gateway import apis, ends, intake
from specctl.orchestrator.gateway.asgi import Gateway
from specctl.orchestrator.gateway.errors import Refused
from specctl.orchestrator.gateway.hung import HangCheck
from specctl.orchestrator.gateway.metrics import Metrics
from specctl.orchestrator.gateway.owned import Engines
from specctl.orchestrator.gateway.plans import Plans
from specctl.orchestrator.gateway.pool import Pool, PoolSettings
from tests import plans as plan_values
from tests.test_gateway_intake import problem

KEY = "k-7f3a"
MESSAGES = {"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}
RESPONSES = {"model": "m", "input": "hi"}
INFILL = {"input_prefix": "def f(", "input_suffix": "):\n"}


def gateway_of(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, keys: tuple[str, ...] = (),
               names: tuple[str, ...] = ("m",)) -> Gateway:
    """A gateway serving `names` (llama.cpp plans whose file does not exist)."""
    monkeypatch.setenv("SPECCTL_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("SPECCTL_CONFIG_DIR", str(tmp_path / "config"))
    backend = LlamaCpp()
    found, routable = {}, {}
    for name in names:
        found[name] = profiles.parse(f'target = "{tmp_path}/none.gguf"\n', name, "test")
        plan = plan_values.plan(profile=name,
                                target=plan_values.target(path=tmp_path / "none.gguf"))
        routable[name] = Routable(Resolved(found[name], plan, backend.assumed(), backend))
    plans = Plans(App.from_env(), found, routable, None)
    pool = Pool(plans, PoolSettings(), Metrics(), lambda _line: None, Engines(None, 60, 3))
    return Gateway(pool, None, keys)


@pytest.fixture
def client(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[TestClient]:
    with TestClient(gateway_of(tmp_path, monkeypatch).app(),
                    raise_server_exceptions=False) as c:
        yield c


def anthropic_error(reply: Any) -> dict[str, Any]:
    """Anthropic's error shape: `{"type": "error", "error": {"type", "message"}}`, nothing else."""
    assert reply.headers["content-type"] == "application/json", reply.text
    found: dict[str, Any] = reply.json()
    assert found["type"] == "error" and set(found) == {"type", "error"}, found
    assert set(found["error"]) == {"type", "message"}, found
    return dict(found["error"])


def blocks(*content: Any) -> dict[str, Any]:
    return {**MESSAGES, "messages": [{"role": "user", "content": list(content)}]}


MESSAGE_FIELDS = [
    ("messages-string", {**MESSAGES, "messages": "hi"}, "messages"),
    ("messages-empty", {**MESSAGES, "messages": []}, "messages"),
    ("role-system", {**MESSAGES, "messages": [{"role": "system", "content": "x"}]},
     "messages[0].role"),
    ("no-role", {**MESSAGES, "messages": [{"content": "x"}]}, "messages[0].role"),
    ("no-content", {**MESSAGES, "messages": [{"role": "user"}]}, "messages[0].content"),
    ("content-number", {**MESSAGES, "messages": [{"role": "user", "content": 5}]},
     "messages[0].content"),
    ("block-string", blocks("hi"), "messages[0].content[0]"),
    ("block-unknown", blocks({"type": "video"}), "messages[0].content[0].type"),
    ("text-missing", blocks({"type": "text"}), "messages[0].content[0].text"),
    ("text-number", blocks({"type": "text", "text": 5}), "messages[0].content[0].text"),
    ("tool-use-no-id", blocks({"type": "tool_use", "name": "f", "input": {}}),
     "messages[0].content[0].id"),
    ("tool-use-input-string", blocks({"type": "tool_use", "id": "t", "name": "f",
                                      "input": "{}"}), "messages[0].content[0].input"),
    ("tool-result-no-id", blocks({"type": "tool_result", "content": "x"}),
     "messages[0].content[0].tool_use_id"),
    ("tool-result-inner", blocks({"type": "tool_result", "tool_use_id": "t",
                                  "content": [{"type": "tool_use"}]}),
     "messages[0].content[0].content[0].type"),
    ("system-number", {**MESSAGES, "system": 5}, "system"),
    ("system-block", {**MESSAGES, "system": [{"type": "text"}]}, "system[0].text"),
    ("max-tokens-string", {**MESSAGES, "max_tokens": "8"}, "max_tokens"),
]


@pytest.mark.parametrize(("name", "body", "param"), MESSAGE_FIELDS,
                         ids=[f[0] for f in MESSAGE_FIELDS])
@pytest.mark.parametrize("path", ["/v1/messages", "/v1/messages/count_tokens"])
def test_a_malformed_messages_request_is_a_400_in_anthropics_shape(
        client: TestClient, name: str, body: dict[str, Any], param: str, path: str) -> None:
    reply = client.post(path, json=body)
    assert reply.status_code == 400, (name, reply.text)
    found = anthropic_error(reply)
    assert found["type"] == "invalid_request_error" and param in found["message"], found


RESPONSE_FIELDS = [
    ("no-input", {"model": "m"}, "input"),
    ("input-number", {**RESPONSES, "input": 5}, "input"),
    ("input-empty", {**RESPONSES, "input": []}, "input"),
    ("item-string", {**RESPONSES, "input": ["hi"]}, "input[0]"),
    ("role-unknown", {**RESPONSES, "input": [{"role": "wizard", "content": "x"}]},
     "input[0].role"),
    ("content-number", {**RESPONSES, "input": [{"role": "user", "content": 5}]},
     "input[0].content"),
    ("text-number", {**RESPONSES, "input": [{"role": "user", "content": [
        {"type": "input_text", "text": 5}]}]}, "input[0].content[0].text"),
    ("call-no-name", {**RESPONSES, "input": [{"type": "function_call", "call_id": "c",
                                              "arguments": "{}"}]}, "input[0].name"),
    ("output-number", {**RESPONSES, "input": [{"type": "function_call_output",
                                               "call_id": "c", "output": 5}]},
     "input[0].output"),
    ("instructions-number", {**RESPONSES, "instructions": 5}, "instructions"),
    ("max-output-string", {**RESPONSES, "max_output_tokens": "9"}, "max_output_tokens"),
]


@pytest.mark.parametrize(("name", "body", "param"), RESPONSE_FIELDS,
                         ids=[f[0] for f in RESPONSE_FIELDS])
@pytest.mark.parametrize("path", ["/v1/responses", "/v1/responses/input_tokens"])
def test_a_malformed_responses_request_is_a_400_naming_the_field(
        client: TestClient, name: str, body: dict[str, Any], param: str, path: str) -> None:
    reply = client.post(path, json=body)
    assert reply.status_code == 400, (name, reply.text)
    assert problem(reply)["param"] == param


INFILL_FIELDS = [
    ("no-suffix", {"input_prefix": "x"}, "input_suffix"),
    ("prefix-number", {**INFILL, "input_prefix": 5}, "input_prefix"),
    ("prompt-list", {**INFILL, "prompt": ["x"]}, "prompt"),
    ("extra-object", {**INFILL, "input_extra": {"text": "x"}}, "input_extra"),
    ("extra-no-text", {**INFILL, "input_extra": [{"filename": "a"}]}, "input_extra[0].text"),
    ("n-predict-string", {**INFILL, "n_predict": "4"}, "n_predict"),
]


@pytest.mark.parametrize(("name", "body", "param"), INFILL_FIELDS,
                         ids=[f[0] for f in INFILL_FIELDS])
def test_a_malformed_infill_request_is_a_400_naming_the_field(
        client: TestClient, name: str, body: dict[str, Any], param: str) -> None:
    reply = client.post("/infill", json=body)
    assert reply.status_code == 400, (name, reply.text)
    assert problem(reply)["param"] == param


def test_well_formed_requests_of_each_api_pass_to_the_engine(client: TestClient) -> None:
    """Each passes the checks and the model lookup: this gateway's engine cannot start, which
    is a 502 (Anthropic's api_error on its paths); fill-in-the-middle without a model goes to
    the one model served."""
    parts = {"type": "tool_result", "tool_use_id": "t", "content": [
        {"type": "text", "text": "42"}, {"type": "image", "source": {"type": "url"}}]}
    agent = {**MESSAGES, "system": [{"type": "text", "text": "Be brief.",
                                     "cache_control": {"type": "ephemeral"}}],
             "messages": [{"role": "user", "content": "q"},
                          {"role": "assistant", "content": [
                              {"type": "thinking", "thinking": "..."},
                              {"type": "tool_use", "id": "t", "name": "f", "input": {}}]},
                          {"role": "user", "content": [parts]}]}
    for path in ("/v1/messages", "/v1/messages/count_tokens"):
        reply = client.post(path, json=agent)
        assert reply.status_code == 502 and anthropic_error(reply)["type"] == "api_error"
    items = [{"role": "developer", "content": "Use tabs."},
             {"type": "message", "role": "assistant", "content": [
                 {"type": "output_text", "text": "ok"}]},
             {"type": "function_call", "call_id": "c", "name": "ls", "arguments": "{}"},
             {"type": "function_call_output", "call_id": "c", "output": "a.py"},
             {"type": "reasoning", "summary": []}]
    responses: list[dict[str, Any]] = [RESPONSES, {**RESPONSES, "input": items,
                                                   "instructions": None}]
    for body in responses:
        for path in ("/v1/responses", "/v1/responses/input_tokens"):
            reply = client.post(path, json=body)
            assert reply.status_code == 502 and problem(reply)["code"] is None, reply.text
    for body in (INFILL, {**INFILL, "model": "m", "prompt": "a", "n_predict": 4,
                          "input_extra": [{"filename": "x.py", "text": "y"}]}):
        assert client.post("/infill", json=body).status_code == 502


def test_infill_names_the_model_where_the_gateway_serves_several(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    body = json.dumps(INFILL).encode()
    assert intake.parse(body, "/infill", ["m"]).model == "m"
    with pytest.raises(Refused, match=r"\"model\" field: /infill without one goes to the "
                       r"gateway's one model, and this one serves 2 \(a, b\)") as refused:
        intake.parse(body, "/infill", ["b", "a"])
    assert refused.value.status == 400 and refused.value.param == "model"
    with pytest.raises(Refused, match="not served here"):
        intake.parse(json.dumps({**INFILL, "model": "zz"}).encode(), "/infill", ["m"])
    # every API: a body without a model goes to the one model (llama-server takes it so)
    assert intake.parse(json.dumps({"input": "x"}).encode(), "/v1/responses", ["m"]).model == "m"
    with pytest.raises(Refused, match="/v1/responses without one"):
        intake.parse(json.dumps({"input": "x"}).encode(), "/v1/responses", ["a", "b"])
    gw = gateway_of(tmp_path, monkeypatch, names=("a", "b"))
    with TestClient(gw.app(), raise_server_exceptions=False) as client:
        reply = client.post("/infill", json=INFILL)
        assert reply.status_code == 400 and problem(reply)["code"] == "missing_model"


def test_the_gateways_own_errors_on_anthropics_paths_are_in_its_shape(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    gw = gateway_of(tmp_path, monkeypatch, keys=(KEY,))
    with TestClient(gw.app(), raise_server_exceptions=False) as client:
        denied = client.post("/v1/messages", json=MESSAGES)
        assert denied.status_code == 401
        assert anthropic_error(denied)["type"] == "authentication_error"
        assert problem(client.post("/v1/responses", json=RESPONSES))["code"] == \
            "invalid_api_key"  # OpenAI's paths keep OpenAI's shape
        key = {"x-api-key": KEY}  # as the anthropic SDK sends it
        unknown = client.post("/v1/messages", json={**MESSAGES, "model": "zz"}, headers=key)
        assert unknown.status_code == 404
        assert anthropic_error(unknown)["type"] == "not_found_error"
        assert client.post("/v1/messages", json=MESSAGES, headers=key).status_code == 502
        wrong = client.post("/v1/messages", json=MESSAGES, headers={"x-api-key": "nope"})
        assert wrong.status_code == 401
        for method, path, status in (("GET", "/v1/messages", 405),
                                     ("POST", "/v1/messages/batches", 404)):
            reply = client.request(method, path, headers=key)
            assert reply.status_code == status and "message" in anthropic_error(reply)
        big = client.post("/v1/messages", content=b"x" * (intake.MAX_BODY + 1), headers=key)
        assert big.status_code == 413
        assert anthropic_error(big)["type"] == "request_too_large"
        bearer = {"Authorization": f"Bearer {KEY}"}
        assert client.post("/infill", json=INFILL, headers=bearer).status_code == 502


def test_a_model_is_retrieved_by_its_id(client: TestClient) -> None:
    found = client.get("/v1/models/m")
    assert found.status_code == 200
    assert found.json() == {**client.get("/v1/models").json()["data"][0]}
    assert found.json()["id"] == "m" and found.json()["object"] == "model"
    missing = client.get("/v1/models/nope")
    assert missing.status_code == 404 and problem(missing)["code"] == "model_not_found"
    assert client.post("/v1/models/m").status_code == 404  # no API there: refused unread


# -- how a stream cut short ends, in each API's events --------------------------------------------
def _events(raw: bytes) -> list[tuple[str | None, str]]:
    out = []
    for block in raw.decode().strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.splitlines())
        out.append((lines.get("event"), lines["data"]))
    return out


def test_each_api_ends_a_cut_stream_in_its_own_events() -> None:
    chat = _events(ends.event(apis.OPENAI, "gone", 504))
    assert chat[-1] == (None, "[DONE]")
    assert json.loads(chat[0][1])["error"] == {"message": "gone", "type": "server_error",
                                               "code": 504}
    ((name, data),) = _events(ends.event(apis.ANTHROPIC, "gone", 504))
    assert name == "error" and json.loads(data) == {
        "type": "error", "error": {"type": "api_error", "message": "gone"}}
    failed = _events(ends.event(apis.RESPONSES, "gone", 502, "resp_1", 7))
    assert [n for n, _ in failed] == ["error", "response.failed"]
    assert json.loads(failed[0][1]) == {"type": "error", "code": "server_error",
                                        "message": "gone", "param": None, "sequence_number": 7}
    response = json.loads(failed[1][1])["response"]
    assert response["id"] == "resp_1" and response["status"] == "failed"
    assert response["error"] == {"code": "server_error", "message": "gone"}
    assert [n for n, _ in _events(ends.event(apis.RESPONSES, "gone", 502))] == ["error"]
    ((name, data),) = _events(ends.event(apis.INFILL, "gone", 503))
    assert name is None and json.loads(data)["error"]["code"] == 503  # no [DONE] there


# -- the hang check ------------------------------------------------------------------------------
class _Engine:
    """What the hang check keys on: an object (the pool's Engine in the gateway)."""


def test_a_silent_engine_that_does_not_answer_is_called_off_and_one_that_answers_is_not() -> None:
    answers: dict[object, bool | None] = {}
    asked: list[object] = []

    async def probe(engine: Any) -> bool | None:
        asked.append(engine)
        await anyio.sleep(0.05)
        return answers[engine]

    async def run() -> dict[str, Any]:
        check = HangCheck(probe, quiet=0.1)
        hung: Any = _Engine()
        busy: Any = _Engine()
        unsure: Any = _Engine()
        answers.update({hung: False, busy: True, unsure: None})
        out: dict[str, Any] = {}

        async def wait(name: str, engine: Any, seconds: float) -> None:
            with anyio.CancelScope() as scope, check.waiting(engine, scope, spawn):
                await anyio.sleep(seconds)
            out[name] = scope.cancelled_caught

        async with anyio.create_task_group() as tasks:
            def spawn(work: Any) -> None:
                tasks.start_soon(work)

            started = anyio.current_time()
            tasks.start_soon(wait, "hung", hung, 5)
            tasks.start_soon(wait, "hung too", hung, 5)  # every wait on it
            tasks.start_soon(wait, "busy", busy, 0.6)
            tasks.start_soon(wait, "unsure", unsure, 0.6)
        out["took"] = anyio.current_time() - started
        out["verdict"] = check.verdicts.get(hung)
        out["others"] = (check.verdicts.get(busy), check.verdicts.get(unsure))
        return out

    out = anyio.run(run)
    assert out["hung"] and out["hung too"] and not out["busy"] and not out["unsure"]
    assert out["took"] < 2 and "did not answer its health check" in out["verdict"]
    assert out["others"] == (None, None)
    assert len([e for e in asked if answers[e] is True]) >= 2  # asked again while silent


def test_an_engine_heard_meanwhile_is_not_hung() -> None:
    async def run() -> bool:
        check = HangCheck(lambda engine: _late(check, engine), quiet=0.05)
        engine: Any = _Engine()
        async with anyio.create_task_group() as tasks:
            def spawn(work: Any) -> None:
                tasks.start_soon(work)

            with anyio.CancelScope() as scope, check.waiting(engine, scope, spawn):
                await anyio.sleep(0.4)
        return scope.cancelled_caught or engine in check.verdicts

    assert anyio.run(run) is False


async def _late(check: HangCheck, engine: Any) -> bool:
    """A probe that times out while the engine sends a chunk to another request."""
    await anyio.sleep(0.02)
    check.heard(engine)
    return False
