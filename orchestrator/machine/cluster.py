"""Beyond one machine: the cluster's hardware, RPC worker memory, and the checks a multi-node
plan must pass. specctl plans and launches the engines' own distribution (llama.cpp RPC workers,
vLLM over Ray); it does not invent one."""

from __future__ import annotations

import json
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from specctl.orchestrator.config.profiles import Cluster, Node
from specctl.orchestrator.errors import ProfileError, SpecctlError
from specctl.orchestrator.machine import hardware
from specctl.orchestrator.machine.hardware import Cpu, Gpu, Hardware
from specctl.orchestrator.models.resolve import ModelInfo


class ClusterError(SpecctlError):
    """A cluster that cannot be reached or used."""


_DEVICE = re.compile(r"^\s*(RPC\S*):\s*(\S+)\s*\((\d+) MiB, (\d+) MiB free\)", re.M)


def node_hardware(node: Node, base: Path) -> Hardware:
    if node.hardware:
        path = Path(node.hardware)
        return hardware.load(path if path.is_absolute() else base / path)
    return Hardware(name=f"{node.gpus}x {node.gpu}" if node.gpus else "cpu-node", os="linux",
                    arch="x86_64", cpu=Cpu(model="node", cores=node.cores, ram_gb=node.ram_gb),
                    gpus=tuple(Gpu(node.gpu, node.gpu_memory_gb, i) for i in range(node.gpus)),
                    source="profile")


def cluster_hardware(cluster: Cluster, base: Path) -> Hardware | None:
    """All nodes as one Hardware value (GPUs concatenated), or None without nodes."""
    if not cluster.nodes:
        return None
    machines = [(node_hardware(n, base), n.count) for n in cluster.nodes]
    first = machines[0][0]
    gpus = tuple(Gpu(g.name, g.memory_gb, i) for i, g in enumerate(
        g for hw, count in machines for _ in range(count) for g in hw.gpus))
    total = sum(count for _, count in machines)
    name = " + ".join(f"{count}x {hw.name}" for hw, count in machines)
    return Hardware(name=name, os=first.os, arch=first.arch,
                    cpu=Cpu(first.cpu.model, sum(hw.cpu.cores * c for hw, c in machines),
                            sum(hw.cpu.ram_gb * c for hw, c in machines), first.cpu.flags),
                    gpus=gpus, source=f"profile cluster ({total} nodes)")


def gpus_per_node(cluster: Cluster, base: Path) -> int:
    return min((len(node_hardware(n, base).gpus) for n in cluster.nodes), default=0)


@dataclass(frozen=True)
class Worker:
    address: str
    memory_gb: float
    free_gb: float


def parse_devices(text: str) -> list[Worker]:
    """`llama-server --rpc ... --list-devices`: 'RPC0: 127.0.0.1:50052 (24105 MiB, 24105 MiB
    free)'. Older builds name the device 'RPC[host:port]'."""
    out = []
    for m in _DEVICE.finditer(text):
        address = m.group(2).removeprefix("RPC[").removesuffix("]")
        out.append(Worker(address, int(m.group(3)) / 1024, int(m.group(4)) / 1024))
    return out


def ask_workers(llama_server: str, workers: list[str], timeout: float = 30) -> list[Worker]:
    """Each RPC worker's memory, as llama.cpp itself sees it. Empty when they do not answer."""
    try:
        done = subprocess.run([llama_server, "--rpc", ",".join(workers), "--list-devices"],
                              capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.SubprocessError):
        return []
    found = parse_devices(done.stdout + done.stderr)
    return found if len(found) == len(workers) else []


def split_by_memory(workers: list[Worker]) -> tuple[float, ...]:
    total = sum(w.free_gb for w in workers)
    return tuple(round(w.free_gb / total, 3) for w in workers) if total else ()


def check_vllm_parallel(target: ModelInfo, draft: ModelInfo | None, tp: int, pp: int,
                        draft_tp: int | None, gpus: int, per_node: int) -> list[str]:
    """vLLM's own constraints, checked before launch. Returns reasons; raises on a violation."""
    if target.heads % tp:
        raise ProfileError(f"tensor parallel size {tp} does not divide {target.name}'s "
                           f"{target.heads} attention heads; use a divisor of {target.heads}")
    if tp * pp > gpus:
        raise ProfileError(f"tensor x pipeline = {tp} x {pp} = {tp * pp} GPUs, but the cluster "
                           f"has {gpus}")
    if draft_tp is not None and draft_tp not in (1, tp):
        raise ProfileError(f"draft_tensor_parallel_size must be 1 or the target's {tp} "
                           f"(vLLM's rule), not {draft_tp}")
    if draft is not None and draft_tp and draft.heads % draft_tp:
        raise ProfileError(f"draft tensor parallel {draft_tp} does not divide {draft.name}'s "
                           f"{draft.heads} attention heads")
    notes = [f"Parallel: tensor {tp} x pipeline {pp} over {gpus} GPUs; {target.heads} heads "
             f"divide by {tp}."]
    if per_node and tp > per_node:
        notes.append(f"Tensor parallel {tp} spans nodes ({per_node} GPUs each): slow; prefer "
                     f"tensor {per_node} x pipeline {tp * pp // per_node}.")
    return notes


RAY_PROBE = """
import json, sys
import ray
ray.init(address=sys.argv[1], logging_level="ERROR", log_to_driver=False)
nodes = [n for n in ray.nodes() if n.get("Alive")]
print(json.dumps([{"address": n["NodeManagerAddress"], "gpus": n["Resources"].get("GPU", 0),
                   "cpus": n["Resources"].get("CPU", 0),
                   "memory_gb": n["Resources"].get("memory", 0) / 1e9} for n in nodes]))
ray.shutdown()
"""


@dataclass(frozen=True)
class RayNode:
    address: str
    gpus: int
    cpus: int
    memory_gb: float


def ray_nodes(address: str, python: str, timeout: float = 90) -> list[RayNode]:
    """The live nodes of a Ray cluster and their GPUs, as Ray itself reports them."""
    try:
        done = subprocess.run([python, "-c", RAY_PROBE, address], capture_output=True, text=True,
                              timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        raise ClusterError(f"no answer from a Ray cluster at {address} in {timeout:.0f} s; start "
                           "it with `ray start --head` (README: Beyond one machine)") from None
    if "No module named 'ray'" in done.stderr:
        raise ClusterError(f"Ray is not installed for {python}: pip install 'specctl[ray]'")
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise ClusterError(f"cannot reach a Ray cluster at {address}: {last}")
    return [RayNode(n["address"], int(n["gpus"]), int(n["cpus"]), round(n["memory_gb"], 1))
            for n in json.loads(done.stdout.strip().splitlines()[-1])]
