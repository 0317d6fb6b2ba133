"""Beyond one machine: the cluster's hardware (the profile's nodes as one machine) and what a Ray
cluster reports. The engines' own distribution is planned by their adapters; specctl does not
invent one."""

from __future__ import annotations

import json
import socket
import subprocess
from dataclasses import dataclass
from pathlib import Path

from specctl.orchestrator.config.profiles import MAX_CLUSTER_GPUS, Cluster, Node
from specctl.orchestrator.contract.hardware import Cpu, Gpu, Hardware
from specctl.orchestrator.errors import BadInputError, SpecctlError
from specctl.orchestrator.machine import hardware
from specctl.orchestrator.sizes import from_gib


class ClusterError(SpecctlError):
    """A cluster that cannot be reached or used."""


def node_hardware(node: Node, base: Path) -> Hardware:
    if node.hardware:
        path = Path(node.hardware)
        return hardware.load(path if path.is_absolute() else base / path)
    return Hardware(name=f"{node.gpus}x {node.gpu}" if node.gpus else "cpu-node", os="linux",
                    arch="x86_64", cpu=Cpu(model="node", cores=node.cores,
                                           ram_bytes=from_gib(node.ram_gb)),
                    gpus=tuple(Gpu(node.gpu, from_gib(node.gpu_memory_gb), i)
                               for i in range(node.gpus)),
                    source="profile")


def cluster_hardware(cluster: Cluster, base: Path) -> Hardware | None:
    """All nodes as one Hardware value (GPUs concatenated), or None without nodes."""
    if not cluster.nodes:
        return None
    machines = [(node_hardware(n, base), n.count) for n in cluster.nodes]
    many = sum(len(hw.gpus) * count for hw, count in machines)
    if many > MAX_CLUSTER_GPUS:  # recorded machines bring their own GPU counts
        raise ClusterError(f"the cluster has {many} GPUs in all; specctl plans at most "
                           f"{MAX_CLUSTER_GPUS}")
    first = machines[0][0]
    gpus = tuple(Gpu(g.name, g.memory_bytes, i, g.used_bytes) for i, g in enumerate(
        g for hw, count in machines for _ in range(count) for g in hw.gpus))
    total = sum(count for _, count in machines)
    name = " + ".join(f"{count}x {hw.name}" for hw, count in machines)
    return Hardware(name=name, os=first.os, arch=first.arch,
                    cpu=Cpu(first.cpu.model, sum(hw.cpu.cores * c for hw, c in machines),
                            sum(hw.cpu.ram_bytes * c for hw, c in machines), first.cpu.flags),
                    gpus=gpus, source=f"profile cluster ({total} nodes)", nodes=total,
                    gpus_per_node=min(len(hw.gpus) for hw, _ in machines))


RAY_PROBE = """
import json, sys
import ray
ray.init(address=sys.argv[1], logging_level="ERROR", log_to_driver=False)
nodes = [n for n in ray.nodes() if n.get("Alive")]
print(json.dumps([{"address": n["NodeManagerAddress"], "gpus": n["Resources"].get("GPU", 0),
                   "cpus": n["Resources"].get("CPU", 0),
                   "memory_bytes": int(n["Resources"].get("memory", 0))} for n in nodes]))
ray.shutdown()
"""


@dataclass(frozen=True)
class RayNode:
    address: str
    gpus: int
    cpus: int
    memory_bytes: int


def _answers(address: str, wait: float = 3.0) -> None:
    """A HOST:PORT address must answer a connection before Ray is asked (Ray itself retries
    for a minute and more): nothing there is said at once."""
    if address == "auto":
        return  # Ray finds the cluster this machine runs in itself
    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if not sep or not port.isdigit() or not host:
        raise BadInputError(f"--ray {address!r}: give HOST:PORT (the head node's, e.g. "
                            "10.0.0.1:6379) or auto")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=wait):
            return
    except (OSError, ValueError) as exc:
        why = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
        raise ClusterError(f"nothing answers at {address} ({why}); start Ray there (`ray start "
                           "--head`) or check the address (README: Beyond one machine)") from None


def ray_nodes(address: str, python: str, timeout: float = 90) -> list[RayNode]:
    """The live nodes of a Ray cluster and their GPUs, as Ray itself reports them."""
    _answers(address)
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
    return [RayNode(n["address"], int(n["gpus"]), int(n["cpus"]), int(n["memory_bytes"]))
            for n in json.loads(done.stdout.strip().splitlines()[-1])]
