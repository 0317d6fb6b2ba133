"""Requests timed as the client sees them, on a real llama-server (SmolLM2-135M drafting for
itself: fast, and it drafts): streamed, with the time to the first token, the whole request's
time, the prompt's tokens and the server's own decode timing and draft counters from the final
chunk; a conversation's later turn carries the server's own earlier reply (what the server
counted as the prompt says so); a prompt longer than the context is refused in one line with
the figures, never truncated.

Needs the provisioned build and models (`specctl backend install llama.cpp`,
`specctl models testbed`)."""

from __future__ import annotations

import json
from pathlib import Path

import psutil
import pytest

from specctl.orchestrator.app import App, Resolved
from specctl.orchestrator.measure.lab import engine
from specctl.orchestrator.measure.prompts.workload import Prompt
from specctl.orchestrator.runtime import client
from tests.cli import specctl

pytestmark = pytest.mark.server

SMOL = 'target = "testbed:smollm2-135m"\ndraft = "testbed:smollm2-135m"\nk = 3\n'


def ours(tmp_path: Path) -> list[int]:
    """The llama-servers this test's state dir started (other sessions run their own)."""
    out = []
    for proc in psutil.process_iter(["name"]):
        try:
            if "llama-server" in (proc.info["name"] or "") and proc.environ().get(
                    "SPECCTL_STATE_DIR") == str(tmp_path / "state"):
                out.append(proc.pid)
        except psutil.Error:
            continue
    return out


@pytest.fixture
def smol(tmp_path: Path) -> tuple[Path, Resolved]:
    profile = tmp_path / "smol.toml"
    profile.write_text(SMOL + "[server]\ncontext = 1024\n")
    resolved = App.from_env().resolve(str(profile), use_tuned=False)
    if resolved.installed.assumed:
        pytest.fail("llama.cpp is not installed here: `specctl backend install llama.cpp`")
    return profile, resolved


def test_a_streamed_request_is_timed_as_the_client_sees_it(smol: tuple[Path, Resolved],
                                                          tmp_path: Path) -> None:
    _, got = smol
    with engine.serve(got.plan, got.backend, got.installed, tmp_path, "stream") as srv:
        asked = srv.ask(Prompt("chat", "Write four lines about the sea."), 32)
        assert len(ours(tmp_path)) == 1  # what the last test's check sees
    assert not ours(tmp_path)
    reply = asked.reply
    assert reply.tokens > 4 and reply.text
    assert 0 < reply.ttft_s < reply.wall_s
    assert reply.prompt_tokens > 8  # the template's and the message's
    assert reply.timed_by == "server" and reply.decode_tps > 0  # the final chunk's timings
    # the final chunk carries the request's own draft counters, as the adapter reads them
    per_request = got.backend.reply_stats(reply.raw)
    assert per_request is not None and per_request.drafted > 0
    assert asked.spec.drafted == per_request.drafted  # /metrics across the request agrees


def test_a_second_turn_carries_the_servers_own_first_reply(smol: tuple[Path, Resolved],
                                                          tmp_path: Path) -> None:
    _, got = smol
    talk = Prompt("chat", "Now say it again in fewer words.", ("Name three colours.",),
                  system="You answer briefly.")
    with engine.serve(got.plan, got.backend, got.installed, tmp_path, "talk") as srv:
        first, second = srv.converse(talk, 24)
        # the same conversation sent by hand, with and without the first reply: the server
        # counts the second turn's prompt as the one that carries it
        said = engine.conversation(talk.system, talk.turns, [first.text])
        silent = engine.conversation(talk.system, talk.turns, [""])
        with_reply = client.chat(srv.endpoint, said, 1, timing=got.backend.decode_timing)
        without = client.chat(srv.endpoint, silent, 1, timing=got.backend.decode_timing)
        asked = srv.ask(talk, 24)
    assert first.text and [m["role"] for m in said] == ["system", "user", "assistant", "user"]
    assert second.prompt_tokens == with_reply.prompt_tokens
    assert second.prompt_tokens - without.prompt_tokens >= first.tokens - 2
    assert second.prompt_tokens > first.prompt_tokens + first.tokens
    # one measured unit: its turns summed
    assert asked.turns == 2 and asked.reply.tokens > 0
    assert asked.reply.wall_s > asked.reply.ttft_s > 0


def test_a_prompt_longer_than_the_context_is_refused_in_one_line(
        smol: tuple[Path, Resolved], tmp_path: Path) -> None:
    profile, _ = smol
    prompts = tmp_path / "long.jsonl"
    words = " ".join(f"word{n}" for n in range(3000))
    prompts.write_text(json.dumps({"category": "docqa", "messages": [
        {"role": "user", "content": "Short question first?"}]}) + "\n" + json.dumps({
            "category": "docqa", "messages": [{"role": "user", "content": f"{words}\nCount "
                                               "the words."}]}) + "\n")
    done = specctl("bench", "--profile", str(profile), "--prompts", str(prompts),
                   "--repeats", "1", "--max-tokens", "8", "--budget", "2m")
    assert done.returncode == 2, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()
             and "bench [" not in line]  # progress lines, where stderr is no terminal
    assert len(lines) == 1, done.stderr
    assert "prompt docqa#2 does not fit the plan's context" in lines[0], lines
    assert "tokens where a request has 1024" in lines[0] and "Traceback" not in done.stderr
    assert not ours(tmp_path)  # every server it started is stopped
