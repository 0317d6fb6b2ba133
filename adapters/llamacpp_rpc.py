"""llama.cpp RPC workers: each worker's memory as llama.cpp itself sees it, and the layer split.

specctl plans and launches llama.cpp's own distribution (`rpc-server` workers, `--rpc` on the
server); it does not invent one.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass

_DEVICE = re.compile(r"^\s*(RPC\S*):\s*(\S+)\s*\((\d+) MiB, (\d+) MiB free\)", re.M)


@dataclass(frozen=True)
class Worker:
    address: str
    memory_bytes: int
    free_bytes: int


def parse_devices(text: str) -> list[Worker]:
    """`llama-server --rpc ... --list-devices`: 'RPC0: 127.0.0.1:50052 (24105 MiB, 24105 MiB
    free)'. Older builds name the device 'RPC[host:port]'."""
    out = []
    for m in _DEVICE.finditer(text):
        address = m.group(2).removeprefix("RPC[").removesuffix("]")
        out.append(Worker(address, int(m.group(3)) << 20, int(m.group(4)) << 20))
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
    total = sum(w.free_bytes for w in workers)
    return tuple(round(w.free_bytes / total, 3) for w in workers) if total else ()
