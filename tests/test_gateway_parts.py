"""The gateway's pure parts, without servers: the memory a set of servers holds, what is read off
a reply as it passes (llama-server's streams of each API recorded here, chunk boundaries
anywhere), keys, the tuned results' signature, durations on the command line."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import click
import pytest
from starlette.requests import Request

from specctl.adapters.llamacpp import LlamaCpp
from specctl.orchestrator.cli.base import seconds
from specctl.orchestrator.errors import SettingsError
from specctl.orchestrator.gateway import apis
from specctl.orchestrator.gateway.asgi import authorized
from specctl.orchestrator.gateway.engines import footprint, setting_of
from specctl.orchestrator.gateway.plans import tuned_signature
from specctl.orchestrator.gateway.run import keys_of
from specctl.orchestrator.gateway.watch import Watch
from tests import plans

# the shape of llama-server's (0c1e570) stream: deltas, then a finish chunk with its timings
CHUNKS = [
    {"choices": [{"index": 0, "delta": {"role": "assistant", "content": None}}]},
    *({"choices": [{"index": 0, "delta": {"content": word}}]} for word in ("one", ",", " two")),
    {"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}],
     "usage": {"completion_tokens": 3, "prompt_tokens": 9},
     "timings": {"predicted_n": 3, "predicted_per_second": 41.5, "draft_n": 6,
                 "draft_n_accepted": 4}},
]
STREAM = "".join(f"data: {json.dumps(c)}\n\n" for c in CHUNKS).encode() + b"data: [DONE]\n\n"


def watch(stream: bool, events: str = apis.OPENAI) -> Watch:
    ticks = iter(range(10_000))
    adapter = LlamaCpp()
    return Watch(stream, adapter.decode_timing, adapter.reply_stats, lambda: float(next(ticks)),
                 prompt=adapter.prompt_tokens, events=events)


@pytest.mark.parametrize("cut", [1, 7, 50, len(STREAM)])
def test_a_stream_is_read_whatever_its_chunks(cut: int) -> None:
    seen = watch(True)
    for at in range(0, len(STREAM), cut):
        seen.feed(STREAM[at:at + cut])
    seen.finish()
    assert seen.generated == 3 and seen.chunks == 3  # the role-only chunk is no token
    assert seen.first_at == 0.0 and seen.engine_tps == 41.5 and seen.prompt_tokens == 9
    assert seen.stats is not None and (seen.stats.drafted, seen.stats.accepted) == (6, 4)


def test_a_reply_that_is_not_a_stream_is_read_at_its_end() -> None:
    body = {"choices": [{"message": {"content": "hi"}}], "usage": {"completion_tokens": 7},
            "timings": {"predicted_n": 7, "predicted_per_second": 20.0}}
    seen = watch(False)
    raw = json.dumps(body).encode()
    seen.feed(raw[:10])
    seen.feed(raw[10:])
    seen.finish()
    assert seen.generated == 7 and seen.engine_tps == 20.0 and seen.first_at == 0.0
    assert seen.stats is not None and seen.stats.drafted == 0  # nothing drafted: no counters


def test_the_prompts_tokens_from_usage_else_from_the_engines_timings() -> None:
    """A stream carries usage only where the client asked (`stream_options.include_usage`);
    llama-server's last chunk has its timings either way: the tokens from its cache and those
    prefilled (its reply to a request of 31 tokens asked twice: cache_n 30, prompt_n 1)."""
    timings = {"cache_n": 30, "prompt_n": 1, "predicted_n": 4, "predicted_per_second": 40.0}
    last = {"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}],
            "timings": timings}
    seen = watch(True)
    seen.feed(f"data: {json.dumps(CHUNKS[1])}\n\ndata: {json.dumps(last)}\n\n".encode())
    seen.finish()
    assert seen.prompt_tokens == 31 and seen.generated == 1
    with_usage = watch(False)  # usage wins over the timings
    with_usage.feed(json.dumps({**last, "usage": {"prompt_tokens": 33,
                                                  "completion_tokens": 4}}).encode())
    with_usage.finish()
    assert with_usage.prompt_tokens == 33 and with_usage.generated == 4
    for bad in ({"cache_n": -1, "prompt_n": 1}, {"prompt_n": "9"}, {"prompt_n": True}, {}):
        assert LlamaCpp().prompt_tokens({"timings": bad}) is None
    assert LlamaCpp().prompt_tokens({"timings": {"prompt_n": 9}}) == 9


# llama-server's (0c1e570) Anthropic Messages stream, as it sent it (ids shortened)
ANTHROPIC = [
    ("message_start", {"type": "message_start", "message": {
        "id": "msg_1", "type": "message", "role": "assistant", "content": [], "model": "smol",
        "usage": {"cache_read_input_tokens": 30, "input_tokens": 1, "output_tokens": 0}}}),
    ("content_block_start", {"type": "content_block_start", "index": 0,
                             "content_block": {"type": "text", "text": ""}}),
    *(("content_block_delta", {"type": "content_block_delta", "index": 0,
                               "delta": {"type": "text_delta", "text": t}})
      for t in ("Hello", "!", " How")),
    ("content_block_stop", {"type": "content_block_stop", "index": 0}),
    ("message_delta", {"type": "message_delta", "delta": {"stop_reason": "max_tokens"},
                       "usage": {"output_tokens": 3}}),
    ("message_stop", {"type": "message_stop"}),
]
# and its Responses stream: the completed response carries usage and the engine's timings
RESPONSES = [
    ("response.created", {"type": "response.created", "response": {
        "id": "resp_1", "object": "response", "status": "in_progress"}}),
    *(("response.output_text.delta", {"type": "response.output_text.delta", "item_id": "m",
                                      "delta": t}) for t in ("Hello", "!")),
    ("response.output_text.done", {"type": "response.output_text.done", "text": "Hello!"}),
    ("response.completed", {"type": "response.completed", "response": {
        "id": "resp_1", "status": "completed",
        "usage": {"input_tokens": 31, "output_tokens": 2, "total_tokens": 33}},
        "timings": {"cache_n": 30, "prompt_n": 1, "predicted_n": 2,
                    "predicted_per_second": 5.2, "draft_n": 2, "draft_n_accepted": 1}}),
]
# and its fill-in-the-middle stream: a chunk per token, the last one `stop` with its timings
INFILL = [*({"index": 0, "content": t, "stop": False, "tokens_predicted": n}
            for n, t in enumerate(("return", " a"), 1)),
          {"index": 0, "content": "", "stop": True, "tokens_predicted": 2,
           "timings": {"cache_n": 0, "prompt_n": 13, "predicted_n": 2,
                       "predicted_per_second": 5.6}}]


def sse(events: list[tuple[str, Any]]) -> bytes:
    return "".join(f"event: {name}\ndata: {json.dumps(data)}\n\n"
                   for name, data in events).encode()


@pytest.mark.parametrize("cut", [1, 13, 4096])
def test_each_apis_stream_is_read_in_its_own_events(cut: int) -> None:
    """Its text chunks, its usage (Anthropic's cached input tokens added back), the engine's
    timing, the reply's id, and when it is whole: only at its last event."""
    def read(raw: bytes, events: str) -> tuple[Watch, int | None]:
        """The watch, and the byte through which it was fed when it saw the stream whole."""
        seen, whole = watch(True, events), None
        for at in range(0, len(raw), cut):
            seen.feed(raw[at:at + cut])
            whole = min(at + cut, len(raw)) if seen.done and whole is None else whole
        return seen, whole

    raw = sse(ANTHROPIC)
    seen, whole = read(raw, apis.ANTHROPIC)
    last = raw.rindex(b"event: message_stop")  # its data line ends the stream
    assert whole is not None and whole >= raw.index(b"\n", raw.index(b"data:", last)) + 1
    assert whole - cut < len(raw)  # and at once
    assert (seen.generated, seen.chunks, seen.prompt_tokens) == (3, 3, 31)
    assert seen.first_at == 0.0 and seen.reply_id == "msg_1" and seen.seen == len(ANTHROPIC)
    seen, whole = read(sse(RESPONSES), apis.RESPONSES)
    assert whole is not None and seen.done
    assert (seen.generated, seen.chunks, seen.prompt_tokens) == (2, 2, 31)
    assert seen.engine_tps == 5.2 and seen.reply_id == "resp_1"
    assert seen.stats is not None and (seen.stats.drafted, seen.stats.accepted) == (2, 1)
    unfinished, _ = read(sse(RESPONSES[:-1]), apis.RESPONSES)
    assert not unfinished.done and unfinished.generated == 2
    seen, _ = read(b"".join(f"data: {json.dumps(c)}\n\n".encode() for c in INFILL),
                   apis.INFILL)
    assert seen.done and (seen.generated, seen.prompt_tokens, seen.engine_tps) == (2, 13, 5.6)
    chat, _ = read(STREAM.replace(b"data: [DONE]\n\n", b""), apis.OPENAI)
    assert not chat.done  # chat's stream is whole at [DONE] alone


def test_each_apis_reply_that_is_not_a_stream_is_read_at_its_end() -> None:
    replies = [
        (apis.ANTHROPIC, {"id": "msg_1", "type": "message", "content": [
            {"type": "text", "text": "Hi"}], "usage": {"input_tokens": 10,
                                                     "cache_read_input_tokens": 21,
                                                     "output_tokens": 8}}, (8, 31)),
        (apis.RESPONSES, {"id": "resp_1", "object": "response", "usage": {
            "input_tokens": 31, "output_tokens": 10, "total_tokens": 41}}, (10, 31)),
        (apis.INFILL, {"content": "return a", "stop": True, "tokens_predicted": 8,
                       "timings": {"cache_n": 0, "prompt_n": 13, "predicted_n": 8,
                                   "predicted_per_second": 1.1}}, (8, 13)),
        (apis.OPENAI, {"input_tokens": 31}, (0, 0)),  # a token count: nothing generated
    ]
    for events, reply, (generated, prompt) in replies:
        seen = watch(False, events)
        seen.feed(json.dumps(reply).encode())
        seen.finish()
        assert (seen.generated, seen.prompt_tokens) == (generated, prompt), events


def test_garbage_passes_through_unread() -> None:
    seen = watch(True)
    seen.feed(b"data: {not json\n\n: a comment\n\ndata: [1, 2]\n\n" + b"x" * (2 << 20))
    seen.finish()
    assert seen.generated == 0 and seen.stats is None
    broken = watch(False)
    broken.feed(b'{"choices": [')
    broken.finish()
    assert broken.generated == 0


def test_servers_sharing_mapped_weights_count_them_once() -> None:
    a = plans.plan()
    b = plans.plan(k=6, port=8091)
    alone = a.memory.device_bytes
    assert footprint([(a, False)]) == alone
    assert footprint([(a, False), (b, False)]) == 2 * alone
    shared = footprint([(a, True), (b, True)])
    assert shared == 2 * alone - a.memory.target_bytes - a.memory.draft_bytes
    other = plans.plan(target=plans.target(path=Path("/models/other.gguf")))
    assert footprint([(a, True), (other, True)]) == 2 * alone - a.memory.draft_bytes
    assert setting_of(b) == "draft k=6" and setting_of(a.baseline()) == "off"


def request(headers: dict[str, str]) -> Request:
    raw = [(k.lower().encode(), v.encode()) for k, v in headers.items()]
    return Request({"type": "http", "headers": raw, "method": "GET", "path": "/"})


def test_keys() -> None:
    keys = keys_of({"K": " old , new,,"}, "K")
    assert keys == ("old", "new") and keys_of({}, "K") == ()
    for empty in ("", " , ", ",,", "\t"):  # set, but no key: refused, never "no auth"
        with pytest.raises(SettingsError, match="K is set but holds no key"):
            keys_of({"K": empty}, "K")
    assert authorized(request({}), ())
    assert authorized(request({"Authorization": "Bearer new"}), keys)
    assert authorized(request({"Authorization": "bearer old"}), keys)
    for given in ({}, {"Authorization": "new"}, {"Authorization": "Bearer ne"},
                  {"Authorization": "Basic new"}, {"Authorization": "Bearer new extra"}):
        assert not authorized(request(given), keys), given


def test_a_saved_tune_changes_the_signature(tmp_path: Path) -> None:
    assert tuned_signature(tmp_path / "missing") == ()
    (tmp_path / "a.json").write_text("{}")
    first = tuned_signature(tmp_path)
    (tmp_path / "a.json").write_text('{"k": 4}')
    os.utime(tmp_path / "a.json", ns=(1, 10**18))
    assert tuned_signature(tmp_path) != first


def test_durations() -> None:
    assert seconds("90s", "--x", 0, 3600) == 90 and seconds("2m", "--x", 0, 3600) == 120
    assert seconds("0", "--x", 0, 3600) == 0 and seconds("1.5", "--x", 0, 3600) == 1.5
    for bad in ("", "m", "-1s", "2h", "nan", "1e9", "٣s"):
        with pytest.raises(click.BadParameter, match="--x takes a duration from 0s to 1h"):
            seconds(bad, "--x", 0, 3600)


def test_the_routes_without_a_server() -> None:
    """Starlette's TestClient (httpx) against the gateway's app with no model to start."""
    from starlette.testclient import TestClient

    from specctl.orchestrator.app import App
    from specctl.orchestrator.gateway.asgi import MAX_BODY, Gateway
    from specctl.orchestrator.gateway.metrics import Metrics
    from specctl.orchestrator.gateway.owned import Engines
    from specctl.orchestrator.gateway.plans import Plans
    from specctl.orchestrator.gateway.pool import Pool, PoolSettings

    said: list[str] = []
    pool = Pool(Plans(App.from_env(), {}, {}, None), PoolSettings(), Metrics(), said.append,
                Engines(None, 60, 3))
    key = {"Authorization": "Bearer k1"}
    with TestClient(Gateway(pool, None, ("k1",)).app()) as client:
        assert client.get("/health").json() == {"status": "ok"}
        assert client.get("/v1/models").status_code == 401
        assert client.get("/v1/models", headers=key).json() == {"object": "list", "data": []}
        big = client.post("/v1/chat/completions", content=b"x" * (MAX_BODY + 1), headers=key)
        assert big.status_code == 413 and "MiB" in big.json()["error"]["message"]
        gone = client.post("/v1/chat/completions", json={"model": "m"}, headers=key)
        assert gone.status_code == 404 and "'m' is not served here" in gone.text
        assert client.get("/gateway/status", headers=key).json()["engines"] == []
