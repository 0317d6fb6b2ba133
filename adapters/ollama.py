"""Ollama: a running daemon as a backend. It serves the target; drafting depends on its version.

Ollama cannot use a classic small draft model, so a plan on Ollama is plain serving unless the
daemon has draft options; the planner says so and points to llama.cpp, which can serve Ollama's own
GGUF blobs with a draft.
"""

from __future__ import annotations

from typing import ClassVar

import requests

from specctl.adapters.base import Endpoint, Installed, Launch, SpecStats
from specctl.orchestrator.errors import BackendError
from specctl.orchestrator.plan import Plan

NAME = "ollama"
DEFAULT_URL = "http://127.0.0.1:11434"


class Ollama:
    name: ClassVar[str] = NAME
    default_quant: ClassVar[str] = "Q4_K_M"
    vocab_rule: ClassVar[str] = "near"
    cache_types: ClassVar[tuple[str, ...]] = ("f16", "q8_0", "q4_0")
    runs_on: ClassVar[frozenset[str]] = frozenset({"cuda", "metal", "cpu"})

    def __init__(self, url: str = DEFAULT_URL, timeout: float = 0.5) -> None:
        self.url, self.timeout = url.rstrip("/"), timeout

    def probe(self) -> Installed | None:
        try:
            resp = requests.get(f"{self.url}/api/version", timeout=self.timeout)
            version = str(resp.json().get("version", "")) if resp.ok else ""
        except (requests.RequestException, ValueError):
            return None
        if not version:
            return None
        return Installed(backend=NAME, version=version, dialect="ollama", path=self.url,
                         methods=frozenset({"none"}))

    def assumed(self) -> Installed:
        return Installed(backend=NAME, version="unknown", dialect="ollama",
                         methods=frozenset({"none"}), assumed=True)

    def launch(self, plan: Plan, installed: Installed) -> Launch:
        if plan.method not in installed.methods:
            raise BackendError(f"Ollama {installed.version} cannot speculate with "
                               f"'{plan.method}'; serve with llama.cpp instead")
        host = f"{plan.host}:{plan.port}"
        return Launch(argv=("ollama", "serve"), env={"OLLAMA_HOST": host},
                      health_url=f"http://{host}/api/version", base_url=f"http://{host}/v1")

    def spec_stats(self, endpoint: Endpoint) -> SpecStats:
        return SpecStats(source="ollama (no draft counters)")
