"""Beyond one machine: llama.cpp RPC workers for real on 127.0.0.1, and multi-node vLLM plans."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from specctl.adapters import llamacpp_rpc
from specctl.adapters.vllm import check_parallel
from specctl.orchestrator.errors import ProfileError
from specctl.orchestrator.models.resolve import Resolver
from specctl.orchestrator.runtime.servers import free_port
from tests.cli import specctl


def test_worker_memory_is_read_from_llamacpp_device_lists() -> None:
    new = ("Available devices:\n  RPC0: 127.0.0.1:50552 (24105 MiB, 20000 MiB free)\n"
           "  RPC1: 10.0.0.2:50052 (81920 MiB, 80000 MiB free)\n")
    old = ("Available devices:\n"
           "  RPC[10.0.0.3:50052]: RPC[10.0.0.3:50052] (8192 MiB, 8000 MiB free)\n")
    workers = llamacpp_rpc.parse_devices(new)
    assert [w.address for w in workers] == ["127.0.0.1:50552", "10.0.0.2:50052"]
    assert workers[0].free_bytes == 20000 << 20
    assert llamacpp_rpc.split_by_memory(workers) == (0.2, 0.8)
    assert llamacpp_rpc.parse_devices(old)[0].address == "10.0.0.3:50052"


def _info(name: str) -> object:
    return Resolver(Path("/nonexistent"), Path("/nonexistent")).resolve(name, "BF16")


def test_vllm_parallel_checks() -> None:
    from specctl.orchestrator.contract.model import ModelInfo

    llama = _info("hf:meta-llama/Llama-3.1-70B-Instruct")
    small = _info("hf:meta-llama/Llama-3.2-1B-Instruct")
    assert isinstance(llama, ModelInfo) and isinstance(small, ModelInfo)
    notes = check_parallel(llama, small, 8, 2, 1, 16, 8)
    assert "64 heads divide by 8" in notes[0]
    with pytest.raises(ProfileError, match="does not divide"):
        check_parallel(llama, None, 6, 1, None, 8, 8)
    with pytest.raises(ProfileError, match="the cluster has 8"):
        check_parallel(llama, None, 8, 2, None, 8, 8)
    with pytest.raises(ProfileError, match="must be 1 or"):
        check_parallel(llama, small, 8, 1, 4, 8, 8)
    spans = check_parallel(llama, None, 16, 1, None, 16, 8)
    assert "spans nodes" in spans[-1]


def test_dgx2_deepseek_profile_plans_vllm_over_ray_from_any_machine() -> None:
    done = specctl("plan", "--profile", "dgx2-deepseek-r1", "--json")
    assert done.returncode == 0, done.stderr
    plan = json.loads(done.stdout)
    argv = plan["argv"]
    assert plan["backend"] == "vllm" and plan["hardware"].startswith("2x")
    pairs = dict(itertools.pairwise(argv))
    assert pairs["--tensor-parallel-size"] == "8" and pairs["--pipeline-parallel-size"] == "2"
    assert pairs["--distributed-executor-backend"] == "ray"
    assert json.loads(pairs["--speculative-config"]) == {"method": "mtp",
                                                         "num_speculative_tokens": 1}
    assert plan["memory"]["budget_gib"] > plan["memory"]["total_gib"] > 600
    assert plan["env"]["RAY_ADDRESS"] == "auto"


@pytest.mark.server
def test_cpu_demo_pair_across_two_rpc_workers(tmp_path: Path) -> None:
    env = {**os.environ, "SPECCTL_STATE_DIR": str(tmp_path / "state")}
    ports = [free_port(), free_port()]
    try:
        for port in ports:
            done = specctl("worker", "up", "--port", str(port), env=env)
            assert done.returncode == 0, done.stderr
        profile = tmp_path / "rpc.toml"
        server_port = free_port()
        profile.write_text(
            'target = "testbed:qwen-1.5b-f16"\ndraft = "testbed:qwen-0.5b-q4"\nk = 3\n'
            f'[server]\nport = {server_port}\ncontext = 1024\n[llamacpp]\n'
            f'rpc_workers = ["127.0.0.1:{ports[0]}", "127.0.0.1:{ports[1]}"]\n')
        plan = json.loads(specctl("plan", "--profile", str(profile), "--json", env=env).stdout)
        argv = plan["argv"]
        assert argv[argv.index("--rpc") + 1] == f"127.0.0.1:{ports[0]},127.0.0.1:{ports[1]}"
        assert argv[argv.index("-devd") + 1] == "none"  # the draft stays here
        assert any("split across 2 workers" in r for r in plan["reasons"])
        done = specctl("up", "--profile", str(profile), "--no-provision", env=env)
        assert done.returncode == 0, done.stderr
        reply = httpx.post(f"http://127.0.0.1:{server_port}/v1/chat/completions",
                              timeout=300, json={"messages": [{"role": "user", "content":
                                                               "Write hello world in Python"}],
                                                 "max_tokens": 16, "temperature": 0}).json()
        assert reply["timings"]["draft_n_accepted"] > 0
        for port in ports:  # both workers did take part
            log = (tmp_path / "state" / "logs" / f"worker-{port}.log").read_text()
            assert "Accepted client connection" in log
    finally:
        specctl("down", "--all", env=env)
    status = json.loads(specctl("status", "--json", env=env).stdout)
    assert status == []


@pytest.mark.server
def test_doctor_reports_a_real_local_ray_cluster() -> None:
    ray = Path(sys.executable).with_name("ray")
    port = free_port()
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
    started = subprocess.run([str(ray), "start", "--head", "--node-ip-address", "127.0.0.1",
                              "--port", str(port), "--num-cpus", "1", "--num-gpus", "0",
                              "--include-dashboard=false", "--disable-usage-stats"],
                             env=env, capture_output=True, text=True, timeout=180, check=False)
    try:
        assert started.returncode == 0, started.stderr[-2000:]
        done = specctl("doctor", "--ray", f"127.0.0.1:{port}", "--hardware",
                       "tests/fixtures/hardware/linux_cpu_2c_24g.json", env=env)
        assert done.returncode == 0, done.stderr
        assert f"127.0.0.1:{port}: 1 node(s), 0 GPU(s)" in done.stdout
        assert "1 CPU(s)" in done.stdout
    finally:
        subprocess.run([str(ray), "stop", "--force"], capture_output=True, timeout=120,
                       check=False)
