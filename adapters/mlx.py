"""MLX-LM (`mlx_lm.server`), Apple Silicon's own engine: plan -> `python -m mlx_lm server` argv,
speculation with a draft model only, no draft counters.

Facts used here were checked on mlx-lm 0.32.2 (scripts/MLX_NOTES.md; flags in
dialects/mlx_lm-server-0.32.2.help):

- The server lives in whatever Python has mlx_lm (SPECCTL_MLX_PYTHON, else the interpreter of
  `mlx_lm.server` on PATH, else this one); `python -m mlx_lm server` is the form without a
  deprecation notice.
- `/health` answers 200 while the model is still loading, so the launch carries a readiness
  request (one token of chat, `Launch.setup`) that the supervisor sends after health: it waits
  for the load and fails when the load failed.
- The request's `model` field must be omitted or "default_model": any other string is loaded
  as a new model (a path or a Hub repo). Clients are told "default_model"; the model is on disk
  before launch, so the server runs with HF_HUB_OFFLINE=1.
- There is no API key and no metrics: a server bound beyond loopback is refused, and acceptance
  is reported as unknown. CORS is narrowed to the server's own origin (mlx_lm allows every web
  origin by default). A plain cross-site POST (no preflight) still reaches a loopback server:
  that is mlx_lm.server's own limit.
- A draft model, or a quantised KV cache, makes the server serve one request at a time.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel, Field, field_validator

from specctl.orchestrator.contract.adapter import Adapter, options_of
from specctl.orchestrator.contract.dirs import Dirs
from specctl.orchestrator.contract.hardware import Hardware
from specctl.orchestrator.contract.launch import (
    Endpoint,
    HttpCall,
    Installed,
    Launch,
    is_loopback,
    root_url,
)
from specctl.orchestrator.contract.model import ModelInfo
from specctl.orchestrator.contract.options import Options
from specctl.orchestrator.contract.plan import Plan
from specctl.orchestrator.contract.settings import BackendSettings, load_settings
from specctl.orchestrator.contract.stats import SpecStats
from specctl.orchestrator.errors import BackendError, ProfileError
from specctl.orchestrator.files import expand_user

NAME = "mlx"
RECORDED = "0.32.2"  # the mlx-lm version whose `mlx_lm.server --help` is in dialects/
METHODS = frozenset({"none", "draft"})
SERVED_MODEL = "default_model"  # the only safe `model` value: anything else loads a model
PROGRAM = "mlx_lm.server"  # the console script, when planning for another machine
KV_BITS = {"q8_0": 8, "q4_0": 4}  # specctl cache type -> --kv-bits (groups of 64, like ggml's)
KV_GROUP = 64
NO_COUNTERS = "mlx_lm.server reports no draft counters"
_ORIGIN = re.compile(r"https?://[A-Za-z0-9.\-\[\]:]+")
_FLAG = re.compile(r"(?<![\w-])(--[a-z][a-z0-9-]*)")
_PROBE = ("import importlib.metadata as m, importlib.util as u, sys\n"
          "if u.find_spec('mlx_lm') is None or u.find_spec('mlx') is None:\n"
          "    sys.exit(3)\n"
          "import mlx.core as mx\n"
          "print(m.version('mlx-lm'), mx.default_device())\n")


class MlxOptions(Options):
    """The `[mlx]` section of a profile."""

    max_tokens: int | None = Field(None, ge=1, le=1 << 20, strict=True, description=(
        "completion length for a request that sets none (mlx_lm.server's default: 512)"))
    trust_remote_code: bool = Field(False, description=(
        "let the tokenizer run code shipped with the model (--trust-remote-code); only for "
        "models you trust"))
    prompt_cache_size: int | None = Field(None, ge=0, le=1024, strict=True, description=(
        "finished conversations whose KV cache is kept for reuse (mlx_lm.server's default: "
        "10); with a draft model each one is memory beyond the plan"))
    quantized_kv_start: int = Field(0, ge=0, le=1 << 24, strict=True, description=(
        "with a quantised KV cache (memory.cache_type q8_0 or q4_0): the token from which it is "
        "quantised (mlx_lm's default is 5000; 0 keeps the memory plan true)"))
    allowed_origins: tuple[str, ...] = Field((), max_length=64, description=(
        "web origins (https://host[:port]) whose pages may call the server (CORS); default: "
        "none (mlx_lm.server alone allows every origin)"))

    @field_validator("allowed_origins")
    @classmethod
    def _origins(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        for origin in v:
            if not _ORIGIN.fullmatch(origin):
                raise ValueError(f"'{origin}' is not a web origin like https://app.example:8443")
        return v


class _Settings(BackendSettings):
    mlx_python: Path | None = Field(None, description="an interpreter whose environment has "
                                    "mlx_lm")


def parse_help(text: str) -> frozenset[str]:
    """The long flags an argparse `--help` lists."""
    return frozenset(_FLAG.findall(text))


def recorded_flags() -> frozenset[str]:
    folder = resources.files("specctl.adapters") / "dialects"
    return parse_help((folder / f"mlx_lm-server-{RECORDED}.help").read_text())


def installed_of(version: str, path: str | None, flags: frozenset[str],
                 assumed: bool = False) -> Installed:
    return Installed(backend=NAME, version=version, dialect=f"mlx_lm-{version}", path=path,
                     flags=flags, methods=METHODS, assumed=assumed)


def script_python(script: Path) -> Path | None:
    """The interpreter a console script (`mlx_lm.server`) runs with, from its first lines."""
    try:
        with script.open("rb") as fh:
            head = fh.read(1024).decode("utf-8", errors="replace")
    except OSError:
        return None
    first = head.splitlines()[0] if head else ""
    if not first.startswith("#!"):
        return None
    words = first[2:].split()
    if words and words[0] in ("/bin/sh", "/usr/bin/env") and len(words) == 1:
        m = re.search(r"""exec' (?:"([^"]+)"|(\S+))""", head)  # pip's launcher, long paths
        return Path(m.group(1) or m.group(2)) if m else None
    if words and Path(words[0]).name == "env" and len(words) > 1:
        found = shutil.which(words[1])
        return Path(found) if found else None
    return Path(words[0]) if words else None




def model_arg(info: ModelInfo) -> str:
    """A local folder by its path, else the Hugging Face repo id (from the local cache)."""
    if info.path is not None:
        return str(info.path)
    if info.ref.startswith("hf:"):
        return info.ref.removeprefix("hf:").split(":")[0]
    raise BackendError(f"{info.ref} is neither on disk nor a Hugging Face repo; mlx_lm.server "
                       "serves an MLX model folder or hf:org/repo (e.g. hf:mlx-community/...)")


def is_gguf(info: ModelInfo) -> bool:
    return info.tokenizer.startswith("gguf:") or (
        info.path is not None and info.path.suffix.lower() == ".gguf")




class _Argv:
    """argv that refuses flags the installed mlx_lm.server does not list."""

    def __init__(self, installed: Installed, head: list[str]) -> None:
        self.installed, self.argv = installed, list(head)

    def add(self, flag: str, *values: object) -> None:
        if self.installed.flags and flag not in self.installed.flags:
            raise BackendError(f"mlx_lm.server {self.installed.version} has no {flag}; update "
                               "mlx-lm (`pip install -U mlx-lm`) or change the profile")
        self.argv += [flag, *(str(v) for v in values)]

    def optional(self, flag: str, *values: object) -> None:
        """A nicety: added only when this version has it."""
        if not self.installed.flags or flag in self.installed.flags:
            self.add(flag, *values)


class Mlx(Adapter):
    name: ClassVar[str] = NAME
    aliases: ClassVar[tuple[str, ...]] = ("mlx-lm", "mlx_lm")
    default_quant: ClassVar[str] = "4BIT"
    vocab_rule: ClassVar[str] = "identical"  # the draft must use the target's tokenizer
    cache_types: ClassVar[tuple[str, ...]] = ("f16", "q8_0", "q4_0")
    default_slots: ClassVar[int] = 32  # mlx_lm.server's own --decode-concurrency
    # first on Apple Silicon unless a measurement says otherwise (llama.cpp ranks 0 there too;
    # ties go by name)
    preference: ClassVar[Mapping[str, int]] = {"metal": 1}
    formats: ClassVar[frozenset[str]] = frozenset({"hf"})
    authenticates: ClassVar[bool] = False  # checks no API key: loopback only
    # api_paths: the default two (mlx_lm.server has no /v1/embeddings)
    install_hint: ClassVar[str] = (
        "on a Mac `pip install mlx-lm` (and SPECCTL_MLX_PYTHON=<that python> when it is not "
        "this one); on Linux, for tests on the CPU, `scripts/mlx-cpu-env`")
    no_spec_hint: ClassVar[str] = (
        "mlx_lm.server speculates only with a draft model sharing the target's tokenizer (e.g. "
        "hf:mlx-community/Llama-3.2-1B-Instruct-4bit for a Llama 3 target); for n-gram, EAGLE "
        "or MTP use llama.cpp or vLLM")
    options: ClassVar[type[Options]] = MlxOptions
    settings: ClassVar[tuple[type[BaseModel], ...]] = (_Settings,)
    owned_flags: ClassVar[frozenset[str]] = frozenset({
        "--model", "--host", "--port", "--draft-model", "--num-draft-tokens", "--kv-bits",
        "--kv-group-size", "--quantized-kv-start", "--allowed-origins", "--prompt-cache-size"})

    def __init__(self, python: Path | None = None, timeout: float = 30.0) -> None:
        self.python, self.timeout = python, timeout

    @classmethod
    def create(cls, dirs: Dirs) -> Mlx:
        python = load_settings(_Settings.from_environ).mlx_python
        return cls(python=expand_user(python).absolute() if python is not None else None)

    # -- what is installed -------------------------------------------------------------------
    def candidates(self) -> list[Path]:
        """Interpreters to ask: the configured one only, else the one behind `mlx_lm.server`
        on PATH, then this one."""
        if self.python is not None:
            return [self.python]
        found: list[Path] = []
        script = shutil.which(PROGRAM)
        behind = script_python(Path(script)) if script else None
        if behind is not None:
            found.append(behind)
        if Path(sys.executable) not in found:
            found.append(Path(sys.executable))
        return found

    def probe(self) -> Installed | None:
        for python in self.candidates():
            version = self._version(python)
            if version is not None:
                return installed_of(version, str(python), self._flags(python, version))
        return None

    def _run(self, argv: list[str]) -> subprocess.CompletedProcess[str] | None:
        try:
            return subprocess.run(argv, capture_output=True, text=True, timeout=self.timeout,
                                  check=False)
        except (OSError, subprocess.SubprocessError):
            return None

    def _version(self, python: Path) -> str | None:
        """mlx-lm's version when this interpreter has mlx_lm and a working mlx."""
        done = self._run([str(python), "-c", _PROBE])
        if done is None or done.returncode != 0 or not done.stdout.split():
            return None
        return done.stdout.split()[0]

    def _flags(self, python: Path, version: str) -> frozenset[str]:
        """The recorded flags for the recorded version; another version's own `--help`."""
        if version == RECORDED:
            return recorded_flags()
        done = self._run([str(python), "-m", "mlx_lm", "server", "--help"])
        found = parse_help(done.stdout) if done is not None and done.returncode == 0 else None
        return found or recorded_flags()

    def assumed(self) -> Installed:
        return installed_of(RECORDED, None, recorded_flags(), assumed=True)

    # -- planning ----------------------------------------------------------------------------
    def check(self, options: Options, hw: Hardware, target: ModelInfo,
              draft: ModelInfo | None) -> list[str]:
        opts = options if isinstance(options, MlxOptions) else MlxOptions()
        if hw.nodes > 1:
            raise ProfileError("mlx_lm.server runs on one machine here; plan a cluster with "
                               "vLLM or llama.cpp instead")
        for role, info in (("target", target), ("draft", draft)):
            if info is not None and is_gguf(info):
                raise ProfileError(
                    f"the {role} {info.name} is a GGUF file; mlx_lm.server serves MLX model "
                    "folders (config.json + safetensors) or hf:org/repo, e.g. "
                    "hf:mlx-community/...-4bit; use llama.cpp for GGUF")
        notes = []
        if (target.quant or "").upper() in ("FLOAT32", "F32"):
            notes.append(f"MLX keeps the KV cache in the model's dtype: {target.name} is float32, "
                         "so its KV cache takes twice the planned f16 figure.")
        if draft is not None:
            kept = opts.prompt_cache_size if opts.prompt_cache_size is not None else 10
            notes.append(
                "mlx_lm.server serves one request at a time with a draft model, and keeps up to "
                f"{kept} finished conversations' KV caches for reuse on top of the plan "
                "(prompt_cache_size in the profile's mlx section bounds them).")
        return notes

    # -- running -----------------------------------------------------------------------------
    def launch(self, plan: Plan, installed: Installed) -> Launch:
        if not is_loopback(plan.host):  # an API key would not help: mlx_lm.server checks none
            raise BackendError(
                f"mlx_lm.server has no authentication: on {plan.host} anyone who can reach it "
                "could use it (and make it load any model); bind it to 127.0.0.1 (server.host), "
                "and put an authenticating proxy in front to share it")
        if plan.method not in installed.methods:
            raise BackendError(
                f"mlx_lm.server cannot speculate with '{plan.method}'; it has "
                f"{', '.join(sorted(installed.methods))}. {self.no_spec_hint}")
        opts = options_of(plan, MlxOptions)
        head = [installed.path, "-m", "mlx_lm", "server"] if installed.path else [PROGRAM]
        a = _Argv(installed, head)
        a.add("--model", model_arg(plan.target))
        a.add("--host", plan.host)
        a.add("--port", plan.port)
        if plan.speculative:
            if plan.draft is None:
                raise BackendError("speculative method 'draft' needs a draft model")
            a.add("--draft-model", model_arg(plan.draft))
            a.add("--num-draft-tokens", plan.k)
        url = root_url(plan.host, plan.port)
        if opts.allowed_origins:
            a.add("--allowed-origins", ",".join(opts.allowed_origins))
        else:  # no web page but the server's own origin (it serves none) may call it
            a.optional("--allowed-origins", url)
        parallel = max(plan.parallel, 1)
        a.optional("--decode-concurrency", parallel)
        a.optional("--prompt-concurrency", min(parallel, 8))
        kv_bytes = plan.memory.kv_target_bytes + plan.memory.kv_draft_bytes
        if kv_bytes > 0:  # bounds the prompt cache when batching (no draft) to the planned KV
            a.optional("--prompt-cache-bytes", kv_bytes)
        if opts.prompt_cache_size is not None:
            a.add("--prompt-cache-size", opts.prompt_cache_size)
        if plan.cache_type in KV_BITS:
            a.add("--kv-bits", KV_BITS[plan.cache_type])
            a.add("--kv-group-size", KV_GROUP)
            a.add("--quantized-kv-start", opts.quantized_kv_start)
        elif plan.cache_type not in ("f16", "bf16"):
            raise BackendError(f"mlx_lm.server has no '{plan.cache_type}' KV cache; use "
                               "memory.cache_type = \"q8_0\", \"q4_0\" or \"auto\"")
        if opts.max_tokens is not None:
            a.add("--max-tokens", opts.max_tokens)
        if opts.trust_remote_code:
            a.add("--trust-remote-code")
        ready = HttpCall(method="POST", url=f"{url}/v1/chat/completions", body={
            "model": SERVED_MODEL, "messages": [{"role": "user", "content": "Hi"}],
            "max_tokens": 1, "temperature": 0.0})
        # /health answers 200 before the model has loaded, and 503 (for good: the process stays
        # up) once loading failed; the 1-token request proves the model answers
        a.argv += self.extra_args(plan.extra_args, installed)
        return Launch.http(a.argv, plan.host, plan.port, metrics=None,
                           env={"HF_HUB_OFFLINE": "1"}, health_failed=frozenset({503}),
                           setup=(ready,), model=SERVED_MODEL)

    def spec_stats(self, endpoint: Endpoint) -> SpecStats:
        return SpecStats(source=NO_COUNTERS)  # acceptance unknown: `specctl bench` compares speed

    def decode_timing(self, reply: Mapping[str, Any]) -> tuple[int, float] | None:
        return None  # replies carry no timings: the client's clock measures


ADAPTER = Mlx
