"""Named profiles: TOML files validated by pydantic (`extra="forbid"`), with SPECCTL_* overrides.

The core sections are defined here; each backend adds its own section (`[llamacpp]`, `[vllm]`,
...) with its adapter's Options model, so a profile is validated as one model all the same.

Shipped profiles live in `profiles/` (inside the package); user profiles in the user config dir
shadow them. `--profile` takes a name or a path to a `.toml` file. Environment variables override
single fields, e.g. `SPECCTL_SERVER__PORT=9000` or `SPECCTL_K=4` (config/overrides.py).

A profile is untrusted input (shared, downloaded): it is read bounded, validated strictly (no
`true` for a number, no NaN, limits on every count and size), and its name is a strict
identifier, checked here once, since it becomes file, unit and label names.
"""

from __future__ import annotations

import difflib
import functools
import os
import sys
import typing
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    create_model,
    field_validator,
    model_validator,
)

from specctl.orchestrator.config import overrides, problems
from specctl.orchestrator.contract.dirs import Dirs
from specctl.orchestrator.contract.launch import host_problem
from specctl.orchestrator.contract.options import Options
from specctl.orchestrator.errors import (
    BackendError,
    BadInputError,
    NameRefusedError,
    ProfileError,
)
from specctl.orchestrator.files import (
    UnreadableError,
    check_name,
    expand_user,
    inside,
    read_text,
)

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

NgramMethod = Literal["ngram", "ngram-mod", "ngram-map-k", "ngram-map-k4v", "ngram-cache"]
NGRAM_METHODS: tuple[str, ...] = typing.get_args(NgramMethod)
DRAFTLESS = (*NGRAM_METHODS, "none")
MAX_K = 32
MAX_COPY_K = 128  # a saved setting's longest: n-gram methods copy long (llama.cpp's ngram-mod 64)
MAX_GPUS = 64  # per machine (a node); 8 or 16 in the largest today
MAX_NODES = 1024  # machines in a cluster, all node kinds together
MAX_CLUSTER_GPUS = 16384  # GPUs in a cluster (the largest today have a few thousand)
MAX_GB = 1 << 16  # memory of one device or machine, GB
# Limits shared with what is read back from disk (a tuned result), as fresh input is held to.
PMin = Annotated[float, Field(ge=0, le=1)]
EnvName = Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")]


class Strict(BaseModel):
    """No unknown keys, no `true` read as 1, no "8080" read as a number, no NaN or infinity,
    no NUL in text (no file name can hold one)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)

    @field_validator("*", mode="before")
    @classmethod
    def _no_nul(cls, value: Any) -> Any:
        return no_nul(value)


def no_nul(value: Any) -> Any:
    """`value` unless it is text (or a list of texts) holding a NUL character."""
    items = value if isinstance(value, (list, tuple)) else [value]
    if any(isinstance(v, str) and "\x00" in v for v in items):
        raise ValueError("text with a NUL character; no name or path can hold one")
    return value


class Server(Strict):
    host: str = Field("127.0.0.1", max_length=255)
    port: int = Field(8080, ge=1, le=65535)
    context: int = Field(8192, ge=256, le=1 << 24)
    threads: int | None = Field(None, ge=1, le=4096, description="CPU threads; default: "
                                "physical cores")
    parallel: Annotated[int, Field(ge=1, le=4096)] | Literal["auto"] = Field(
        "auto", description="concurrent requests (slots); \"auto\": the engine's own default, as "
        "memory allows")
    api_key_env: EnvName | None = Field(None, description="environment variable holding the "
                                        "API key")

    @field_validator("host")
    @classmethod
    def _address(cls, v: str) -> str:
        problem = host_problem(v)
        if problem:
            raise ValueError(problem)
        return v


class Memory(Strict):
    budget_gb: float | None = Field(None, gt=0, le=MAX_GB * MAX_NODES,
                                    description="cap below what the machine has, GiB")
    gpu_utilization: float = Field(0.9, gt=0, le=1)
    ram_reserve_gb: float = Field(2.0, ge=0, le=MAX_GB, description="RAM left to the OS, "
                                  "GiB")
    cache_type: Literal["auto", "f16", "q8_0", "q4_0", "fp8"] = "auto"
    min_context: int = Field(2048, ge=256, le=1 << 24, description="never shrink context "
                             "below this")


class Speculative(Strict):
    p_min: PMin | None = Field(None, description="draft p-min, where the backend has one")
    ngram_min: int = Field(2, ge=1, le=64)
    ngram_max: int = Field(4, ge=1, le=64)
    chain: list[NgramMethod] = Field(
        default_factory=list, max_length=4, description="n-gram methods to draft with too, "
        "where the backend takes several at once (e.g. draft + ngram-mod)")

    @model_validator(mode="after")
    def _ngram_order(self) -> Speculative:
        if self.ngram_min > self.ngram_max:
            raise ValueError(f"ngram_min ({self.ngram_min}) is above ngram_max "
                             f"({self.ngram_max})")
        return self


class Sampling(Strict):
    """How clients sample from this server: `bench --quality` checks speculation at these."""

    temperature: float = Field(0.8, ge=0, le=2, allow_inf_nan=False)
    top_p: float = Field(0.95, gt=0, le=1, allow_inf_nan=False)


class Gateway(Strict):
    """How `specctl gateway` keeps this profile's server (one endpoint for every model)."""

    keep_alive: int = Field(600, ge=-1, le=30 * 86400, description="seconds an idle server "
                            "stays up behind the gateway (-1: until the gateway stops, 0: "
                            "stopped after each request)")
    tune_when_idle: bool = Field(True, description='with k = "auto" and no saved tune: tune in '
                                 "the background while the gateway is idle, and serve the "
                                 "result once it pays")
    route: bool = Field(True, description="serve each request from the setting its kind, "
                        "length and the load are served fastest by: the saved tune's winners "
                        "and no draft, learned from the requests served (one server each; "
                        "`up` too, where the servers share the weights)")
    explore: bool = Field(True, description="send a few requests of a kind to a setting not "
                          "yet measured on it (at most about one in ten, three of each), so "
                          "that the served requests can tell; false: tune's figures and what "
                          "is served decide alone")
    keep_traffic: int = Field(0, ge=0, le=10_000, description="keep the last N requests to "
                              "this model (their messages and sampling parameters, never a key "
                              "or header) in a 0600 file under the state dir, for `specctl "
                              "traffic` and `--prompts traffic`; 0: none (the default)")


class Node(Strict):
    """One kind of machine in a cluster: inline, or a recorded machine (JSON file)."""

    count: int = Field(1, ge=1, le=MAX_NODES)
    hardware: str | None = Field(None, description="a recorded machine JSON file")
    gpu: str = "GPU"
    gpus: int = Field(0, ge=0, le=MAX_GPUS)
    gpu_memory_gb: float = Field(0, ge=0, le=MAX_GB)
    ram_gb: float = Field(0, ge=0, le=MAX_GB)
    cores: int = Field(1, ge=1, le=4096)


class Cluster(Strict):
    """Beyond one machine: the machines planned as one (the engines' own distribution runs over
    them; each backend's section says how)."""

    nodes: list[Node] = Field(default_factory=list, max_length=MAX_NODES)

    @model_validator(mode="after")
    def _bounded(self) -> Cluster:
        machines = sum(n.count for n in self.nodes)
        if machines > MAX_NODES:
            raise ValueError(f"{machines} machines in all; at most {MAX_NODES}")
        gpus = sum(n.count * n.gpus for n in self.nodes)
        if gpus > MAX_CLUSTER_GPUS:
            raise ValueError(f"{gpus} GPUs in all; at most {MAX_CLUSTER_GPUS}")
        return self


class Profile(Strict):
    name: str = ""  # set from the file name unless the file names itself; checked on load
    description: str = ""
    target: str
    draft: str = Field("auto", description='"auto", a model reference, "ngram" (or another '
                       'n-gram method: "ngram-mod", "ngram-map-k", ...) or "none"')
    draft_method: Literal["draft", "eagle", "eagle3", "mtp", "medusa", "dflash", "dspark"] = \
        "draft"
    k: int | Literal["auto"] = "auto"
    backend: list[str] = Field(default_factory=list, description="preference order")
    extra_args: list[Annotated[str, Field(max_length=4096)]] = Field(
        default_factory=list, max_length=256, description="more engine arguments, each checked "
        "against the installed engine's flags (never host, port, API key, model or draft flags)")
    server: Server = Server()
    memory: Memory = Memory()
    speculative: Speculative = Speculative()
    sampling: Sampling = Sampling()
    cluster: Cluster = Cluster()
    gateway: Gateway = Gateway()

    @field_validator("backend")
    @classmethod
    def _known_backends(cls, v: list[str]) -> list[str]:
        from specctl.orchestrator.contract import registry as backends

        try:
            return [backends.canonical(name) for name in v]
        except BackendError as exc:  # an unknown or broken backend: the field's error
            raise ValueError(str(exc)) from None

    def section(self, backend: str) -> Options:
        """The backend's own section of this profile (its defaults when the file has none)."""
        found = getattr(self, backend, None)
        return found if isinstance(found, Options) else Options()

    @field_validator("name")
    @classmethod
    def _identifier(cls, v: str) -> str:
        try:
            return check_name(v, "profile name")
        except NameRefusedError as exc:
            raise ValueError(f"{exc}; rename the file or set `name`") from None

    @field_validator("k", mode="before")
    @classmethod
    def _k_number_or_auto(cls, v: Any) -> Any:
        if v == "auto" or (isinstance(v, int) and not isinstance(v, bool)):
            return v
        raise ValueError(f"must be a whole number from 1 to {MAX_K}, or \"auto\" (the tuned "
                         f"result, else the cost model), not {v!r}")

    @field_validator("k")
    @classmethod
    def _k_positive(cls, v: int | str) -> int | str:
        if isinstance(v, int) and not 1 <= v <= MAX_K:
            raise ValueError(f"k must be 1..{MAX_K} or \"auto\"")
        return v

    @property
    def draftless(self) -> bool:
        return self.draft in DRAFTLESS


@functools.cache
def profile_model() -> type[Profile]:
    """Profile with one optional section per backend, typed by that adapter's Options."""
    from specctl.orchestrator.contract import registry as backends

    sections: dict[str, Any] = {name: (cls.options, cls.options())
                                for name, cls in backends.adapter_classes().items()}
    return create_model("Profile", __base__=Profile, **sections)


def env_overrides(environ: Mapping[str, str] | None = None) -> overrides.Overrides:
    """SPECCTL_* variables that override profile fields (config/overrides.py)."""
    return overrides.read(profile_model(), os.environ if environ is None else environ)


def _merge(base: dict[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def shipped_dir() -> Path:
    return Path(str(resources.files("specctl.profiles")))


def new_path(name: str, dirs: Dirs, force: bool) -> Path:
    """Where `profiles new NAME` writes: refused (exit 2) when a profile of yours has the name,
    or a shipped one does (yours would shadow it for every command), unless `force`."""
    path = inside(dirs.profiles, name, ".toml", "profile name")
    if force:
        return path
    if path.exists():
        raise BadInputError(f"{path} exists; pick another name, or pass --force to replace it")
    if (shipped_dir() / f"{name}.toml").is_file():
        raise BadInputError(f"'{name}' is a shipped profile, and yours would shadow it for every "
                            "command; pick another name, or pass --force to shadow it")
    return path


def available(dirs: Dirs) -> dict[str, Path]:
    """Profile name -> file; user profiles shadow shipped ones."""
    found: dict[str, Path] = {}
    for folder in (shipped_dir(), dirs.profiles):
        if folder.is_dir():
            found.update({p.stem: p for p in sorted(folder.glob("*.toml"))})
    return found


def parse(text: str, name: str, source: str, cli: Mapping[str, Any] | None = None) -> Profile:
    """A profile from TOML text; the SPECCTL_* overrides, then the command line's (`cli`, nested
    like the TOML) merged over it."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ProfileError(f"{source}: not valid TOML ({exc})") from None
    except RecursionError:  # arrays or tables nested thousands deep
        raise ProfileError(f"{source}: nested too deep to be a profile; a profile is a few "
                           "flat tables") from None
    over = env_overrides()
    data = _merge(_merge(data, over.data), cli or {})
    data.setdefault("name", name)
    try:
        return profile_model().model_validate(data)
    except ValidationError as exc:
        raise ProfileError(problems.one_line(exc, profile_model(), source, over, cli)) from None
    except RecursionError:
        raise ProfileError(f"{source}: nested too deep to be a profile") from None


def load(ref: str, dirs: Dirs, cli: Mapping[str, Any] | None = None) -> Profile:
    """Load by name (user dir, then shipped) or by path to a .toml file."""
    return shown(ref, dirs, cli)[2]


def shown(ref: str, dirs: Dirs, cli: Mapping[str, Any] | None = None
          ) -> tuple[Path, str, Profile]:
    """The profile's file, its text and the profile (`profiles show`): one file read, one
    validation, whatever the file is called."""
    if not ref.strip():
        raise ProfileError("name a profile (`specctl profiles` lists them) or a .toml file")
    path = expand_user(ref)
    if ref.endswith(".toml") or path.is_file():
        if not path.is_file():
            raise ProfileError(f"profile file {path} not found")
    else:
        known = available(dirs)
        if ref not in known:
            close = difflib.get_close_matches(ref, list(known), n=3, cutoff=0.6) or [
                n for n in known if ref.lower() in n]
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            raise ProfileError(f"no profile named '{ref}'{hint} (`specctl profiles` lists them)")
        path = known[ref]
    try:
        text = read_text(path, limit=1 << 20)
    except UnreadableError as exc:
        raise ProfileError(f"profile {exc}; save it as UTF-8 TOML") from None
    except OSError as exc:
        raise ProfileError(f"cannot read profile {path}: {exc.strerror or exc}") from None
    return path, text, parse(text, name=path.stem, source=str(path), cli=cli)
