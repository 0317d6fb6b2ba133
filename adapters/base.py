"""The backend contract. One module per backend in this package exposes `ADAPTER`, a subclass of
`Adapter`; the registry (orchestrator/planning/backends.py) finds them by scanning the package, so
a new backend is one module here plus its tests and a profile, with no edit elsewhere.

An adapter owns everything backend-specific: its options (its own section of a profile), its
settings (SPECCTL_* variables), its probe, its plan -> argv/env (`launch` is pure), its memory and
parallelism rules, its draft compatibility rule, its metrics and timing reading, its install.
The core calls the hooks below and names no backend.
"""

from __future__ import annotations

import ipaddress
import re
import typing
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    ValidationInfo,
    field_validator,
)

from specctl.orchestrator.errors import BackendError, ModelError, SettingsError, first_problem

if TYPE_CHECKING:
    from specctl.orchestrator.config.paths import Dirs
    from specctl.orchestrator.machine.hardware import Hardware
    from specctl.orchestrator.models.info import ModelInfo
    from specctl.orchestrator.planning.memory import Budget
    from specctl.orchestrator.planning.plan import Plan

Progress = Any  # Callable[[str], None]: a line of progress for long work
_NUMBER = re.compile(r"-\d[\d.e+-]*")  # a negative number is a value, not a flag


class Options(BaseModel):
    """A backend's own section of a profile (e.g. `[llamacpp]`); none by default. Untrusted
    input like the rest of the profile, validated strictly: no NaN or infinity, `true` is no
    number and `"yes"` or 1 is no true/false (a loose boolean could turn on remote code)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False, strict=True)

    target: str | None = Field(None, max_length=4096, description="the target in this backend's "
                               "format, when it differs (e.g. an MLX folder beside a GGUF)")
    draft: str | None = Field(None, max_length=4096, description="the draft in this backend's "
                              "format, when it differs")

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool_for_numbers(cls, value: Any, info: ValidationInfo) -> Any:
        if info.field_name is None:
            return value
        annotation = cls.model_fields[info.field_name].annotation
        if isinstance(value, bool) and bool not in (annotation, *typing.get_args(annotation)):
            raise ValueError("expected a number or text, not true/false")
        if any(isinstance(v, str) and "\x00" in v
               for v in (value if isinstance(value, (list, tuple)) else [value])):
            raise ValueError("text with a NUL character; no name or path can hold one")
        if isinstance(value, list) and _is_tuple(annotation):
            return tuple(value)  # a TOML array is a list; strict tuples take only tuples
        return value


def _is_tuple(annotation: Any) -> bool:
    return any(typing.get_origin(a) is tuple for a in (annotation, *typing.get_args(annotation)))


OptionsT = TypeVar("OptionsT", bound=Options)
SettingsT = TypeVar("SettingsT", bound=BaseModel)


def load_settings(make: Callable[[], SettingsT], prefix: str = "SPECCTL_") -> SettingsT:
    """Settings read from SPECCTL_* variables (specctl's or a backend's): a bad value is one
    line naming the variable, never a traceback."""
    try:
        return make()
    except ValueError as exc:  # pydantic's ValidationError, or pydantic-settings' own error
        errors = exc.errors() if isinstance(exc, ValidationError) else []
        loc = errors[0]["loc"] if errors else ()
        var = f"${prefix}{loc[0]}".upper() if loc else f"a {prefix}* variable"
        why = errors[0]["msg"] if errors else first_problem(exc)
        raise SettingsError(f"{var}: {why}; fix it or unset it") from None


@dataclass(frozen=True)
class EnvVar:
    """A variable a backend reads (its SPECCTL_* settings, the engine's own): a service carries
    the value in force when it is installed, a secret only in the service's environment file."""

    name: str
    why: str
    secret: bool = False


def settings_vars(models: tuple[type[BaseModel], ...], what: str) -> tuple[EnvVar, ...]:
    """The variables of settings models (pydantic-settings): prefix + field name, upper case; a
    SecretStr field is a secret."""
    out = []
    for model in models:
        prefix = str(model.model_config.get("env_prefix", ""))
        for name, info in model.model_fields.items():
            secret = any(a is SecretStr for a in (info.annotation, *typing.get_args(
                info.annotation)))
            out.append(EnvVar(f"{prefix}{name}".upper(),
                              f"{what}{': ' + info.description if info.description else ''}",
                              secret))
    return tuple(out)


@dataclass(frozen=True)
class Installed:
    backend: str
    version: str
    dialect: str
    path: str | None = None
    flags: frozenset[str] = frozenset()
    methods: frozenset[str] = frozenset()
    chains: bool = False  # takes several methods at once (a plan's `chain`)
    assumed: bool = False  # not installed here: planning with the newest known dialect

    def describe(self) -> str:
        where = "assumed, not installed here" if self.assumed else self.path or "?"
        return f"{self.backend} {self.version} ({self.dialect} dialect; {where})"


@dataclass(frozen=True)
class HttpCall:
    """A request the supervisor sends once the server is healthy (e.g. a model to load)."""

    method: str
    url: str
    body: Mapping[str, object] = field(default_factory=dict)


@dataclass(frozen=True)
class Launch:
    argv: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)
    health_url: str = ""
    health_failed: frozenset[int] = frozenset()  # health answers that mean the start failed
    base_url: str = ""  # the OpenAI-compatible API root, e.g. http://127.0.0.1:8080/v1
    metrics_url: str | None = None
    # backend variable -> the user's variable it is copied from at spawn time (API keys: the
    # value never enters argv, the plan or a log)
    env_from: Mapping[str, str] = field(default_factory=dict)
    setup: tuple[HttpCall, ...] = ()
    model: str | None = None  # the model name clients should send, when the server needs one


def is_loopback(host: str) -> bool:
    """Does a server bound to `host` stay on this machine?"""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def url_host(host: str) -> str:
    """`host` as a URL's host part, for clients on this machine: a wildcard bind (0.0.0.0,
    ::, empty) is reached on loopback, and an IPv6 address goes in brackets (http://[::1]:8080)."""
    if host in ("0.0.0.0", ""):
        return "127.0.0.1"
    if host == "::":
        return "[::1]"
    return f"[{host.strip('[]')}]" if ":" in host else host


def api_key(env_from: Mapping[str, str], environ: Mapping[str, str]) -> str | None:
    """The API key a launch copies from the user's environment (see Launch.env_from), if any;
    an empty variable is no key."""
    return next((environ.get(source) or None for source in env_from.values()), None)


@dataclass(frozen=True)
class Endpoint:
    """A running server as clients see it: its API root, its metrics, its key."""

    api: str  # OpenAI-compatible root (…/v1)
    metrics: str | None = None
    api_key: str | None = None

    @classmethod
    def of(cls, launch: Launch, environ: Mapping[str, str]) -> Endpoint:
        return cls(launch.base_url, launch.metrics_url, api_key(launch.env_from, environ))

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}


@dataclass(frozen=True)
class SpecStats:
    """Draft counters. `drafts` = verification steps that had a draft."""

    drafted: int = 0
    accepted: int = 0
    drafts: int = 0
    per_position: tuple[int, ...] = ()
    source: str = ""

    @property
    def acceptance_rate(self) -> float | None:
        return self.accepted / self.drafted if self.drafted else None

    @property
    def mean_accepted_length(self) -> float | None:
        """Accepted draft tokens per verification step (plus one target token each step)."""
        return self.accepted / self.drafts if self.drafts else None

    def __add__(self, other: SpecStats) -> SpecStats:
        n = max(len(self.per_position), len(other.per_position))
        a = self.per_position + (0,) * (n - len(self.per_position))
        b = other.per_position + (0,) * (n - len(other.per_position))
        summed = tuple(x + y for x, y in zip(a, b, strict=True))
        return SpecStats(self.drafted + other.drafted, self.accepted + other.accepted,
                         self.drafts + other.drafts, summed, self.source or other.source)

    def __sub__(self, before: SpecStats) -> SpecStats:
        neg = SpecStats(-before.drafted, -before.accepted, -before.drafts,
                        tuple(-x for x in before.per_position), before.source)
        return self + neg


@dataclass(frozen=True)
class Resources:
    """What a plan may use beyond this machine's devices (e.g. remote workers' memory)."""

    extra_bytes: int = 0
    why: str = ""
    options: Options | None = None  # the options with what was found filled in
    notes: tuple[str, ...] = ()


class ModelStore:
    """Another tool's store of models, reachable as `SCHEME:name` references."""

    scheme: ClassVar[str]

    def normalize(self, name: str) -> str:
        """The name as the store spells it (e.g. with its default tag); raises ModelError."""
        return name

    def locate(self, name: str) -> Path | None:
        """The model file, None when the store does not have it."""
        raise NotImplementedError

    def models(self) -> Iterator[tuple[str, Path]]:
        """(name, file) of every model in the store (draft candidates)."""
        raise NotImplementedError

    def how_to_get(self, name: str) -> str:
        raise NotImplementedError

    def pull(self, name: str, say: Callable[[str], None]) -> Path:
        """Fetch the model through its tool (when it can), then its file."""
        raise ModelError(f"{self.scheme}:{name}: specctl cannot fetch it; {self.how_to_get(name)}")


class Adapter:
    """Defaults for the hooks; a backend overrides what it has."""

    name: ClassVar[str]
    aliases: ClassVar[tuple[str, ...]] = ()  # other names `backend install` accepts
    default_quant: ClassVar[str]  # quantisation assumed for a model named without one
    vocab_rule: ClassVar[str]  # "near" or "identical": see orchestrator/models/compat
    cache_types: ClassVar[tuple[str, ...]]  # KV cache types, preferred first
    # hardware kind -> rank when the profile names no backend (lower first)
    preference: ClassVar[Mapping[str, int]]
    formats: ClassVar[frozenset[str]] = frozenset({"gguf"})  # model files it serves: gguf, hf
    no_spec_hint: ClassVar[str]  # what to do when this backend cannot speculate
    install_hint: ClassVar[str]  # how to get this backend
    options: ClassVar[type[Options]] = Options
    moved_keys: ClassVar[Mapping[str, str]] = {}  # old profile key -> its key in this section
    knobs: ClassVar[frozenset[str]] = frozenset()  # tunable extras, e.g. "p_min"
    has_workers: ClassVar[bool] = False  # can lend this machine to a server elsewhere
    # ways to keep part of the target in system RAM when the GPUs are too small, preferred
    # first: "experts" (an MoE's experts), "layers" (whole layers); see planning/memory
    spills: ClassVar[tuple[str, ...]] = ()
    # flags specctl sets from the plan (host, port, API key, model, draft): never passed through
    owned_flags: ClassVar[frozenset[str]] = frozenset()
    authenticates: ClassVar[bool] = True  # checks an API key (without one: loopback only)
    # what a service must carry to run this backend as the user runs it: its settings models
    # (SPECCTL_* variables) and the engine's own variables (see `environment`)
    settings: ClassVar[tuple[type[BaseModel], ...]] = ()
    engine_env: ClassVar[tuple[EnvVar, ...]] = ()
    # its spec_stats counts drafted tokens: a speculative server that reports none did not draft
    draft_counters: ClassVar[bool] = False

    @property
    def runs_on(self) -> frozenset[str]:
        return frozenset(self.preference)

    @classmethod
    def create(cls, dirs: Dirs) -> Adapter:
        """Build from this backend's own settings (SPECCTL_* variables) and specctl's dirs."""
        return cls()

    @classmethod
    def environment(cls) -> tuple[EnvVar, ...]:
        """Every variable this backend reads: its settings' and the engine's own."""
        return (*settings_vars(cls.settings, f"{cls.name} setting"), *cls.engine_env)

    @classmethod
    def cache_dirs(cls, environ: Mapping[str, str], home: Path) -> tuple[Path, ...]:
        """Folders the engine writes while it starts and serves (compile caches): a service
        makes them writable. Pure: from the variables in force and the home folder."""
        return ()

    # -- what is installed -------------------------------------------------------------------
    def probe(self) -> Installed | None:
        raise NotImplementedError

    def assumed(self) -> Installed:
        raise NotImplementedError

    def install(self, dirs: Dirs, rebuild: bool, say: Progress) -> Installed:
        raise BackendError(f"specctl cannot install {self.name}; {self.install_hint}")

    def install_check(self, hw: Hardware) -> tuple[str, str | None]:
        """What installing this backend here does and costs (one line, said before it starts),
        and why such an install could not serve a plan made for `hw` (None when it can)."""
        return f"install {self.name}", None

    def store(self) -> ModelStore | None:
        """The backend's own model store, when it has one that other backends can read."""
        return None

    def tool(self, name: str) -> Path | None:
        """A helper program of this installation (e.g. a GGUF quantizer), if it has one."""
        return None

    def tips(self, probed: Mapping[str, Installed | None]) -> list[str]:
        """Advice for `doctor`, given what else is installed."""
        return []

    # -- planning ----------------------------------------------------------------------------
    def devices(self, options: Options) -> int:
        """GPUs the target spreads over (0: every visible one)."""
        return 1

    def resources(self, options: Options, installed: Installed, hw: Hardware,
                  budget: Budget) -> Resources:
        """Memory beyond `budget` this plan can use (remote workers); default none."""
        return Resources()

    def wider(self, options: Options, hw: Hardware,
              target: ModelInfo) -> list[tuple[Options, str]]:
        """Layouts over more devices to try when the profile's does not fit, best first, each
        with the reason to give when it is chosen; default none."""
        return []

    def check(self, options: Options, hw: Hardware, target: ModelInfo,
              draft: ModelInfo | None) -> list[str]:
        """The backend's own rules for this plan: reasons, or ProfileError on a violation."""
        return []

    def draft_problem(self, options: Options, target: ModelInfo,
                      draft: ModelInfo) -> str | None:
        """Why `draft` cannot speculate for `target` here, or None (the vocabulary rule)."""
        from specctl.orchestrator.models import compat

        return compat.RULES[self.vocab_rule](target, draft, compat.file_tokens, False)

    # -- running -----------------------------------------------------------------------------
    def owns(self, flag: str) -> bool:
        """Does specctl set `flag` itself from the plan (or would it stop the server)?"""
        return flag in self.owned_flags or flag in ("-h", "--help", "--version")

    def extra_args(self, args: tuple[str, ...], installed: Installed) -> list[str]:
        """Engine arguments passed through (a profile's `extra_args`, `-- ARGS`), each flag
        checked against this installation's recorded flags; one line refusing the first that is
        unknown there or that specctl sets from the plan."""
        for arg in args:
            if not arg.startswith("-") or _NUMBER.fullmatch(arg):
                continue  # a value
            flag = arg.split("=", 1)[0]
            if self.owns(flag):
                raise BackendError(f"{flag}: specctl sets it from the plan (host, port, API key, "
                                   "model, context, draft); change the profile or use --host, "
                                   "--port, --ctx, --draft instead")
            if not installed.flags:
                raise BackendError(f"{flag}: no flags are recorded for {self.name} "
                                   f"{installed.version}, so extra arguments cannot be checked")
            if flag not in installed.flags:
                raise BackendError(f"{self.name} {installed.version} has no {flag} (its "
                                   "`--help` lists what it takes)")
        return list(args)

    def launch(self, plan: Plan, installed: Installed) -> Launch:
        raise NotImplementedError

    def worker(self, installed: Installed, host: str, port: int,
               threads: int | None) -> Launch:
        raise BackendError(f"{self.name} has no workers")

    def k_per_batch(self, installed: Installed) -> bool:
        """Whether this installation switches k by how many requests run at once (a plan's
        `k_by_batch`); tune then measures the schedule."""
        return False

    def shares_weights(self, plan: Plan) -> bool:
        """Whether two servers of this backend map the same model file's weights once (mmap'd
        pages shared): then bench and tune count them once when checking that a baseline and a
        speculative server fit side by side. Not on GPUs, where each process loads its own."""
        return False

    def rejecting(self, plan: Plan, installed: Installed) -> Plan | None:
        """The speculative `plan` with every draft rejected: verification still runs in
        batches, but only the target's own tokens are kept. Its greedy output against the
        baseline's is the numerics floor of identity. None when the backend cannot do it."""
        return None

    def spec_stats(self, endpoint: Endpoint) -> SpecStats:
        return SpecStats(source=f"{self.name} (reports no draft counters)")

    def placement(self, log: str) -> str:
        """What the engine itself chose for the placement (layers, context, buffers), read from
        its server log; empty when it does not say."""
        return ""

    def decode_timing(self, reply: Mapping[str, Any]) -> tuple[int, float] | None:
        """(tokens, decode tokens/s) as the server measured them, when it reports them."""
        return None


def options_of(plan: Plan, kind: type[OptionsT]) -> OptionsT:
    """The plan's options as this backend's own type (a plan made for another is a bug)."""
    if not isinstance(plan.options, kind):
        raise BackendError(f"plan for {plan.backend} carries {type(plan.options).__name__}, "
                           f"not {kind.__name__}")
    return plan.options
