"""Ollama: the daemon as a backend. It serves the target model; it speculates only with a draft or
MTP module baked into the model (Modelfile `DRAFT` layer, `PARAMETER draft_num_predict N`,
Ollama 0.32.12 and later), so a classic small draft model is not possible here: the planner then
serves plainly and points to llama.cpp, which can serve Ollama's own GGUF blobs with a draft.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import ClassVar

from packaging.version import InvalidVersion, Version
from pydantic import BaseModel, Field

from specctl.adapters.ollama_store import OllamaStore, models_dir
from specctl.orchestrator import http
from specctl.orchestrator.contract.adapter import Adapter
from specctl.orchestrator.contract.dirs import Dirs
from specctl.orchestrator.contract.launch import HttpCall, Installed, Launch, is_loopback, root_url
from specctl.orchestrator.contract.plan import Plan
from specctl.orchestrator.contract.settings import BackendSettings, EnvVar, load_settings
from specctl.orchestrator.contract.stores import ModelStore
from specctl.orchestrator.errors import BackendError

NAME = "ollama"
DEFAULT_URL = "http://127.0.0.1:11434"
DRAFT_SINCE = (0, 32, 12)  # draft_num_predict and the DRAFT layer


class _Settings(BackendSettings):
    ollama_url: str = Field(DEFAULT_URL, pattern=r"^https?://[^\s/]+(/\S*)?$",
                            description="the Ollama daemon's address")


def version_tuple(version: str) -> tuple[int, ...]:
    try:
        return Version(version).release
    except InvalidVersion:
        return (0,)


def methods_for(version: str) -> frozenset[str]:
    return frozenset({"none", "mtp"} if version_tuple(version) >= DRAFT_SINCE else {"none"})




def model_name(plan: Plan) -> str:
    return plan.target.ref.removeprefix("ollama:")


class Ollama(Adapter):
    name: ClassVar[str] = NAME
    default_quant: ClassVar[str] = "Q4_K_M"
    vocab_rule: ClassVar[str] = "near"
    cache_types: ClassVar[tuple[str, ...]] = ("f16", "q8_0", "q4_0")
    preference: ClassVar[Mapping[str, int]] = {"cuda": 2, "metal": 1, "cpu": 1}
    authenticates: ClassVar[bool] = False  # checks no API key: loopback only
    # the daemon embeds with any model
    api_paths: ClassVar[frozenset[str]] = Adapter.api_paths | {"/v1/embeddings"}
    install_hint: ClassVar[str] = "Ollama from https://ollama.com and `ollama serve`"
    settings: ClassVar[tuple[type[BaseModel], ...]] = (_Settings,)
    engine_env: ClassVar[tuple[EnvVar, ...]] = (
        EnvVar("OLLAMA_MODELS", "where Ollama keeps its models (its store is read there)"),)
    no_spec_hint: ClassVar[str] = ("serve the same model with llama.cpp and a draft instead "
                                   "(target = \"ollama:NAME\", backend = [\"llamacpp\"]; "
                                   "`specctl drafts ollama:NAME` finds one)")

    def __init__(self, url: str = DEFAULT_URL, timeout: float = 0.5) -> None:
        self.url, self.timeout = url.rstrip("/"), timeout

    @classmethod
    def create(cls, dirs: Dirs) -> Ollama:
        return cls(url=load_settings(_Settings.from_environ).ollama_url)

    def store(self) -> ModelStore:
        return OllamaStore(models_dir(os.environ, Path.home()), self.url)

    def tips(self, probed: Mapping[str, Installed | None]) -> list[str]:
        if not probed.get(NAME) or not probed.get("llamacpp"):
            return []
        return ["llama.cpp can serve your Ollama models with a draft, the fastest path here: "
                "target = \"ollama:NAME\", backend = [\"llamacpp\"] (`specctl drafts "
                "ollama:NAME` finds the draft)"]

    def probe(self) -> Installed | None:
        """A running daemon (its /api/version, and the client can list its models); else an
        installed `ollama` binary (`ollama --version`) that `up` can start."""
        try:
            resp = http.get(f"{self.url}/api/version", timeout=self.timeout)
            version = str(resp.json().get("version", "")) if resp.is_success else ""
        except (http.Unreachable, ValueError, AttributeError):
            return self._binary()
        if not version:
            return self._binary()
        if not self._answers_api():
            return None  # the daemon answered /api/version but not the API: not usable
        return Installed(backend=NAME, version=version, dialect="ollama", path=self.url,
                         methods=methods_for(version))

    def _answers_api(self) -> bool:
        """Whether the daemon lists its models to the `ollama` client (the client is optional:
        without it, the HTTP answer of /api/version is enough)."""
        try:
            import httpx
            import ollama
        except ImportError:
            return True
        try:
            ollama.Client(host=self.url, timeout=self.timeout * 4).list()
        except (ollama.ResponseError, ollama.RequestError, httpx.HTTPError, ValueError):
            return False
        return True

    @staticmethod
    def _binary() -> Installed | None:
        path = shutil.which("ollama")
        if path is None:
            return None
        try:
            out = subprocess.run([path, "--version"], capture_output=True, text=True,
                                 timeout=10, check=False)
        except (OSError, subprocess.SubprocessError):
            return None
        found = re.findall(r"\d+\.\d+\.\d+", out.stdout + out.stderr)
        if not found:
            return None
        return Installed(backend=NAME, version=found[-1], dialect="ollama", path=path,
                         methods=methods_for(found[-1]))

    def assumed(self) -> Installed:
        return Installed(backend=NAME, version=".".join(map(str, DRAFT_SINCE)),
                         dialect="ollama", methods=methods_for("0.32.12"), assumed=True)

    def extra_args(self, args: tuple[str, ...], installed: Installed) -> list[str]:
        if args:
            raise BackendError("Ollama's server takes no per-model engine arguments; set them "
                               "in a Modelfile (PARAMETER ...) and serve that model, or serve "
                               "its GGUF through llama.cpp (backend = [\"llamacpp\"])")
        return []

    def launch(self, plan: Plan, installed: Installed) -> Launch:
        self.extra_args(plan.extra_args, installed)
        if not is_loopback(plan.host):  # an API key would not help: Ollama checks none
            raise BackendError(f"Ollama has no authentication: on {plan.host} anyone who can "
                               "reach it could use it; bind it to 127.0.0.1 (server.host), and "
                               "put an authenticating proxy in front to share it")
        if plan.method not in installed.methods:
            raise BackendError(f"Ollama {installed.version} cannot speculate with "
                               f"'{plan.method}'; {self.no_spec_hint}")
        if not plan.target.ref.startswith("ollama:"):
            raise BackendError(f"Ollama serves its own models; use target = \"ollama:NAME\" "
                               f"(not {plan.target.ref})")
        host = f"{f'[{plan.host}]' if ':' in plan.host else plan.host}:{plan.port}"
        url = root_url(plan.host, plan.port)
        base, served = model_name(plan), model_name(plan)
        setup: list[HttpCall] = []
        if plan.speculative:  # a derived model with the draft length baked in
            served = f"specctl-{plan.profile}"
            setup.append(HttpCall(method="POST", url=f"{url}/api/create", body={
                "model": served, "from": base, "parameters": {"draft_num_predict": plan.k}}))
        setup.append(HttpCall(method="POST", url=f"{url}/api/generate",
                              body={"model": served, "keep_alive": "24h"}))
        return Launch.http(("ollama", "serve"), plan.host, plan.port, health="/api/version",
                           metrics=None, env={"OLLAMA_HOST": host}, setup=tuple(setup),
                           model=served)


ADAPTER = Ollama
