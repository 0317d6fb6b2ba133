"""The gateway's lifecycle for real (issues 52, 60): `specctl gateway` in a subprocess in front of
real llama-server engines (SmolLM2 135M). Its engines die with it (kill -9 too) and the next
gateway reaps any left behind; a hung engine (SIGSTOP) gives 504 within seconds (its health
check) and is replaced, and an engine that answers its health but sends nothing is still bound
by the first-byte and between-chunk bounds; a SIGTERM tells every open stream and waiting
request before the engines stop; two gateways on one state dir keep their own status; the words
for a busy port and for no room in memory."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import psutil
import pytest

from specctl.orchestrator.app import App
from specctl.orchestrator.gateway.engines import footprint
from tests.test_faults import ours
from tests.test_gateway import (
    PROMPT,
    SMOL,
    Gateway,
    chat,
    engine_pid,
    env,  # noqa: F401 (a fixture)
    gateways,  # noqa: F401 (a fixture)
    profile,
    start,
    stop,
    wait_for,
)

pytestmark = pytest.mark.server


def engines_of(state_dir: str) -> list[psutil.Process]:
    """The llama-server processes started for this test (they carry its state dir)."""
    found = []
    for pid in ours(state_dir):
        with contextlib.suppress(psutil.Error):
            proc = psutil.Process(pid)
            if proc.name() == "llama-server" and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
    return found


def body(stream: bool, max_tokens: int = 8, model: str = "smol") -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": PROMPT}],
            "max_tokens": max_tokens, "temperature": 0, "stream": stream, "ignore_eos": True}


def test_kill_9_of_the_gateway_takes_its_engines_and_the_next_one_reaps_what_is_left(
        env: dict[str, str], tmp_path: Path, gateways: list[Gateway]) -> None:  # noqa: F811
    profile(env, "alpha", SMOL + "k = 3\n[server]\ncontext = 1024\n")
    profile(env, "beta", SMOL + "k = 2\n[server]\ncontext = 1024\n")
    state = env["SPECCTL_STATE_DIR"]
    gw = start(env, tmp_path, "alpha", "beta")
    gateways.append(gw)
    assert chat(gw, "alpha") and chat(gw, "beta")
    assert len(engines_of(state)) == 2
    gw.proc.kill()  # kill -9: no clean-up of its own
    gw.proc.wait(timeout=10)
    wait_for(lambda: engines_of(state) == [], 5, "no engine of the killed gateway runs")

    # an engine whose leash is stopped outlives its gateway; the next gateway reaps it
    again = start(env, tmp_path, "alpha", "beta")
    gateways.append(again)
    assert chat(again, "alpha")
    (left,) = engines_of(state)
    os.kill(left.ppid(), signal.SIGSTOP)  # its leash cannot act
    again.proc.kill()
    again.proc.wait(timeout=10)
    time.sleep(1)
    assert left.is_running(), "the engine outlived its gateway"
    third = start(env, tmp_path, "alpha", "beta")
    gateways.append(third)
    assert not left.is_running() or left.status() == psutil.STATUS_ZOMBIE
    assert "left running by a gateway that is gone" in third.log.read_text()
    assert chat(third, "alpha") and chat(third, "beta")
    assert sorted(e["model"] for e in third.status()["engines"]) == ["alpha", "beta"]
    assert len(engines_of(state)) == 2  # exactly one engine per model
    assert stop(third) == 0
    assert engines_of(state) == []


def gone(pid: int) -> bool:
    return not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


@contextlib.contextmanager
def stopped(pid: int) -> Iterator[float]:
    """SIGSTOP `pid` (hung: it answers nothing, its health check neither); the time it was
    stopped. SIGCONT at the end, whatever happened, so that nothing stays stopped (the gateway
    has stopped it by then, or will)."""
    os.kill(pid, signal.SIGSTOP)
    try:
        yield time.monotonic()
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)


def test_a_hung_engine_gets_504_within_the_bound_and_the_next_request_a_new_engine(
        env: dict[str, str], tmp_path: Path, gateways: list[Gateway]) -> None:  # noqa: F811
    """A SIGSTOPped engine is known hung in seconds, long before its bounds (here 30 s to the
    first byte, 8 s between chunks; by default 10 minutes and 60 s): it sends nothing and its
    health endpoint does not answer (gateway/hung.py). A streamed client gets the error event
    and `data: [DONE]`, a client that is not streamed its 504, the anthropic SDK's stream its
    error event (it raises); each within 20 s, the engine stopped, the next request served by
    a new one."""
    profile(env, "smol", SMOL + "k = 3\n[server]\ncontext = 2048\n")
    gw = start(env, tmp_path, "smol", "--first-byte-timeout", "30s", "--chunk-timeout", "8s")
    gateways.append(gw)
    assert chat(gw, "smol")
    first = gw.engines()["smol"]["port"]
    pid = engine_pid(first)
    url = f"{gw.url}/v1/chat/completions"
    events, took = hang_a_stream(url, body(True, 1500), pid)
    error = json.loads(events[-2].removeprefix("data: "))["error"]
    assert error["code"] == 504 and "did not answer its health check" in error["message"], error
    assert events[-1] == "data: [DONE]"
    assert took < 20, took  # and before the 8 s bound: the message is the health check's
    wait_for(lambda: gone(pid), 15, "the hung engine is stopped")  # (its CPU back, on 2 cores)
    assert chat(gw, "smol")  # a new engine serves
    second = gw.engines()["smol"]["port"]
    assert second != first
    pid = engine_pid(second)
    with stopped(pid) as since:
        reply = httpx.post(url, json=body(False), timeout=60)
        took = time.monotonic() - since
    assert reply.status_code == 504, reply.text
    assert "did not answer its health check" in reply.json()["error"]["message"]
    assert took < 20, took
    wait_for(lambda: gone(pid), 15, "the second hung engine is stopped")
    assert chat(gw, "smol")
    third = gw.engines()["smol"]["port"]
    assert third not in (first, second)
    pid = engine_pid(third)
    client = anthropic.Anthropic(base_url=gw.url, api_key="none", max_retries=0, timeout=60)
    deltas = 0
    with contextlib.ExitStack() as hung, pytest.raises(anthropic.APIStatusError,
                                                       match="health check") as raised, \
            client.messages.stream(model="smol", max_tokens=1500, messages=[
                {"role": "user", "content": PROMPT}]) as stream:
        for event in stream:
            deltas += event.type == "content_block_delta"
            if deltas == 3:
                since = hung.enter_context(stopped(pid))
    assert time.monotonic() - since < 20
    found: Any = raised.value.body
    assert found["type"] == "error" and found["error"]["type"] == "api_error", found
    wait_for(lambda: gone(pid), 15, "the third hung engine is stopped")
    assert chat(gw, "smol")
    assert gw.engines()["smol"]["port"] not in (first, second, third)
    assert 'reason="hung",setting="draft k=3"} 3.0' in gw.metrics()
    assert stop(gw) == 0


def hang_a_stream(url: str, asked: dict[str, Any], pid: int) -> tuple[list[str], float]:
    """A chat stream whose engine is stopped after its third chunk: its events, and the seconds
    from the stop to the stream's end."""
    lines: list[str] = []
    since = None
    with contextlib.ExitStack() as hung, \
            httpx.stream("POST", url, json=asked, timeout=60) as reply:
        assert reply.status_code == 200
        for line in reply.iter_lines():
            lines.append(line)
            if since is None and sum(ln.startswith("data: {") for ln in lines) == 3:
                since = hung.enter_context(stopped(pid))  # hung between chunks
        assert since is not None, "the stream ended before its engine was stopped"
        took = time.monotonic() - since
    return [ln for ln in lines if ln.startswith("data: ")], took


def test_the_bounds_still_bound_an_engine_that_answers_its_health(
        env: dict[str, str], tmp_path: Path, gateways: list[Gateway]) -> None:  # noqa: F811
    """An engine busy past the first-byte bound (1500 tokens not streamed, about 50 s here: its
    health answers all the while, so the hang check leaves it be) gets the client a 504 naming
    the bound, as does a stream silent past the bound between chunks (here shorter than the
    hang check's 2 s of silence); either engine is stopped and the next request served by a
    new one."""
    profile(env, "smol", SMOL + "k = 3\n[server]\ncontext = 2048\n")
    gw = start(env, tmp_path, "smol", "--first-byte-timeout", "15s", "--chunk-timeout", "1.8s")
    gateways.append(gw)
    assert chat(gw, "smol", max_tokens=2)
    first = gw.engines()["smol"]["port"]
    pid = engine_pid(first)
    url = f"{gw.url}/v1/chat/completions"
    asked = time.monotonic()
    reply = httpx.post(url, json=body(False, 1500), timeout=60)
    assert reply.status_code == 504, reply.text
    assert "first-byte bound of 15 s" in reply.json()["error"]["message"]
    assert 15 <= time.monotonic() - asked < 30
    wait_for(lambda: gone(pid), 15, "the engine past its bound is stopped")
    assert chat(gw, "smol", max_tokens=2)
    second = gw.engines()["smol"]["port"]
    assert second != first
    pid = engine_pid(second)
    events, took = hang_a_stream(url, body(True, 1500), pid)
    error = json.loads(events[-2].removeprefix("data: "))["error"]
    assert error["code"] == 504 and "bound between chunks of 1.8 s" in error["message"], error
    assert events[-1] == "data: [DONE]" and took < 20
    wait_for(lambda: gone(pid), 15, "the silent engine is stopped")
    assert chat(gw, "smol", max_tokens=2)
    assert gw.engines()["smol"]["port"] not in (first, second)
    assert stop(gw) == 0


def test_sigterm_tells_open_streams_and_waiting_requests_then_stops_every_engine(
        env: dict[str, str], tmp_path: Path, gateways: list[Gateway]) -> None:  # noqa: F811
    profile(env, "smol", SMOL + "k = 3\n[server]\ncontext = 2048\n")
    profile(env, "qwen", 'target = "testbed:qwen-1.5b-q4"\ndraft = "testbed:qwen-0.5b-q4"\n'
            "k = 3\n[server]\ncontext = 1024\n")
    gw = start(env, tmp_path, "smol", "qwen")
    gateways.append(gw)
    assert chat(gw, "smol")
    url = f"{gw.url}/v1/chat/completions"
    lines: list[str] = []
    waited: list[httpx.Response] = []

    def streaming() -> None:
        with httpx.stream("POST", url, json=body(True, 3000), timeout=120) as reply:
            lines.extend(reply.iter_lines())

    def waiting() -> None:  # qwen's first request: it waits for qwen's server to start
        waited.append(httpx.post(url, json=body(False, 4, "qwen"), timeout=120))

    threads = [threading.Thread(target=streaming), threading.Thread(target=waiting)]
    threads[0].start()
    wait_for(lambda: sum(ln.startswith("data: {") for ln in lines) >= 3, 60, "the stream runs")
    threads[1].start()
    wait_for(lambda: "starting qwen" in gw.log.read_text(), 30, "qwen is starting")
    gw.proc.send_signal(signal.SIGTERM)
    for thread in threads:
        thread.join(timeout=60)
    events = [ln for ln in lines if ln.startswith("data: ")]
    assert events[-1] == "data: [DONE]", events[-3:]
    error = json.loads(events[-2].removeprefix("data: "))["error"]
    assert error["code"] == 503 and "shutting down" in error["message"]
    (reply,) = waited
    assert reply.status_code == 503 and "shutting down" in reply.json()["error"]["message"]
    assert gw.proc.wait(timeout=60) == 0
    assert engines_of(env["SPECCTL_STATE_DIR"]) == []
    log = gw.log.read_text()
    assert "Traceback" not in log and "CancelledError" not in log, log


def test_two_gateways_on_one_state_dir_keep_their_own_status(
        env: dict[str, str], tmp_path: Path, gateways: list[Gateway]) -> None:  # noqa: F811
    profile(env, "smol", SMOL + "k = 3\n[server]\ncontext = 1024\n")
    first = start(env, tmp_path, "smol")
    gateways.append(first)
    (tmp_path / "second").mkdir()  # its own log
    second = start(env, tmp_path / "second", "smol")
    gateways.append(second)
    assert chat(first, "smol") and chat(second, "smol")

    def shown() -> str:
        done = subprocess.run([sys.executable, "-m", "specctl", "status"], env=env,
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        return done.stdout

    wait_for(lambda: first.url in shown() and second.url in shown(), 10, "both are shown")
    assert stop(first) == 0
    now = shown()
    assert second.url in now and first.url not in now, now
    assert chat(second, "smol")
    assert stop(second) == 0


def test_a_busy_gateway_port_is_told_to_take_the_gateways_own_port_flag(
        env: dict[str, str], tmp_path: Path, gateways: list[Gateway]) -> None:  # noqa: F811
    profile(env, "alpha", SMOL + "k = 3\n[server]\ncontext = 2048\n")
    first = start(env, tmp_path, "alpha")
    gateways.append(first)
    port = first.url.rsplit(":", 1)[1]
    busy = subprocess.run([sys.executable, "-m", "specctl", "gateway", "alpha", "--port", port],
                          env=env, capture_output=True, text=True, timeout=60)
    assert busy.returncode != 0 and len(busy.stderr.strip().splitlines()) == 1, busy.stderr
    assert f"port {port}" in busy.stderr and "specctl gateway --port" in busy.stderr
    assert "SPECCTL_SERVER__PORT" not in busy.stderr and "profile" not in busy.stderr
    assert stop(first) == 0


def test_a_request_refused_for_memory_is_told_so_with_the_figures(
        env: dict[str, str], tmp_path: Path, gateways: list[Gateway],  # noqa: F811
        monkeypatch: pytest.MonkeyPatch) -> None:
    profile(env, "alpha", SMOL + "k = 3\n[server]\ncontext = 2048\n")
    profile(env, "beta", SMOL + "k = 2\n[server]\ncontext = 1024\n")
    for key in ("SPECCTL_STATE_DIR", "SPECCTL_CONFIG_DIR"):
        monkeypatch.setenv(key, env[key])
    app = App.from_env()
    alpha = app.resolve("alpha")
    held = footprint([(alpha.plan, alpha.backend.shares_weights(alpha.plan))])
    for name in ("two", "three"):
        (tmp_path / name).mkdir()  # each gateway its own log
    gw = start(env, tmp_path / "two", "alpha", "beta", "--memory", f"{(held + 1) / 2**30:.9f}",
               "--start-wait", "2s")
    gateways.append(gw)
    url = f"{gw.url}/v1/chat/completions"
    httpx.post(url, json=body(False, 2, "alpha"), timeout=60)  # starts it (maybe past 2 s)
    wait_for(lambda: gw.engines().get("alpha", {}).get("state") == "ready", 60, "alpha is up")
    lines: list[str] = []

    def streaming() -> None:  # alpha busy: it cannot make room
        with httpx.stream("POST", url, json=body(True, 600, "alpha"), timeout=120) as reply:
            lines.extend(reply.iter_lines())

    thread = threading.Thread(target=streaming)
    thread.start()
    wait_for(lambda: sum(ln.startswith("data: {") for ln in lines) >= 2, 60, "alpha streams")
    refused = httpx.post(url, json=body(False, 4, "beta"), timeout=60)
    thread.join(timeout=120)
    assert refused.status_code == 503, refused.text
    message = refused.json()["error"]["message"]
    assert message.startswith("no room within the memory budget: beta (draft k=2) needs "), \
        message
    assert "GiB held by servers busy with requests; the budget is" in message
    assert "still starting" not in message
    assert stop(gw) == 0

    small = start(env, tmp_path / "three", "alpha", "--memory", "0.01")
    gateways.append(small)
    refused = httpx.post(f"{small.url}/v1/chat/completions", json=body(False, 4, "alpha"),
                         timeout=60)
    assert refused.status_code == 507, refused.text
    assert "more than the whole budget of 0.01 GiB" in refused.json()["error"]["message"]
    assert stop(small) == 0
