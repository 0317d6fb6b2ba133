"""The gateway for real: `specctl gateway` in a subprocess, real llama-server engines on the
testbed models (SmolLM2 135M, its own draft: starts in a second), real HTTP through the openai
client and httpx. Each test checks that no process it started is left behind."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import openai
import psutil
import pytest

from specctl.orchestrator.app import App
from specctl.orchestrator.gateway.engines import footprint
from specctl.orchestrator.measure.prompts import suites
from specctl.orchestrator.measure.results import tuned
from specctl.orchestrator.runtime.servers import free_port
from tests.test_faults import ours

pytestmark = pytest.mark.server
SMOL = 'target = "testbed:smollm2-135m"\ndraft = "testbed:smollm2-135m"\n'
KEY = "sk-gateway-test-7f3a9c"
PROMPT = "Count from one to one hundred in words, separated by commas."


@dataclass
class Gateway:
    proc: subprocess.Popen[bytes]
    url: str
    log: Path
    env: dict[str, str]

    def status(self) -> dict[str, Any]:
        reply = httpx.get(f"{self.url}/gateway/status", headers=self.auth(), timeout=10)
        reply.raise_for_status()
        found: dict[str, Any] = reply.json()
        return found

    def engines(self) -> dict[str, dict[str, Any]]:
        return {e["model"]: e for e in self.status()["engines"] if e["state"] != "draining"}

    @property
    def key(self) -> str | None:
        """The last of the gateway's keys (the variable may hold several)."""
        keys = self.env.get("SPECCTL_GATEWAY_API_KEY")
        return keys.split(",")[-1] if keys else None

    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}"} if self.key else {}

    def client(self) -> openai.OpenAI:
        return openai.OpenAI(base_url=f"{self.url}/v1", max_retries=0, timeout=120,
                             api_key=self.key or "none")

    def metrics(self) -> str:
        return httpx.get(f"{self.url}/metrics", headers=self.auth(), timeout=10).text


@pytest.fixture
def env(tmp_path: Path) -> Iterator[dict[str, str]]:
    e = {**os.environ, "SPECCTL_STATE_DIR": str(tmp_path / "state"),
         "SPECCTL_CONFIG_DIR": str(tmp_path / "config"), "SPECCTL_STOP_GRACE": "3",
         "SPECCTL_HEALTH_TIMEOUT": "60"}
    e.pop("SPECCTL_GATEWAY_API_KEY", None)
    (tmp_path / "config" / "profiles").mkdir(parents=True)
    yield e
    time.sleep(0.2)
    leftover = ours(e["SPECCTL_STATE_DIR"])
    for pid in leftover:
        with_kill(pid)
    assert not leftover, f"processes left behind: {leftover}"


def with_kill(pid: int) -> None:
    with contextlib.suppress(OSError):
        os.killpg(pid, signal.SIGKILL)


def profile(env: dict[str, str], name: str, text: str) -> None:
    (Path(env["SPECCTL_CONFIG_DIR"]) / "profiles" / f"{name}.toml").write_text(text)


def start(env: dict[str, str], tmp_path: Path, *args: str, idle: str = "off") -> Gateway:
    port = free_port()
    log = tmp_path / "gateway.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "specctl", "gateway", *args, "--port",
                                 str(port), "--idle-tune", idle], env=env, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
    gw = Gateway(proc, f"http://127.0.0.1:{port}", log, env)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        assert proc.poll() is None, log.read_text()
        try:
            if httpx.get(f"{gw.url}/health", timeout=2).status_code == 200:
                return gw
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise AssertionError(f"the gateway did not answer: {log.read_text()}")


def stop(gw: Gateway) -> int:
    """SIGTERM, as a service manager stops it: every engine it started stops too."""
    gw.proc.send_signal(signal.SIGTERM)
    return gw.proc.wait(timeout=60)


@pytest.fixture
def gateways() -> Iterator[list[Gateway]]:
    started: list[Gateway] = []
    yield started
    for gw in started:
        if gw.proc.poll() is None:
            stop(gw)


def chat(gw: Gateway, model: str, max_tokens: int = 8) -> str:
    reply = gw.client().chat.completions.create(
        model=model, messages=[{"role": "user", "content": PROMPT}], max_tokens=max_tokens,
        temperature=0)
    return reply.choices[0].message.content or ""


def wait_for(check: Any, timeout: float, what: str, every: float = 0.25) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(every)
    raise AssertionError(f"not within {timeout} s: {what}")


def listening(port: int) -> bool:
    return any(c.laddr and c.laddr.port == port and c.status == psutil.CONN_LISTEN
               for c in psutil.net_connections("tcp"))


def test_two_profiles_behind_one_port_start_on_demand_stop_idle_and_make_room(
        env: dict[str, str], tmp_path: Path, gateways: list[Gateway],
        monkeypatch: pytest.MonkeyPatch) -> None:
    profile(env, "alpha", SMOL + "k = 3\n[server]\ncontext = 1024\n")
    profile(env, "beta", SMOL + "k = 2\n[server]\ncontext = 1024\n")
    profile(env, "gamma", SMOL + "k = 4\n[server]\ncontext = 2048\n[gateway]\nkeep_alive = 4\n")
    for key in ("SPECCTL_STATE_DIR", "SPECCTL_CONFIG_DIR"):
        monkeypatch.setenv(key, env[key])
    app = App.from_env()
    plans = {n: app.resolve(n) for n in ("alpha", "beta", "gamma")}
    shares = {n: r.backend.shares_weights(r.plan) for n, r in plans.items()}

    def held(*names: str) -> int:
        return footprint([(plans[n].plan, shares[n]) for n in names])

    # room for any two of them, not for all three
    budget = max(held("alpha", "beta"), held("alpha", "gamma"), held("beta", "gamma")) + 1
    assert held("alpha", "beta", "gamma") > budget
    gw = start(env, tmp_path, "alpha", "beta", "gamma", "--memory", f"{budget / 2**30:.9f}")
    gateways.append(gw)

    listed = {m.id for m in gw.client().models.list()}
    assert listed == {"alpha", "beta", "gamma"}
    assert gw.engines() == {}  # nothing starts before it is asked for

    assert chat(gw, "beta")  # the second profile starts on its first request
    assert set(gw.engines()) == {"beta"}
    assert chat(gw, "alpha")
    assert set(gw.engines()) == {"alpha", "beta"}
    assert chat(gw, "beta")  # alpha is now the least recently used
    assert chat(gw, "gamma")  # no room for three: alpha leaves
    assert set(gw.engines()) == {"beta", "gamma"}
    gamma_port = gw.engines()["gamma"]["port"]
    wait_for(lambda: "gamma" not in gw.engines(), 30, "gamma stops after its 4 s keep-alive")
    wait_for(lambda: 'reason="keep-alive"' in gw.metrics(), 10, "its stop is counted")
    assert not listening(gamma_port)
    assert gw.status()["budget_bytes"] == pytest.approx(budget, abs=2)
    text = gw.metrics()
    assert 'specctl_gateway_engine_stops_total{model="alpha",reason="memory",setting="draft k=3"}' \
        in text
    ports = [e["port"] for e in gw.engines().values()]
    assert stop(gw) == 0
    assert not any(listening(p) for p in ports)
    log = gw.log.read_text()
    assert "stopping alpha (draft k=3), the least recently used" in log
    assert "stopped gamma (draft k=4): keep-alive" in log


def test_32_concurrent_streams_all_complete(env: dict[str, str], tmp_path: Path,
                                            gateways: list[Gateway]) -> None:
    profile(env, "smol", SMOL + "k = 3\n[server]\ncontext = 2048\nparallel = 4\n")
    gw = start(env, tmp_path, "smol")
    gateways.append(gw)

    async def one(client: openai.AsyncOpenAI, i: int) -> tuple[str, str | None]:
        stream = await client.chat.completions.create(
            model="smol", messages=[{"role": "user", "content": f"{PROMPT} ({i})"}],
            max_tokens=16, temperature=0, stream=True)
        text, finish = "", None
        async for chunk in stream:
            if chunk.choices:
                text += chunk.choices[0].delta.content or ""
                finish = chunk.choices[0].finish_reason or finish
        return text, finish

    async def all_of() -> list[tuple[str, str | None] | BaseException]:
        client = openai.AsyncOpenAI(base_url=f"{gw.url}/v1", api_key="none", max_retries=0,
                                    timeout=300)
        return await asyncio.gather(*(one(client, i) for i in range(32)),
                                    return_exceptions=True)

    results = asyncio.run(all_of())
    failed = [r for r in results if isinstance(r, BaseException)]
    assert not failed, failed[:3]
    assert all(text and finish in ("length", "stop") for text, finish in results)  # type: ignore[misc]
    text = gw.metrics()
    assert 'specctl_gateway_requests_total{model="smol",setting="draft k=3",status="200"} 32.0' \
        in text
    assert 'specctl_gateway_time_to_first_token_seconds_count{model="smol",setting="draft k=3"} ' \
           '32.0' in text
    drafted = metric(text, "specctl_gateway_draft_tokens_total")
    accepted = metric(text, "specctl_gateway_draft_accepted_tokens_total")
    assert drafted > 0 and 0 < accepted <= drafted  # SmolLM2 drafting for itself


def metric(text: str, name: str) -> float:
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith(name + "{"))


def served(env: dict[str, str], tmp_path: Path, gateways: list[Gateway], context: int) -> Gateway:
    """A gateway serving one SmolLM2 profile, `smol`, already started by a first request."""
    profile(env, "smol", SMOL + f"k = 3\n[server]\ncontext = {context}\n")
    gw = start(env, tmp_path, "smol")
    gateways.append(gw)
    assert chat(gw, "smol")
    return gw


def engine_pid(port: int) -> int:
    for conn in psutil.net_connections("tcp"):
        if conn.laddr and conn.laddr.port == port and conn.status == psutil.CONN_LISTEN:
            assert conn.pid is not None
            return conn.pid
    raise AssertionError(f"nothing listens on {port}")


def test_an_engine_killed_mid_stream_gives_an_error_event_and_the_next_request_works(
        env: dict[str, str], tmp_path: Path, gateways: list[Gateway]) -> None:
    gw = served(env, tmp_path, gateways, 2048)
    pid = engine_pid(gw.engines()["smol"]["port"])
    stream = gw.client().chat.completions.create(
        model="smol", messages=[{"role": "user", "content": PROMPT}], max_tokens=1500,
        temperature=0, stream=True)
    got = 0
    with pytest.raises(openai.APIError, match="failed mid-stream"):
        for _chunk in stream:
            got += 1
            if got == 3:
                os.kill(pid, signal.SIGKILL)
    assert got >= 3
    assert chat(gw, "smol")  # started again
    assert stop(gw) == 0
    assert gw.log.read_text().count("starting smol (draft k=3)") == 2


def test_a_client_that_goes_away_cancels_the_engine_request(
        env: dict[str, str], tmp_path: Path, gateways: list[Gateway]) -> None:
    gw = served(env, tmp_path, gateways, 4096)
    port = gw.engines()["smol"]["port"]

    def busy() -> bool:
        slots = httpx.get(f"http://127.0.0.1:{port}/slots", timeout=5).json()
        return any(s.get("is_processing") for s in slots)

    for stream in (True, False):
        body = json.dumps({"model": "smol", "messages": [{"role": "user", "content": PROMPT}],
                           "max_tokens": 3000, "temperature": 0, "stream": stream,
                           "ignore_eos": True}).encode()
        with socket.create_connection(("127.0.0.1", int(gw.url.rsplit(":", 1)[1]))) as sock:
            sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                         b"Content-Type: application/json\r\n"
                         b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
            wait_for(busy, 30, "the engine works on the request")
            if stream:
                assert sock.recv(100).startswith(b"HTTP/1.1 200")
        # the client went away: the engine stops generating (3000 tokens would take minutes).
        # Asked about its slots every 0.25 s, llama-server (0c1e570) does not notice a closed
        # connection at all (measured without the gateway too); once a second, within 2 s.
        wait_for(lambda: not busy(), 15, f"the engine drops the request (stream={stream})",
                 every=1.0)


def test_a_tune_saved_while_a_client_streams_swaps_without_failing_it(
        env: dict[str, str], tmp_path: Path, gateways: list[Gateway],
        monkeypatch: pytest.MonkeyPatch) -> None:
    profile(env, "smol", SMOL + 'k = "auto"\n[server]\ncontext = 4096\n'
            "[gateway]\nroute = false\n")  # one server, swapped for the tuned one
    gw = start(env, tmp_path, "smol")
    gateways.append(gw)
    assert chat(gw, "smol")
    before = gw.engines()["smol"]
    assert before["k_source"] == "cost model"
    for key in ("SPECCTL_STATE_DIR", "SPECCTL_CONFIG_DIR"):
        monkeypatch.setenv(key, env[key])
    app = App.from_env()
    got = app.resolve("smol")
    new_k = 7 if got.plan.k != 7 else 6

    stream = gw.client().chat.completions.create(
        model="smol", messages=[{"role": "user", "content": PROMPT}], max_tokens=400,
        temperature=0, stream=True, extra_body={"ignore_eos": True})
    pieces, finish, saved = 0, None, False
    for chunk in stream:
        pieces += 1
        if chunk.choices:
            finish = chunk.choices[0].finish_reason or finish
        if pieces == 5 and not saved:  # `tune` saves while the stream runs
            tuned.save(app.dirs.tuned, tuned.Result(
                profile="smol", method="draft", k=new_k, p_min=None, speedup=1.3, low=1.2,
                high=1.4, summary="a test result (surely faster: the gateway serves it)",
                alpha=None, cost=None, verify={}, baseline_tps=1.0,
                key=app.tuned_key(got.plan, got.installed)))
            saved = True
    assert finish == "length" and pieces > 300  # the stream ran to its end

    def swapped() -> bool:
        now = gw.engines().get("smol")
        return bool(now and now["state"] == "ready" and now["setting"] == f"draft k={new_k}")

    wait_for(swapped, 60, "the tuned setting serves")
    assert chat(gw, "smol")
    text = gw.metrics()
    assert f'specctl_gateway_requests_total{{model="smol",setting="draft k={new_k}",' \
           'status="200"} 1.0' in text
    assert 'specctl_gateway_swaps_total{model="smol"} 1.0' in text
    assert 'status="502"' not in text
    wait_for(lambda: len(gw.status()["engines"]) == 1, 30, "the old setting stops")
    assert not listening(before["port"])


def test_keys_are_required_and_never_shown(env: dict[str, str], tmp_path: Path,
                                           gateways: list[Gateway]) -> None:
    profile(env, "smol", SMOL + "k = 3\n[server]\ncontext = 1024\n")
    env["SPECCTL_GATEWAY_API_KEY"] = f"old-key,{KEY}"
    gw = start(env, tmp_path, "smol")
    gateways.append(gw)
    body = {"model": "smol", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": KEY}):
        for method, path in (("GET", "/v1/models"), ("POST", "/v1/chat/completions"),
                             ("GET", "/metrics")):
            reply = httpx.request(method, f"{gw.url}{path}", json=body, headers=headers,
                                  timeout=30)
            assert reply.status_code == 401, (headers, path)
            assert "API key" in reply.json()["error"]["message"]
    assert httpx.get(f"{gw.url}/health", timeout=5).status_code == 200
    assert chat(gw, "smol")  # the openai client sends the key
    text = gw.metrics()
    assert "specctl_gateway_requests_total" in text and KEY not in text
    assert stop(gw) == 0
    logs = [gw.log, *Path(env["SPECCTL_STATE_DIR"], "logs").glob("*")]
    assert not any(KEY in p.read_text(errors="replace") for p in logs)


def test_unknown_models_and_bad_bodies_are_clear_errors(env: dict[str, str], tmp_path: Path,
                                                        gateways: list[Gateway]) -> None:
    profile(env, "smol", SMOL + "k = 3\n[server]\ncontext = 1024\n")
    gw = start(env, tmp_path, "smol")
    gateways.append(gw)
    with pytest.raises(openai.NotFoundError, match="'nope' is not served here; /v1/models "
                       "lists smol"):
        chat(gw, "nope")
    reply = httpx.post(f"{gw.url}/v1/chat/completions", content=b"{not json", timeout=10)
    assert reply.status_code == 400 and "not JSON" in reply.json()["error"]["message"]
    reply = httpx.post(f"{gw.url}/v1/chat/completions", json={"messages": []}, timeout=10)
    # no model: the one model served is meant (as llama-server takes it); its empty messages
    assert reply.status_code == 400 and '"messages"' in reply.json()["error"]["message"]
    reply = httpx.post(f"{gw.url}/v1/chat/completions", json={"model": 3}, timeout=10)
    assert reply.status_code == 400 and '"model"' in reply.json()["error"]["message"]
    assert "nope" not in gw.metrics()  # a name nobody serves never becomes a label


def test_a_request_past_the_start_bound_gets_503_with_retry_after(
        env: dict[str, str], tmp_path: Path, gateways: list[Gateway]) -> None:
    profile(env, "qwen", 'target = "testbed:qwen-1.5b-q4"\ndraft = "testbed:qwen-0.5b-q4"\n'
            "k = 3\n[server]\ncontext = 1024\n")
    gw = start(env, tmp_path, "qwen", "--start-wait", "0")
    gateways.append(gw)
    body = {"model": "qwen", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    reply = httpx.post(f"{gw.url}/v1/chat/completions", json=body, timeout=30)
    assert reply.status_code == 503, reply.text
    assert reply.headers["retry-after"] == "10"
    assert "still starting" in reply.json()["error"]["message"]
    wait_for(lambda: gw.engines().get("qwen", {}).get("state") == "ready", 120, "qwen starts")
    assert httpx.post(f"{gw.url}/v1/chat/completions", json=body, timeout=120).status_code == 200


def test_refusals_are_one_line(env: dict[str, str], tmp_path: Path) -> None:
    profile(env, "smol", SMOL + "k = 3\n")
    run = [sys.executable, "-m", "specctl", "gateway"]
    done = subprocess.run([*run, "smol", "--host", "0.0.0.0", "--port", str(free_port())],
                          env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode != 0 and "export SPECCTL_GATEWAY_API_KEY" in done.stderr
    done = subprocess.run([*run, "smoll", "--port", str(free_port())], env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode != 0 and "smoll" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    with Listener() as port:
        done = subprocess.run([*run, "smol", "--port", str(port)], env=env,
                              capture_output=True, text=True, timeout=60)
    assert done.returncode != 0 and f"port {port}" in done.stderr and "in use" in done.stderr


class Listener:
    """A port something else listens on."""

    def __enter__(self) -> int:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen()
        return int(self.sock.getsockname()[1])

    def __exit__(self, *exc: object) -> None:
        self.sock.close()


def test_metrics_names_match_the_dashboard() -> None:
    """Every metric the shipped Grafana dashboard queries is one the gateway exports."""
    from specctl.orchestrator.gateway.metrics import Metrics

    exported = {m.name for m in Metrics().registry.collect()}
    exported |= {f"{n}_{s}" for n in exported for s in ("total", "bucket", "count", "sum")}
    dashboard = json.loads((Path(__file__).resolve().parent.parent / "dashboards" /
                            "specctl-gateway.json").read_text())
    queried = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    assert queried
    import re

    for expr in queried:
        for name in re.findall(r"specctl_gateway_[a-z_]+", expr):
            assert name in exported, (name, expr)


def test_an_untuned_profile_is_tuned_while_idle_and_a_request_stops_the_tune(
        env: dict[str, str], tmp_path: Path, gateways: list[Gateway]) -> None:
    profile(env, "auto", SMOL + 'k = "auto"\n[server]\ncontext = 1024\n')
    profile(env, "optout", SMOL + 'k = "auto"\n[server]\ncontext = 1024\n'
            "[gateway]\ntune_when_idle = false\n")
    gw = start(env, tmp_path, "optout", "auto", idle="1s")
    gateways.append(gw)
    log = gw.log
    assert chat(gw, "optout")
    time.sleep(3)  # idle, but the one served model opted out
    assert "tuning" not in log.read_text()
    assert chat(gw, "auto")
    wait_for(lambda: "idle: tuning auto in the background" in log.read_text(), 30,
             "the idle gateway tunes the untuned profile")

    def tuning() -> list[psutil.Process]:
        return [p for p in psutil.process_iter(["cmdline"])
                if "tune" in (p.info["cmdline"] or []) and "auto" in (p.info["cmdline"] or [])]

    wait_for(lambda: bool(tuning()), 30, "a tune runs")
    tune = tuning()[0]
    assert chat(gw, "auto")  # a request: the tune stops, serving comes first
    assert "request: stopping the background tune of auto" in log.read_text()
    assert not tune.is_running()
    assert stop(gw) == 0  # (the env fixture checks that no tune server is left)


def _ask(gw: Gateway, text: str, max_tokens: int = 8) -> str:
    reply = gw.client().chat.completions.create(
        model="smol", messages=[{"role": "user", "content": text}], max_tokens=max_tokens,
        temperature=0)
    return reply.choices[0].message.content or ""


def _served_by(gw: Gateway) -> dict[str, float]:
    """Requests answered 200, by setting (the gateway's metrics)."""
    out = {}
    for line in gw.metrics().splitlines():
        if line.startswith('specctl_gateway_requests_total{model="smol"') and \
                'status="200"' in line:
            setting = line.split('setting="')[1].split('"')[0]
            out[setting] = float(line.rsplit(" ", 1)[1])
    return out


def test_each_kind_goes_to_its_setting_a_killed_one_hands_over_a_slow_one_drops_its_draft(
        env: dict[str, str], tmp_path: Path, gateways: list[Gateway],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A saved tune whose per-category winners differ (written here as `tune` saves them: code
    with the draft at k=4, summarize and edit with n-gram, chat without a draft): the gateway
    serves each kind from its own server, the weights mapped once; a killed server's kind goes
    to another setting while it starts again, and no request fails. `specctl status` shows the
    route and, per kind, what the served requests chose. (Exploring is off: each request's
    server is tune's; what served requests change is tests/test_learned.py.)"""
    profile(env, "smol", SMOL + 'k = "auto"\n[server]\ncontext = 1024\n'
            '[gateway]\nexplore = false\n')
    for key in ("SPECCTL_STATE_DIR", "SPECCTL_CONFIG_DIR"):
        monkeypatch.setenv(key, env[key])
    app = App.from_env()
    written = app.resolve("smol", use_tuned=False)

    def won(cat: str, method: str, k: int, base: float) -> tuned.Winner:
        return tuned.Winner(category=cat, label=f"{method} k={k}", method=method,
                            k=k, p_min=None, speedup=1.0 if method == "none" else 1.5,
                            baseline_tps=base)

    tuned.save(app.dirs.tuned, tuned.Result(
        profile="smol", method="draft", k=4, p_min=None, speedup=1.3, low=1.2, high=1.4,
        summary="a test result", alpha=None, cost=None, verify={}, baseline_tps=1.0,
        key=app.tuned_key(written.plan, written.installed),
        winners=[won("code", "draft", 4, 1e5), won("summarize", "ngram", 8, 1.0),
                 won("edit", "ngram", 8, 1.0), won("chat", "none", 0, 1.0)]))
    gw = start(env, tmp_path, "smol")
    gateways.append(gw)
    asks = {kind: suites.suite_texts(kind)[6] for kind in ("chat", "code", "summarize")}
    for text in asks.values():  # each starts its kind's server (served meanwhile by any up)
        assert _ask(gw, text)

    def ready() -> set[str]:
        return {e["setting"] for e in gw.status()["engines"] if e["state"] == "ready"}

    wait_for(lambda: ready() == {"off", "draft k=4", "ngram k=8"}, 60, "the route's servers")
    routes = gw.status()["routes"]["smol"]
    assert routes["route"].startswith("summarize, edit -> ngram k=8; code -> draft k=4; "
                                      "chat -> off"), routes
    before = _served_by(gw)
    for text in asks.values():
        assert _ask(gw, text)
    after = _served_by(gw)
    assert {s: after[s] - before.get(s, 0.0) for s in after} == {
        "off": 1.0, "draft k=4": 1.0, "ngram k=8": 1.0}, (before, after)

    up = {e["setting"]: e for e in gw.status()["engines"]}
    os.kill(engine_pid(up["ngram k=8"]["port"]), signal.SIGKILL)
    assert _ask(gw, asks["summarize"])  # at once: the gateway may not have seen it die yet
    assert _served_by(gw)["ngram k=8"] == after["ngram k=8"]  # another setting took it
    for _ in range(2):  # and on, while it starts again
        assert _ask(gw, asks["summarize"])
    assert sum(_served_by(gw).values()) == sum(after.values()) + 3
    assert 'status="502"' not in gw.metrics()
    wait_for(lambda: "ngram k=8" in ready(), 60, "the killed setting starts again")
    again = _served_by(gw)["ngram k=8"]
    assert _ask(gw, asks["summarize"])
    assert _served_by(gw)["ngram k=8"] == again + 1  # its own setting once up

    kinds = {(r["kind"], r["load"]): r for r in gw.status()["routes"]["smol"]["kinds"]}
    assert kinds[("code", "1")]["setting"] == "draft k=4", kinds
    assert "tune's figure for code" in kinds[("code", "1")]["why"], kinds

    state_file = Path(env["SPECCTL_STATE_DIR"]) / f"gateway-{gw.url.rsplit(':', 1)[1]}.json"
    wait_for(lambda: "summarize, edit -> ngram k=8" in state_file.read_text(), 10,
             "the gateway publishes its routes")
    shown = subprocess.run([sys.executable, "-m", "specctl", "status"], env=env,
                           capture_output=True, text=True, timeout=60)
    assert shown.returncode == 0, shown.stderr
    assert "summarize, edit -> ngram k=8" in shown.stdout and "tune's figure" in shown.stdout
    assert stop(gw) == 0
    assert not state_file.exists()


def test_a_long_prompt_with_a_short_answer_goes_where_prefill_is_cheapest(
        env: dict[str, str], tmp_path: Path, gateways: list[Gateway],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A saved tune (written here through the real model, figures made up and valid) where the
    draft at k=4 wins every kind and n-gram prefills 30% cheaper: the route keeps the draft for
    every kind and n-gram for long prompts. A question over a 1,100-token document answered in
    16 tokens is served by the n-gram server, a short code request of 64 tokens by the draft's
    (the real engines' own request counts, by setting); `/gateway/status` says the rule."""

    profile(env, "smol", SMOL + 'k = "auto"\n[server]\ncontext = 4096\n')
    for key in ("SPECCTL_STATE_DIR", "SPECCTL_CONFIG_DIR"):
        monkeypatch.setenv(key, env[key])
    app = App.from_env()
    written = app.resolve("smol", use_tuned=False)
    cats = ("code", "multiturn", "docqa")

    def timing(label: str, method: str, k: int, f: float, d: float) -> tuned.Timing:
        return tuned.Timing(label=label, method=method, k=k, p_min=None, prefill=f,
                            decode={c: d for c in cats})

    tuned.save(app.dirs.tuned, tuned.Result(
        profile="smol", method="draft", k=4, p_min=None, speedup=1.3, low=1.2, high=1.4,
        summary="a test result", alpha=None, cost=None, verify={}, baseline_tps=8.0,
        key=app.tuned_key(written.plan, written.installed), categories=dict.fromkeys(cats, 1.3),
        winners=[tuned.Winner(category=c, label="draft k=4", method="draft", k=4, p_min=None,
                              speedup=1.3, low=1.2, high=1.4, baseline_tps=8.0) for c in cats],
        timings=[timing("baseline", "none", 0, 0.01, 0.125),
                 timing("draft k=4", "draft", 4, 0.014, 0.08),
                 timing("ngram k=8", "ngram", 8, 0.01, 0.11)],
        shapes={"code": tuned.Shape(kind="code", answer=64, ran_out=True),
                "multiturn": tuned.Shape(kind="chat", answer=48),
                "docqa": tuned.Shape(kind="docqa", answer=32, chars_per_token=4.0)}))
    gw = start(env, tmp_path, "smol")
    gateways.append(gw)
    doc = suites.suite_texts("docqa")[6]  # held out: 4,469 characters
    code = suites.suite_texts("code")[6]
    assert len(doc) > 4000
    for text, tokens in ((doc, 16), (code, 64)):  # each starts its server
        assert _ask(gw, text, tokens)

    def ready() -> set[str]:
        return {e["setting"] for e in gw.status()["engines"] if e["state"] == "ready"}

    wait_for(lambda: ready() == {"draft k=4", "ngram k=8"}, 60, "the route's servers")
    route = gw.status()["routes"]["smol"]["route"]
    assert route.startswith("code, chat, docqa -> draft k=4; code prompts over ~"), route
    assert "answered in under ~64 -> ngram k=8; learned from what is served among " in route, \
        route
    for text, tokens, setting in ((doc, 16, "ngram k=8"), (code, 64, "draft k=4"),
                                  (doc, 16, "ngram k=8")):
        before = _served_by(gw)
        assert _ask(gw, text, tokens)
        after = _served_by(gw)
        assert {s: after[s] - before.get(s, 0.0) for s in after if after[s] != before.get(s)} \
            == {setting: 1.0}, (text[:40], before, after)
    assert stop(gw) == 0


def test_kept_traffic_holds_the_messages_never_a_key_or_header_and_forget_leaves_nothing(
        env: dict[str, str], tmp_path: Path, gateways: list[Gateway]) -> None:
    """`[gateway] keep_traffic`: requests sent with the gateway's key, a secret-looking custom
    header and a secret in fields the allow-list does not name (an unknown one, `user`) are
    kept as their messages, kind and token counts alone; `specctl traffic` summarises them and
    `specctl traffic forget` leaves no file in the state dir holding a prompt."""
    profile(env, "keeper", SMOL + "k = 3\n[server]\ncontext = 1024\n[gateway]\n"
            "keep_traffic = 50\n")
    env["SPECCTL_GATEWAY_API_KEY"] = KEY
    gw = start(env, tmp_path, "keeper")
    gateways.append(gw)
    in_body, in_header = "sk-body-SECRET-5b1d7e", "hdr-SECRET-93c0aa"
    asks = [f"Name a colour of the rainbow, request {n} of the kept-traffic test." for n in
            range(4)]
    client = openai.OpenAI(base_url=f"{gw.url}/v1", api_key=KEY, max_retries=0, timeout=120,
                           default_headers={"X-Internal-Token": in_header})
    client.chat.completions.create(  # the whole reply: usage counts the prompt
        model="keeper", messages=[{"role": "system", "content": "Be brief."},
                                  {"role": "user", "content": asks[0]}],
        max_tokens=6, temperature=0, user=in_body, extra_body={"session_secret": in_body})
    stream = client.chat.completions.create(  # streamed, no usage asked: the engine's count
        model="keeper", messages=[{"role": "user", "content": asks[1]}], max_tokens=6,
        stream=True, extra_body={"api_key": in_body})
    assert [c for c in stream]
    client.completions.create(model="keeper", prompt=asks[2], max_tokens=6)
    reply = httpx.post(f"{gw.url}/v1/chat/completions", timeout=120, json={
        "model": "keeper", "messages": [{"role": "user", "content": asks[3]}], "max_tokens": 6,
        "metadata": {"authorization": f"Bearer {in_body}"}},
        headers={"Authorization": f"Bearer {KEY}", "Cookie": f"session={in_header}",
                 "X-Forwarded-For": "203.0.113.9"})
    assert reply.status_code == 200, reply.text
    refused = httpx.post(f"{gw.url}/v1/chat/completions", timeout=30, json={
        "model": "keeper", "messages": [{"role": "user", "content": "not kept: no key"}]})
    assert refused.status_code == 401

    path = Path(env["SPECCTL_STATE_DIR"]) / "traffic" / "keeper.jsonl"
    wait_for(lambda: path.exists() and len(path.read_text().splitlines()) == 5, 30,
             "four requests kept (and the head)")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    raw = path.read_text()
    for secret in (KEY, in_body, in_header, "Bearer", "203.0.113.9", "127.0.0.1", "X-Internal",
                   "not kept: no key"):
        assert secret not in raw, secret
    rows = [json.loads(line) for line in raw.splitlines()[1:]]
    assert [[m["content"] for m in r["messages"]] for r in rows] == [
        ["Be brief.", asks[0]], [asks[1]], [asks[2]], [asks[3]]]
    for r in rows:
        assert set(r) == {"at", "kind", "tokens_in", "tokens_out", "messages", "params"}
        assert r["kind"] and r["tokens_in"] > 10 and 0 < r["tokens_out"] <= 6, r

    shown = subprocess.run([sys.executable, "-m", "specctl", "traffic", "keeper", "--json"],
                           env=env, capture_output=True, text=True, timeout=60)
    assert shown.returncode == 0, shown.stderr
    (summary,) = json.loads(shown.stdout)
    assert summary["requests"] == 4 and sum(k["requests"] for k in summary["kinds"].values()) == 4
    assert summary["tokens_in"]["median"] > 10 and summary["enough_for_idle_tune"] is False
    assert stop(gw) == 0
    gone = subprocess.run([sys.executable, "-m", "specctl", "traffic", "forget", "keeper"],
                          env=env, capture_output=True, text=True, timeout=60)
    assert gone.returncode == 0 and "keeper.jsonl" in gone.stdout, gone.stderr
    state = Path(env["SPECCTL_STATE_DIR"])
    holding = [p for p in state.rglob("*") if p.is_file() and any(
        a.encode() in p.read_bytes() for a in asks)]
    assert holding == [] and not (state / "traffic").exists()
