"""TGI (text-generation-inference): plan -> `text-generation-launcher` argv, run natively or in
TGI's container image (docker or podman), with n-gram or Medusa speculation, and its one
speculation counter.

TGI cannot run here (no GPU, no container engine): every launcher argument list is checked
against the launcher options recorded from the v3.3.7 docs (tgi_launcher, dialects/) before it
is returned; dialects/TGI_NOTES.md holds the facts used below, with their sources.

- Medusa is not a method TGI is told: a `--model-id` whose config.json has `medusa_num_heads`
  always loads its heads (all of them without `--speculate`); any other model with
  `--speculate N` uses n-gram lookup. So a Medusa target gets `--speculate 0` when a plan does
  not speculate, and refuses n-gram.
- The API key travels in the launcher's API_KEY variable (into a container by name only),
  never in specctl's argv. (The launcher itself hands it to its router as `--api-key`.)
- Upstream is in maintenance mode (README at v3.3.7): on CUDA TGI ranks after vLLM and
  llama.cpp, so it runs when a profile asks for it or it is all the machine has.
"""

from __future__ import annotations

import functools
import math
import os
import re
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, Field, field_validator, model_validator

from specctl.adapters import prometheus, tgi_container, tgi_launcher
from specctl.adapters.tgi_container import CONTAINER_PORT, DATA
from specctl.adapters.tgi_launcher import LauncherOption
from specctl.orchestrator.contract.adapter import Adapter, Resources, options_of
from specctl.orchestrator.contract.dirs import Dirs
from specctl.orchestrator.contract.hardware import Hardware
from specctl.orchestrator.contract.launch import Endpoint, Installed, Launch
from specctl.orchestrator.contract.memory import Budget
from specctl.orchestrator.contract.model import ModelInfo
from specctl.orchestrator.contract.options import Options
from specctl.orchestrator.contract.plan import Plan
from specctl.orchestrator.contract.settings import BackendSettings, EnvVar, load_settings
from specctl.orchestrator.contract.stats import SpecStats
from specctl.orchestrator.errors import BackendError, ProfileError

NAME = "tgi"
DIALECT = tgi_launcher.VERSION  # the newest (and only) recorded launcher reference
LAUNCHER = "text-generation-launcher"
IMAGE = f"ghcr.io/huggingface/text-generation-inference:{tgi_launcher.VERSION}"
ENGINES = ("docker", "podman")
METHODS = frozenset({"none", "ngram", "medusa"})
KV_DTYPE = {"fp8": "fp8_e4m3fn"}  # specctl cache type -> --kv-cache-dtype
SKIPPED = "tgi_request_skipped_tokens"
# Set from the plan; extra_args may not set them again (the key never goes in argv at all).
OWN_FLAGS = frozenset({
    "--model-id", "--revision", "--hostname", "--port", "--prometheus-port", "--num-shard",
    "--sharded", "--max-input-tokens", "--max-input-length", "--max-total-tokens",
    "--max-batch-prefill-tokens", "--cuda-memory-fraction", "--usage-stats", "--speculate",
    "--kv-cache-dtype", "--api-key"})
# The image's entrypoint runs `exec text-generation-launcher $@` unquoted: an argument with
# white space is split in two, and one with a wildcard may be globbed.
_UNSAFE = re.compile(r"[\s*?\[\]]")
_SIZE = re.compile(r"\d+[bkmgBKMG]?")


@functools.cache
def recorded() -> dict[str, LauncherOption]:
    """The launcher options of the recorded reference (dialects/tgi-launcher-<VERSION>.md)."""
    return tgi_launcher.load(DIALECT)


# What `extra_args` may hold: tuning flags. Everything else the launcher takes either comes from
# the plan (OWN_FLAGS), runs code (--trust-remote-code: the typed `trust_remote_code` option),
# reads or writes host paths (caches, tokenizer config, LoRA adapters, the shard socket), sends
# data away (OTLP, ngrok) or sets the environment (-e): a profile may choose none of those.
TUNING_FLAGS = frozenset({
    "--validation-workers", "--quantize", "--dtype", "--max-concurrent-requests",
    "--max-best-of", "--max-stop-sequences", "--max-top-n-tokens", "--waiting-served-ratio",
    "--max-batch-total-tokens", "--max-waiting-tokens", "--max-batch-size", "--cuda-graphs",
    "--disable-custom-kernels", "--rope-scaling", "--rope-factor", "--json-output",
    "--otlp-service-name", "--cors-allow-origin", "--watermark-gamma", "--watermark-delta",
    "--disable-grammar-support", "--max-client-batch-size", "--payload-limit",
    "--enable-prefill-logprobs", "--graceful-termination-timeout"})
# Keys an earlier [tgi] section had, now chosen only on the user's own machine.
NOT_IN_PROFILES = {
    "image": "a profile cannot choose the container image; set SPECCTL_TGI_IMAGE on your own "
             "machine to run another",
    "hf_cache": "a profile cannot choose what is mounted: the container gets the Hugging Face "
                "cache (HF_HOME, else ~/.cache/huggingface); set HF_HOME to move it",
    "hf_hub_cache": "a profile cannot choose what is mounted: the container gets the hub "
                    "cache HF_HUB_CACHE names; set HF_HUB_CACHE to move it"}
_IMAGE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/:@+-]{0,254}")


class TgiOptions(Options):
    """The `[tgi]` section of a profile. It chooses no image, mount or host path: those come
    from SPECCTL_TGI_IMAGE and the user's Hugging Face cache (see `Mounted`)."""

    engine: Literal["auto", "native", "docker", "podman"] = Field(
        "auto", description="how to run TGI: its launcher on this machine, or its container "
        "image; auto: what the probe found (the container when planning for another machine)")
    num_shard: int | None = Field(None, ge=1, le=64, description="GPUs to shard the target "
                                  "over (tensor parallel, one machine); default 1")
    revision: str | None = Field(None, min_length=1, max_length=256, pattern=r"^[^\s-][^\s]*$",
                                 description="branch, tag or commit of the model repo (e.g. "
                                 "refs/pr/1); for a Medusa repo it picks the heads, the base "
                                 "model is read at main")
    shm_size: str = Field("1g", description="container shared memory (NCCL between shards)")
    prometheus_port: int | None = Field(None, ge=1, le=65535, description="native: the "
                                        "launcher's extra metrics listener (default 9000; TGI "
                                        "fails to start when it is taken)")
    trust_remote_code: bool = Field(False, description="let TGI run code shipped with the "
                                    "model (--trust-remote-code); only for models you trust")
    extra_args: tuple[str, ...] = Field((), max_length=64, description="more launcher "
                                        "arguments: tuning flags only (see TUNING_FLAGS), "
                                        "checked against the recorded launcher options")

    @model_validator(mode="before")
    @classmethod
    def _not_from_profiles(cls, data: Any) -> Any:
        if cls is TgiOptions and isinstance(data, Mapping):
            for key, why in NOT_IN_PROFILES.items():
                if key in data:
                    raise ValueError(f"'{key}': {why}")
        return data

    @field_validator("shm_size")
    @classmethod
    def _size(cls, v: str) -> str:
        if not _SIZE.fullmatch(v):
            raise ValueError(f"'{v}' is not a size like 1g, 512m or 2147483648")
        return v

    @field_validator("extra_args")
    @classmethod
    def _launcher_args(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        if any(len(arg) > 4096 for arg in v):
            raise ValueError("an argument longer than 4096 characters")
        problems = tgi_launcher.validate(v, recorded())
        if problems:
            raise ValueError(f"text-generation-launcher {DIALECT} would refuse them: "
                             + "; ".join(problems))
        for arg in v:
            if not arg.startswith("-"):
                continue  # a value, checked with its flag below
            flag = arg.split("=", 1)[0]
            if flag == "--api-key":
                raise ValueError("the API key never goes in argv: name its variable in "
                                 "server.api_key_env")
            if flag == "--trust-remote-code":
                raise ValueError("remote code is turned on by `trust_remote_code = true` in "
                                 "[tgi], nowhere else")
            if flag in OWN_FLAGS:
                raise ValueError(f"{flag} is set from the profile; change the profile (or "
                                 "this section's own keys) instead")
            if flag not in TUNING_FLAGS:
                raise ValueError(f"{flag} is not a tuning flag a profile may pass (host "
                                 "paths, remote code, the environment and outside endpoints "
                                 "are not for profiles); remove it")
        return v


class Mounted(TgiOptions):
    """The `[tgi]` options of a plan for the container: with the user's Hugging Face cache
    dirs filled in by `Tgi.resources` (from HF_HOME / HF_HUB_CACHE, never from a profile)."""

    hf_cache: str | None = Field(None, description="host folder mounted as /data, the image's "
                                 "HF_HOME (models in its hub/, the login token)")
    hf_hub_cache: str | None = Field(None, description="a hub cache outside hf_cache, mounted "
                                     "as /data/hub")


def check_image(image: str) -> str:
    """A container image reference (SPECCTL_TGI_IMAGE): one argv word, never a flag."""
    if not _IMAGE.fullmatch(image):
        raise ValueError(f"'{image}' is not a container image reference like {IMAGE}")
    return image


class _Settings(BackendSettings):
    tgi_launcher: Path | None = Field(None, description="use this text-generation-launcher")
    tgi_image: str = Field(IMAGE, description="run this container image, not the recorded one")

    @field_validator("tgi_image")
    @classmethod
    def _image(cls, v: str) -> str:
        return check_image(v)


def parse_version(text: str) -> str | None:
    """'text-generation-launcher 3.3.6-dev0' (clap's `--version`) -> '3.3.6-dev0'."""
    m = re.search(r"text-generation-launcher\s+(\S+)", text) or re.search(
        r"\b(\d+\.\d+\.\d+\S*)", text)
    return m.group(1) if m else None


def installed_of(version: str, path: str | None, assumed: bool = False) -> Installed:
    return Installed(backend=NAME, version=version, dialect=DIALECT, path=path,
                     flags=frozenset(recorded()), methods=METHODS, assumed=assumed)


def engine_of(opts: TgiOptions, installed: Installed) -> str:
    """native, docker or podman: the profile's choice, else what the probe found (a container
    when nothing was probed: the documented way to run TGI)."""
    if opts.engine != "auto":
        return opts.engine
    return _installed_kind(installed) or "docker"


def _installed_kind(installed: Installed) -> str | None:
    if installed.path is None:
        return None
    name = Path(installed.path).name
    return name if name in ENGINES else "native"


def repo_id(info: ModelInfo) -> str | None:
    """The Hugging Face repo of an `hf:org/repo[:quant]` reference."""
    return info.ref.removeprefix("hf:").split(":")[0] if info.ref.startswith("hf:") else None


def native_model(info: ModelInfo) -> str:
    """A Hugging Face model by its repo id (TGI finds it in the HF cache, at `revision`), a local
    folder by its path."""
    repo = repo_id(info)
    if repo is not None:
        return repo
    if info.path is not None:
        return str(info.path)
    raise BackendError(f"{info.ref} is neither on disk nor a Hugging Face repo; TGI serves a "
                       "Hugging Face model (hf:org/repo) or a local model folder")




def speculate(plan: Plan) -> str | None:
    """`--speculate` for this plan; BackendError with what to do when TGI cannot do it."""
    target = plan.target
    medusa = target.kind == "medusa"
    if plan.method == "medusa" and plan.speculative:
        if not medusa or target.spec_heads < 1:
            raise BackendError(
                f"draft_method = \"medusa\" needs a Medusa model as the target (its config.json "
                f"has medusa_num_heads); {target.name} has no Medusa heads: target a Medusa repo "
                "(e.g. hf:FasterDecoding/medusa-vicuna-7b-v1.3) or use draft = \"ngram\"")
        if plan.k > target.spec_heads:
            raise BackendError(
                f"k = {plan.k} but {target.name} has {target.spec_heads} Medusa heads (TGI "
                f"refuses --speculate above them); set k = {target.spec_heads} or less")
        return str(plan.k)
    if plan.method == "ngram" and plan.speculative:
        if medusa:
            raise BackendError(
                f"{target.name} is a Medusa model: TGI always speculates with its "
                f"{target.spec_heads} heads, never n-gram; set draft_method = \"medusa\" (and "
                "leave draft unset) or target its base model for n-gram")
        return str(plan.k)
    return "0" if medusa else None  # a Medusa model speculates unless told 0


def launcher_args(plan: Plan, opts: TgiOptions, model: str, host: str, port: int,
                  native: bool) -> list[str]:
    """What follows `text-generation-launcher` (or the image)."""
    context = plan.context
    args = ["--model-id", model]
    if opts.revision:
        args += ["--revision", opts.revision]
    args += ["--hostname", host, "--port", str(port)]
    if native and opts.prometheus_port is not None:
        args += ["--prometheus-port", str(opts.prometheus_port)]
    shards = opts.num_shard or plan.memory.budget.devices or 1
    # one prompt may fill the context but the last token; speculation turns prefill chunking
    # off, and then the router wants max-batch-prefill-tokens >= max-input-tokens
    args += ["--num-shard", str(shards), "--max-input-tokens", str(context - 1),
             "--max-total-tokens", str(context), "--max-batch-prefill-tokens", str(context - 1),
             "--cuda-memory-fraction", str(plan.gpu_utilization), "--usage-stats", "off"]
    spec = speculate(plan)
    if spec is not None:
        args += ["--speculate", spec]
    if opts.trust_remote_code:
        args.append("--trust-remote-code")
    if plan.cache_type in KV_DTYPE:
        args += ["--kv-cache-dtype", KV_DTYPE[plan.cache_type]]
    elif plan.cache_type not in ("f16", "bf16"):
        raise BackendError(f"TGI has no '{plan.cache_type}' KV cache; use cache_type = \"fp8\" "
                           "or \"auto\"")
    return [*args, *opts.extra_args, *plan.extra_args]


def check_args(args: Sequence[str], container: bool) -> None:
    """The launcher arguments against the recorded options (and, for the image's entrypoint,
    free of what an unquoted `$@` would split or glob)."""
    problems = tgi_launcher.validate(args, recorded())
    if container:
        problems += [f"{a!r} would be split or globbed by the image's entrypoint"
                     for a in args if _UNSAFE.search(a)]
    if problems:
        raise BackendError(f"text-generation-launcher {DIALECT} would refuse this plan: "
                           f"{'; '.join(problems)}; check the [tgi] section of the profile")


class Tgi(Adapter):
    name: ClassVar[str] = NAME
    owned_flags: ClassVar[frozenset[str]] = OWN_FLAGS
    default_quant: ClassVar[str] = "BF16"
    vocab_rule: ClassVar[str] = "identical"  # no draft model in TGI anyway
    cache_types: ClassVar[tuple[str, ...]] = ("f16", "fp8")
    default_slots: ClassVar[int] = 128  # the launcher's own --max-concurrent-requests
    # after vLLM (0) and llama.cpp (1), and after Ollama (2) too rather than tied with it
    preference: ClassVar[Mapping[str, int]] = {"cuda": 3}
    formats: ClassVar[frozenset[str]] = frozenset({"hf"})
    # api_paths: the default two (TGI has no /v1/embeddings: that is TEI)
    install_hint: ClassVar[str] = (
        "TGI's upstream is in maintenance mode, so on CUDA prefer vLLM (`pip install "
        "'specctl[vllm]'`); for TGI itself: docker or podman with the NVIDIA Container Toolkit "
        f"(`docker pull {IMAGE}`), or text-generation-launcher on PATH (or "
        "SPECCTL_TGI_LAUNCHER)")
    no_spec_hint: ClassVar[str] = ("TGI speculates with n-gram (draft = \"ngram\") or a Medusa "
                                   "model's own heads (draft_method = \"medusa\"); for a draft "
                                   "model use vLLM or llama.cpp")
    options: ClassVar[type[Options]] = TgiOptions
    settings: ClassVar[tuple[type[BaseModel], ...]] = (_Settings,)
    engine_env: ClassVar[tuple[EnvVar, ...]] = (
        EnvVar("CUDA_VISIBLE_DEVICES", "the GPUs the launcher may use"),
        EnvVar("DOCKER_HOST", "the docker daemon the container runs on"),
        EnvVar("CONTAINER_HOST", "the podman service the container runs on"),
    )

    def __init__(self, launcher: Path | None = None, timeout: float = 5.0,
                 image: str = IMAGE) -> None:
        self.launcher, self.timeout, self.image = launcher, timeout, check_image(image)

    @classmethod
    def create(cls, dirs: Dirs) -> Tgi:
        settings = load_settings(_Settings.from_environ)
        return cls(launcher=settings.tgi_launcher, image=settings.tgi_image)

    # -- what is installed -------------------------------------------------------------------
    def probe(self) -> Installed | None:
        """text-generation-launcher (configured or on PATH); else a container engine that
        answers (the image is pulled on first start)."""
        found = self.launcher if self.launcher is not None and self.launcher.is_file() else None
        on_path = shutil.which(LAUNCHER)
        launcher = found or (Path(on_path) if on_path else None)
        if launcher is not None:
            version = parse_version(self._ask([str(launcher), "--version"]) or "")
            if version:
                return installed_of(version, str(launcher))
        for engine in ENGINES:
            path = shutil.which(engine)
            field = "Server" if engine == "docker" else "Client"  # docker: the daemon answers
            if path and self._ask([path, "version", "--format", f"{{{{.{field}.Version}}}}"]):
                return installed_of(tgi_container.image_tag(self.image), path)
        return None

    def _ask(self, argv: list[str]) -> str | None:
        """stdout of a quick probe command; None when it fails or says nothing."""
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=self.timeout,
                                  check=False)
        except (OSError, subprocess.SubprocessError):
            return None
        out = (done.stdout + done.stderr).strip()
        return out if done.returncode == 0 and out else None

    def assumed(self) -> Installed:
        return installed_of(DIALECT, None, assumed=True)

    # -- planning ----------------------------------------------------------------------------
    def devices(self, options: Options) -> int:
        opts = options if isinstance(options, TgiOptions) else TgiOptions()
        return opts.num_shard or 1

    def resources(self, options: Options, installed: Installed, hw: Hardware,
                  budget: Budget) -> Resources:
        """No memory beyond this machine; for the container, the user's Hugging Face cache to
        mount, filled in here so that `launch` stays pure."""
        opts = options if isinstance(options, TgiOptions) else TgiOptions()
        if engine_of(opts, installed) == "native" or isinstance(opts, Mounted):
            return Resources()
        home, hub = tgi_container.default_hf_dirs(os.environ, Path.home())
        filled = Mounted(**dict(opts), hf_cache=home, hf_hub_cache=hub)
        also = f", and the hub cache {filled.hf_hub_cache} as /data/hub" \
            if filled.hf_hub_cache else ""
        return Resources(options=filled, notes=(
            f"TGI container: the Hugging Face cache {home} is mounted as /data (the image's "
            f"HF_HOME){also}, so downloads are kept.",))

    def check(self, options: Options, hw: Hardware, target: ModelInfo,
              draft: ModelInfo | None) -> list[str]:
        opts = options if isinstance(options, TgiOptions) else TgiOptions()
        if hw.kind != "cuda":
            raise ProfileError(f"TGI serves on NVIDIA CUDA GPUs here, and {hw.describe()} has "
                               "none; take \"tgi\" out of the profile's backend list")
        if hw.nodes > 1:
            raise ProfileError("TGI shards over the GPUs of one machine; plan a cluster with "
                               "vLLM instead")
        gpus = hw.gpus_per_node or len(hw.gpus)
        shards = opts.num_shard or 1
        if shards > gpus:
            raise ProfileError(f"[tgi] num_shard = {shards}, but {hw.name} has {gpus} GPUs")
        for what, count in (("attention heads", target.heads), ("KV heads", target.kv_heads)):
            if count and count % shards:  # TGI's sharded attention (flash_llama_modeling.py)
                raise ProfileError(f"[tgi] num_shard = {shards} does not divide {target.name}'s "
                                   f"{count} {what}; use a divisor of {count}")
        notes = [f"TGI: {shards} shard(s) over {shards} of {gpus} GPUs (--num-shard), each "
                 "limited by --cuda-memory-fraction = memory.gpu_utilization."]
        if target.kind == "medusa":
            notes.append(f"TGI: {target.name} carries {target.spec_heads} Medusa heads; TGI "
                         "speculates with them (k <= heads), never with n-gram.")
        return notes

    # -- running -----------------------------------------------------------------------------
    def launch(self, plan: Plan, installed: Installed) -> Launch:
        if plan.method not in installed.methods:
            raise BackendError(f"TGI has no '{plan.method}' speculation; it has "
                               f"{', '.join(sorted(installed.methods))}")
        opts = options_of(plan, TgiOptions)
        self.extra_args(plan.extra_args, installed)  # checked here; launcher_args adds them
        engine = engine_of(opts, installed)
        program = installed.path if installed.path and _installed_kind(installed) == engine \
            else (LAUNCHER if engine == "native" else engine)
        if engine == "native":
            args = launcher_args(plan, opts, native_model(plan.target), plan.host, plan.port,
                                 native=True)
            argv = [program, *args]
        else:
            model, mount = tgi_container.container_model(
                repo_id(plan.target), plan.target.path, lambda: native_model(plan.target))
            args = launcher_args(plan, opts, model, "0.0.0.0", CONTAINER_PORT, native=False)
            argv = tgi_container.run_argv(
                engine, program, plan.profile, plan.host, plan.port, opts.shm_size,
                [(getattr(opts, "hf_cache", None), DATA),
                 (getattr(opts, "hf_hub_cache", None), DATA / "hub")], mount,
                bool(plan.api_key_env), self.image, args)
        check_args(args, container=engine != "native")
        env_from = {"API_KEY": plan.api_key_env} if plan.api_key_env else {}
        return Launch.http(argv, plan.host, plan.port, env_from=env_from, model="tgi")

    def spec_stats(self, endpoint: Endpoint) -> SpecStats:
        return stats_from_metrics(prometheus.fetch(endpoint))


def stats_from_metrics(text: str) -> SpecStats:
    """`tgi_request_skipped_tokens`, a summary recorded once per request per step with the
    speculated tokens accepted in it: `_sum` = accepted tokens. TGI counts no drafted tokens
    (and its `_count` includes every prefill), so drafted and drafts stay 0: no rate."""
    from prometheus_client.parser import text_string_to_metric_families

    accepted = 0.0
    try:
        for family in text_string_to_metric_families(text):
            accepted += sum(s.value for s in family.samples if s.name == f"{SKIPPED}_sum"
                            and math.isfinite(s.value))  # +Inf or NaN: no count
    except ValueError as exc:
        raise BackendError(f"TGI's /metrics is not Prometheus text ({exc})") from None
    return SpecStats(accepted=int(accepted),
                     source=f"tgi /metrics {SKIPPED}_sum (accepted speculative tokens; TGI "
                            "does not count drafted tokens, so no acceptance rate)")


ADAPTER = Tgi
