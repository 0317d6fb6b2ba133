"""The real thing: `specctl up` serves the cpu-demo pair (Qwen2.5-Coder-1.5B F16 target, 0.5B
Q4_K_M draft) with a real llama-server on 127.0.0.1, and the official openai client talks to it.

Needs the provisioned build and models (.ci/run does `specctl backend install llamacpp` and
`specctl models testbed` first).
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from openai import OpenAI

from specctl.orchestrator.runtime import procs
from tests.cli import run_state, specctl, status_row

pytestmark = pytest.mark.server


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    base = tmp_path_factory.mktemp("server")
    return {**os.environ, "SPECCTL_STATE_DIR": str(base / "state"),
            "SPECCTL_CONFIG_DIR": str(base / "config"), "SPECCTL_SERVER__PORT": "18090"}


@pytest.fixture(scope="module")
def served(env: dict[str, str]) -> Iterator[dict[str, str]]:
    done = specctl("up", "--profile", "cpu-demo", "--no-provision", env=env)
    assert done.returncode == 0, done.stderr + done.stdout
    url = next(w for w in done.stdout.split() if w.startswith("http://"))
    yield {"url": url}
    specctl("down", "cpu-demo", env=env)


def complete(url: str, prompt: str = "Write a Python function that reverses a string.") -> str:
    client = OpenAI(base_url=url, api_key="unused", timeout=300)
    reply = client.chat.completions.create(
        model="cpu-demo", messages=[{"role": "user", "content": prompt}], max_tokens=32,
        temperature=0)
    return reply.choices[0].message.content or ""


def test_openai_client_gets_a_completion_and_drafts_are_accepted(
        served: dict[str, str], env: dict[str, str]) -> None:
    assert served["url"] == "http://127.0.0.1:18090/v1"
    text = complete(served["url"])
    assert len(text) > 10
    row = status_row(env, "cpu-demo")
    assert row["status"] == "running"
    assert isinstance(row["accepted"], int) and row["accepted"] > 0
    assert isinstance(row["drafted"], int) and row["drafted"] >= row["accepted"]
    plan = run_state(env, "cpu-demo")["plan"]
    assert isinstance(plan, dict)
    assert "--spec-type" in plan["argv"] and "-md" in plan["argv"]


def test_llamacpp_fits_the_placement_and_status_shows_what_it_chose(
        served: dict[str, str], env: dict[str, str]) -> None:
    """--fit is left to llama.cpp (the build has it): specctl sets the context it planned and
    no placement of its own; `status` reads back from the server's log what llama.cpp chose."""
    argv = run_state(env, "cpu-demo")["plan"]["argv"]
    assert argv[argv.index("--fit") + 1] == "on"
    slots = int(argv[argv.index("-np") + 1])
    assert slots == 4  # llama-server's own default, each slot its own 4096 tokens
    assert argv[argv.index("-c") + 1] == argv[argv.index("--fit-ctx") + 1] == str(4096 * slots)
    assert "-ngl" not in argv and "--tensor-split" not in argv
    chose = status_row(env, "cpu-demo")["placement"]
    # what llama.cpp says at its default verbosity, read from the main setting's server (up
    # serves cpu-demo through the router)
    assert chose == f"context 4096 x {slots} slots"  # per slot
    done = specctl("status", env={**env, "COLUMNS": "200"})
    assert f"cpu-demo: the engine chose {chose}" in done.stdout


def test_kill_9_of_the_server_is_restarted_and_serves_again(
        served: dict[str, str], env: dict[str, str]) -> None:
    before = run_state(env, "cpu-demo")
    pid = before["server_pid"]
    assert isinstance(pid, int)
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        now = run_state(env, "cpu-demo")
        if now["server_pid"] != pid and now["status"] == "running":
            break
        time.sleep(0.5)
    else:
        pytest.fail(f"not restarted: {run_state(env, 'cpu-demo')}")
    assert status_row(env, "cpu-demo")["restarts"] == 1
    assert len(complete(served["url"], "Say hello.")) > 0


def test_down_leaves_no_process_of_the_group(env: dict[str, str],
                                             served: dict[str, str]) -> None:
    state = run_state(env, "cpu-demo")
    pgid, sup = state["server_pgid"], state["supervisor_pid"]
    assert isinstance(pgid, int) and isinstance(sup, int)
    done = specctl("down", "cpu-demo", env=env)
    assert done.returncode == 0 and "stopped" in done.stdout
    assert procs.group_members(pgid) == []
    assert not psutil.pid_exists(sup) or psutil.Process(sup).status() == psutil.STATUS_ZOMBIE
    assert not (Path(env["SPECCTL_STATE_DIR"]) / "runs" / "cpu-demo.json").exists()
