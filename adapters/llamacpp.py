"""llama.cpp `llama-server`: probe the build (its dialect: llamacpp_dialect), plan -> argv/env,
draft counters; building it is llamacpp_build's, RPC workers llamacpp_rpc's."""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterable, Mapping
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, ClassVar

from pydantic import BaseModel, Field, field_validator

from specctl.adapters import (
    llamacpp_build,
    llamacpp_placement,
    llamacpp_rpc,
    llamacpp_spec,
    prometheus,
)
from specctl.adapters.llamacpp_dialect import (
    FLAGS,
    LEGACY_DIALECT,
    NAME,
    installed_from,
)
from specctl.orchestrator.contract.adapter import Adapter, Resources, options_of
from specctl.orchestrator.contract.dirs import Dirs
from specctl.orchestrator.contract.hardware import Hardware
from specctl.orchestrator.contract.launch import Endpoint, Installed, Launch, Progress, url_host
from specctl.orchestrator.contract.memory import Budget
from specctl.orchestrator.contract.model import ModelInfo
from specctl.orchestrator.contract.options import Options
from specctl.orchestrator.contract.plan import Plan
from specctl.orchestrator.contract.settings import BackendSettings, EnvVar, load_settings
from specctl.orchestrator.contract.stats import SpecStats
from specctl.orchestrator.errors import BackendError, ProfileError
from specctl.orchestrator.sizes import from_gib, gib

HOMEBREW = (Path("/opt/homebrew/bin/llama-server"), Path("/usr/local/bin/llama-server"))
_MALFORMED = re.compile(r"^Failed to parse |\[json\.exception\.|\bis not supported\b")

class LlamaCppOptions(llamacpp_spec.SpecKnobs):
    """The `[llamacpp]` section of a profile (the speculation knobs: llamacpp_spec)."""

    rpc_workers: tuple[str, ...] = Field((), max_length=256,
                                         description="host:port of rpc-servers")
    worker_memory_gb: tuple[Annotated[float, Field(gt=0, le=1 << 16, strict=True)], ...] = Field(
        (), max_length=256, description="per worker, GiB, when they cannot be asked")
    draft_local: bool = Field(True, description="keep the draft on this machine (RPC)")
    tensor_split: tuple[Annotated[float, Field(ge=0, strict=True)], ...] = Field(
        (), max_length=257, description="filled in by the plan: the workers' shares of the "
        "target's layers")
    fit: llamacpp_placement.Fit = Field(
        "auto", description="let llama.cpp fit the placement to free memory (--fit): auto = "
        "where the build has it and there are no RPC workers")
    spec_synth_rates: tuple[Annotated[float, Field(ge=0, le=1)], ...] = Field(
        (), max_length=32, description="benchmarking only: synthetic acceptance per draft "
        "position (0 = reject every draft; bench uses it for the greedy numerics floor)")

    @field_validator("rpc_workers")
    @classmethod
    def _host_port(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        for w in v:
            host, sep, port = w.rpartition(":")
            if not sep or not _RPC_HOST.fullmatch(host) or not port.isdigit() or \
                    not 1 <= int(port) <= 65535:  # one worker each: "a:1,b:2" is two
                raise ValueError(f"'{w}' is not one host:port (port 1-65535); list each "
                                 "worker as its own string")
        return v


_RPC_HOST = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9.-]{0,252}[A-Za-z0-9])?|\[[0-9A-Fa-f:.]{2,45}\]")


class _Settings(BackendSettings):
    llama_server: Path | None = Field(None, description="use this llama-server instead of "
                                      "finding one")


class _Argv:
    """argv that refuses flags the installed build does not have."""

    def __init__(self, installed: Installed, program: str) -> None:
        self.installed, self.argv = installed, [program]

    def add(self, flag: str, *values: Any) -> None:
        if flag not in self.installed.flags:
            raise BackendError(
                f"llama-server {self.installed.version} has no {flag}; update llama.cpp "
                "(`specctl backend install llamacpp --rebuild`) or change the profile")
        self.argv += [flag, *(str(v) for v in values)]

    def optional(self, flag: str, *values: Any) -> None:
        """A nicety: added only when this build has it."""
        if flag in self.installed.flags:
            self.add(flag, *values)


class LlamaCpp(Adapter):
    name: ClassVar[str] = NAME
    aliases: ClassVar[tuple[str, ...]] = ("llama.cpp",)
    default_quant: ClassVar[str] = "Q4_K_M"
    vocab_rule: ClassVar[str] = "near"
    cache_types: ClassVar[tuple[str, ...]] = ("f16", "q8_0", "q4_0")
    preference: ClassVar[Mapping[str, int]] = {"cuda": 1, "metal": 0, "cpu": 0}
    draft_counters: ClassVar[bool] = True
    # llama-server's own `-np` auto: 4 slots; here each slot is its own part of the KV (`-c`
    # slots x context), so a request past its slot's context fails alone: with one shared pool
    # (llama-server's default), requests that overflow it together fail every one in flight
    default_slots: ClassVar[int] = 4
    kv_per_slot: ClassVar[bool] = True
    install_hint: ClassVar[str] = "`specctl backend install llamacpp`"
    no_spec_hint: ClassVar[str] = "update llama.cpp (`specctl backend install llamacpp " \
                                  "--rebuild`)"
    options: ClassVar[type[Options]] = LlamaCppOptions
    settings: ClassVar[tuple[type[BaseModel], ...]] = (_Settings,)
    engine_env: ClassVar[tuple[EnvVar, ...]] = (
        EnvVar("CUDA_VISIBLE_DEVICES", "the GPUs a CUDA build may use"),)
    moved_keys: ClassVar[Mapping[str, str]] = {
        "speculative.n_min": "n_min", "cluster.rpc_workers": "rpc_workers",
        "cluster.worker_memory_gb": "worker_memory_gb", "cluster.draft_local": "draft_local"}
    knobs: ClassVar[frozenset[str]] = frozenset({"p_min"})
    has_workers: ClassVar[bool] = True
    spills: ClassVar[tuple[str, ...]] = ("experts", "layers")  # --n-cpu-moe, -ngl N
    owned_flags: ClassVar[frozenset[str]] = frozenset({
        "--host", "--port", "--api-key", "--api-key-file", "-m", "--model", "-hf", "-hfr",
        "--hf-repo", "-hff", "--hf-file", "-c", "--ctx-size", "-np", "--parallel", "-a",
        "--alias", "--metrics", "-md", "-hfd", "-hfrd", "-ngld", "-devd", "-ctkd", "-ctvd",
        "--model-draft", "--hf-repo-draft", "--gpu-layers-draft", "--n-gpu-layers-draft",
        "--device-draft", "--cache-type-k-draft", "--cache-type-v-draft", "--rpc"})
    # what llama-server 0c1e570 routes (tools/server/server.cpp) for a generating model: chat and
    # text completions, Anthropic's Messages and its token count, OpenAI's Responses and its
    # token count, and fill-in-the-middle at the root (/infill: editor plugins; a model without
    # FIM tokens answers it 501). Not /v1/embeddings nor /v1/rerank: they answer 501 unless the
    # server is started for them (--embeddings, --rerank), which a plan never does
    api_paths: ClassVar[frozenset[str]] = Adapter.api_paths | {
        "/v1/messages", "/v1/messages/count_tokens", "/v1/responses",
        "/v1/responses/input_tokens", "/infill"}

    def __init__(self, configured: Path | None = None, built: Path | None = None,
                 search_path: Iterable[Path] = HOMEBREW,
                 backends_dir: Path | None = None) -> None:
        self.configured, self.built, self.search_path = configured, built, tuple(search_path)
        self.backends_dir = backends_dir

    @classmethod
    def create(cls, dirs: Dirs) -> LlamaCpp:
        return cls(configured=load_settings(_Settings.from_environ).llama_server,
                   backends_dir=dirs.backends)

    def locate(self) -> Path | None:
        if self.configured is not None and not self.configured.is_file():  # never another one
            raise BackendError(f"$SPECCTL_LLAMA_SERVER: {self.configured} is not a file; point "
                               "it at a llama-server program, or unset it to use the one "
                               "specctl builds or finds on PATH")
        if self.built is None and self.backends_dir is not None:
            self.built = llamacpp_build.installed_server(self.backends_dir, _toolchain())
        on_path = shutil.which("llama-server")
        for candidate in (self.configured, self.built, Path(on_path) if on_path else None,
                          *self.search_path):
            if candidate is not None and candidate.is_file():
                return candidate
        return None

    def probe(self) -> Installed | None:
        path = self.locate()
        if path is None:
            return None
        try:
            help_ = subprocess.run([str(path), "--help"], capture_output=True, text=True,
                                   timeout=30, check=False)
            version = subprocess.run([str(path), "--version"], capture_output=True, text=True,
                                     timeout=30, check=False)
        except (OSError, subprocess.SubprocessError) as exc:
            raise BackendError(f"{path} does not run ({exc}); reinstall it with "
                               "`specctl backend install llamacpp --rebuild`") from None
        return installed_from(help_.stdout + help_.stderr, version.stdout + version.stderr,
                              str(path))

    def assumed(self) -> Installed:
        folder = resources.files("specctl.adapters") / "dialects"
        return installed_from((folder / "llama-server-0c1e570.help").read_text(),
                              (folder / "llama-server-0c1e570.version").read_text(),
                              None, assumed=True)

    def install(self, dirs: Dirs, rebuild: bool, progress: Progress) -> Installed:
        """Build llama.cpp into the cache (or reuse the cached build)."""
        bindir = llamacpp_build.install(dirs.backends, _toolchain(), progress, rebuild=rebuild)
        self.built = bindir / "llama-server"
        found = self.probe()
        if found is None:
            raise BackendError(f"the build in {bindir} has no runnable llama-server")
        return found

    def install_check(self, hw: Hardware) -> tuple[str, str | None]:
        tc = _toolchain()
        what = (f"build llama.cpp for {tc.accel.upper()} from source into the cache (downloads "
                "the llama-cpp-python source, ~77 MB; compiles for ~6-13 min on 2 cores)")
        if hw.kind == "cuda" and not shutil.which("nvcc"):
            return what, ("this machine has an NVIDIA GPU but no CUDA compiler (nvcc), so the "
                          "llama.cpp build would run on the CPU while the plan is for the GPU; "
                          "install the CUDA toolkit (nvcc on PATH), or put a CUDA build of "
                          "llama-server on PATH (or in SPECCTL_LLAMA_SERVER), then run again")
        return what, None

    def tool(self, name: str) -> Path | None:
        if name != "quantize":
            return None
        server = self.locate()
        if server is not None and server.with_name("llama-quantize").is_file():
            return server.with_name("llama-quantize")
        found = shutil.which("llama-quantize")
        return Path(found) if found else None

    def tips(self, probed: Mapping[str, Installed | None]) -> list[str]:
        return []

    def devices(self, options: Options) -> int:
        return 0  # every visible GPU: layers split by free memory (--split-mode layer)

    def resources(self, options: Options, installed: Installed, hw: Hardware,
                  budget: Budget) -> Resources:
        """RPC workers' memory (declared, else asked through llama-server) and the layer split."""
        opts = options if isinstance(options, LlamaCppOptions) else LlamaCppOptions()
        if not opts.rpc_workers:
            return Resources(notes=(llamacpp_placement.fit_note(hw),) if self._fits(
                opts, installed) else ())
        declared = opts.worker_memory_gb
        if len(declared) == len(opts.rpc_workers):
            workers = [llamacpp_rpc.Worker(a, from_gib(m), from_gib(m))
                       for a, m in zip(opts.rpc_workers, declared, strict=True)]
        elif installed.path and not installed.assumed:
            workers = llamacpp_rpc.ask_workers(installed.path, list(opts.rpc_workers))
        else:
            workers = []
        if not workers:
            raise ProfileError("cannot tell the RPC workers' memory; start them (`specctl "
                               "worker up --port P` on each host) or set "
                               "llamacpp.worker_memory_gb")
        split = llamacpp_rpc.split_by_memory(workers)
        each = ", ".join(f"{w.address} {gib(w.free_bytes)}" for w in workers)
        return Resources(
            extra_bytes=sum(w.free_bytes for w in workers),
            why=f"{len(workers)} RPC workers ({each} free) + this machine {gib(budget.limit)}",
            options=opts.model_copy(update={"tensor_split": split}),
            notes=(f"RPC: the target's layers are split across {len(workers)} workers by free "
                   f"memory ({', '.join(f'{s:.0%}' for s in split)}); the draft stays "
                   f"{'on this machine' if opts.draft_local else 'with them'}.",))

    def shares_weights(self, plan: Plan) -> bool:
        """llama-server mmaps the GGUF: on the CPU and on Metal (unified memory) two servers of
        the same file share its pages; on CUDA each copies the weights to its GPU, and with
        RPC workers each server loads the model onto the workers again."""
        return plan.hardware.kind in ("cpu", "metal") and not options_of(
            plan, LlamaCppOptions).rpc_workers

    def remembers(self, plan: Plan) -> bool:
        """ngram-mod's hash pool and ngram-cache's dynamic cache live as long as the server
        (measured: a repeated chat prompt drafted 47 of 47 tokens, 10.6 -> 26.8 tok/s)."""
        return plan.speculative and bool(llamacpp_spec.REMEMBERING & set(plan.methods))

    def launch(self, plan: Plan, installed: Installed) -> Launch:
        llamacpp_spec.check(plan, installed.methods, installed.chains, installed.version)
        opts = options_of(plan, LlamaCppOptions)
        a = _Argv(installed, installed.path or "llama-server")
        _model(a, plan.target, "-m", "-hf")
        a.add("--host", plan.host)
        a.add("--port", plan.port)
        # each slot its own `plan.context` tokens (-c is shared out among the slots): a server
        # bench or tune starts with more slots than planned (8 for the quality check) holds
        # more KV than the plan, never less context per request
        a.add("-c", plan.context * max(plan.parallel, 1))
        a.add("-np", plan.parallel)
        a.optional("-a", plan.profile)  # the model name clients see (llama-server accepts any)
        if plan.threads:
            a.add("-t", plan.threads)
        fit = self._fits(opts, installed)
        for flag in llamacpp_placement.target_flags(plan, fit, bool(opts.rpc_workers)):
            a.add(*flag)
        if opts.rpc_workers:
            a.add("--rpc", ",".join(opts.rpc_workers))
            if opts.tensor_split and plan.hardware.kind == "cpu":  # RPC devices are the only ones
                a.add("-ts", ",".join(f"{x:g}" for x in opts.tensor_split))
        a.add("--metrics")
        if plan.cache_type != "f16":
            a.add("-ctk", plan.cache_type)
            a.add("-ctv", plan.cache_type)
            if installed.dialect == LEGACY_DIALECT:
                a.add("-fa")  # a quantised V cache needs flash attention (2026 builds: auto)
        self._speculative(a, plan, opts, installed.dialect)
        a.argv += self.extra_args(plan.extra_args, installed)
        env_from = {"LLAMA_API_KEY": plan.api_key_env} if plan.api_key_env else {}
        return Launch.http(a.argv, plan.host, plan.port, env_from=env_from, model=plan.profile)

    @staticmethod
    def _speculative(a: _Argv, plan: Plan, opts: LlamaCppOptions, dialect: str) -> None:
        names = FLAGS[dialect]

        def draft_extras(a: _Argv) -> None:
            for flag in llamacpp_placement.draft_flags(plan, bool(opts.rpc_workers),
                                                       opts.draft_local):
                a.add(*flag)
            if plan.cache_type != "f16":
                a.add(names["ctk_draft"], plan.cache_type)
                a.add(names["ctv_draft"], plan.cache_type)
            if opts.spec_synth_rates:
                a.add("--spec-synth-rates", ",".join(f"{r:g}" for r in opts.spec_synth_rates))

        llamacpp_spec.speculative(a, plan, opts, dialect, _model, draft_extras)

    @staticmethod
    def _fits(opts: LlamaCppOptions, installed: Installed) -> bool:
        return llamacpp_placement.uses_fit(opts.fit, installed.flags, bool(opts.rpc_workers))

    def placement(self, log: str) -> str:
        return llamacpp_placement.chosen(log)

    def owns(self, flag: str) -> bool:
        return super().owns(flag) or flag.startswith(("--spec-", "--draft"))

    def rejecting(self, plan: Plan, installed: Installed) -> Plan | None:
        """`--spec-synth-rates 0,...`: the build drafts and verifies, then rejects every draft."""
        if not plan.speculative or "--spec-synth-rates" not in installed.flags:
            return None
        opts = options_of(plan, LlamaCppOptions)
        return plan.but(options=opts.model_copy(update={"spec_synth_rates": (0.0,) * plan.k}))

    def worker(self, installed: Installed, host: str, port: int,
               threads: int | None) -> Launch:
        """`rpc-server` next to this llama-server: lends this machine's memory and compute."""
        if installed.path is None:
            raise BackendError("rpc-server needs an installed llama.cpp build; "
                               "`specctl backend install llamacpp` first")
        program = rpc_server_of(installed)
        if not program.is_file():
            raise BackendError(f"no rpc-server next to {installed.path}; rebuild with "
                               "`specctl backend install llamacpp --rebuild` (it builds with "
                               "RPC)")
        argv = [str(program), "-H", host, "-p", str(port)]
        if threads:
            argv += ["-t", str(threads)]
        return Launch(argv=tuple(argv), health_url=f"tcp://{url_host(host)}:{port}",
                      base_url=f"tcp://{url_host(host)}:{port}")

    def structured(self, plan: Plan, installed: Installed) -> frozenset[str]:
        """A JSON schema is kept by a grammar (`response_format`); tool calls are the model's
        Jinja chat template's, parsed from its reply, on chat/completions and /v1/messages:
        with Jinja on, by default in builds that have `--no-jinja` (earlier ones need
        `--jinja`). A template without tools answers with text, which is compared too."""
        args = plan.extra_args
        jinja = ("--jinja" in args or "--no-jinja" in installed.flags) and \
            "--no-jinja" not in args
        return frozenset({"json_schema", *(("tools", "tool_use") if jinja else ())})

    def spec_stats(self, endpoint: Endpoint) -> SpecStats:
        return prometheus.spec_stats(prometheus.fetch(endpoint), "llamacpp:", "llamacpp /metrics")

    def malformed(self, status: int, message: str) -> bool:
        """llama-server answers a request it cannot read with 500: its JSON library's error
        (`[json.exception.type_error.302] type must be string`), its chat parser's (`Failed to
        parse messages: Missing 'role'`) or an input the model does not take (`image input is
        not supported`)."""
        return status == 500 and bool(_MALFORMED.search(message))

    def reply_stats(self, reply: Mapping[str, Any]) -> SpecStats | None:
        """llama-server's `timings` of one reply (its last stream chunk carries them too)."""
        return request_stats(dict(reply)) if isinstance(reply.get("timings"), Mapping) else None

    def uncached(self) -> Mapping[str, Any]:
        """llama-server keeps earlier prompts (the slot's and, in RAM, others': a prompt asked
        again had 1079 of its 1080 tokens cached on cpu-demo, its time to first token 0.46 s
        for 34 s): `cache_prompt` false prefills it anew."""
        return {"cache_prompt": False}

    def prompt_tokens(self, reply: Mapping[str, Any]) -> int | None:
        """llama-server's `timings` (its last stream chunk carries them, usage or not): the
        prompt's tokens taken from its cache (`cache_n`) and those prefilled (`prompt_n`)."""
        timings = reply.get("timings")
        if not isinstance(timings, Mapping):
            return None
        counts = [timings.get("cache_n", 0), timings.get("prompt_n")]
        if not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in counts):
            return None
        return int(counts[0]) + int(counts[1])

    def prefill_timing(self, reply: Mapping[str, Any]) -> tuple[int, float] | None:
        """llama-server's own `timings`: the prompt's tokens prefilled and their time."""
        timings = reply.get("timings")
        if not isinstance(timings, Mapping):
            return None
        n, ms = timings.get("prompt_n"), timings.get("prompt_ms")
        if not (isinstance(n, int) and not isinstance(n, bool) and n > 0
                and isinstance(ms, (int, float)) and not isinstance(ms, bool) and ms >= 0):
            return None
        return n, float(ms) / 1000

    def decode_timing(self, reply: Mapping[str, Any]) -> tuple[int, float] | None:
        """llama-server's own `timings` of the reply: decode tokens and tokens/s."""
        timings = reply.get("timings") or {}
        if not isinstance(timings, Mapping) or not timings.get("predicted_per_second"):
            return None
        return int(timings.get("predicted_n", 0)), float(timings["predicted_per_second"])


def _toolchain() -> llamacpp_build.Toolchain:
    from specctl.orchestrator.machine import hardware

    gpu = bool(shutil.which("nvcc")) and bool(hardware.detect_nvidia())
    return llamacpp_build.toolchain(llamacpp_build.cpu_signature(), gpu)


def rpc_server_of(installed: Installed) -> Path:
    """Where a build keeps its rpc-server: next to llama-server."""
    return Path(installed.path or "llama-server").with_name("rpc-server")


def request_stats(response: dict[str, Any]) -> SpecStats:
    """Per-request counters `timings.draft_n`/`draft_n_accepted` (absent if nothing drafted)."""
    timings = response.get("timings") or {}
    return SpecStats(drafted=int(timings.get("draft_n", 0)),
                     accepted=int(timings.get("draft_n_accepted", 0)), source="llamacpp timings")


def _model(a: _Argv, info: ModelInfo, file_flag: str, hf_flag: str) -> None:
    """A local file; a model not on disk by its Hugging Face id, which llama-server downloads."""
    if info.path is not None:
        a.add(file_flag, info.path)
    elif info.ref.startswith("hf:"):
        a.add(hf_flag, info.ref.removeprefix("hf:"))
    else:
        raise BackendError(f"{info.ref} is not on disk; fetch it first")




ADAPTER = LlamaCpp
