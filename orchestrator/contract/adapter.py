"""The backend protocol. Each backend is a module in adapters/ exposing `ADAPTER`, a subclass of
`Adapter`, registered in the `specctl.adapters` entry point group (pyproject.toml); the registry
(contract/registry.py) loads them by name, so a new backend is one module plus its entry point,
its tests and a profile, with no edit to the core.

An adapter owns everything backend-specific: its options (its own section of a profile), its
settings (SPECCTL_* variables), its probe, its plan -> argv/env (`launch` is pure), its memory and
parallelism rules, its draft compatibility rule, its metrics and timing reading, its install.
The core calls the hooks below and names no backend. The values the hooks take and return live
beside this module, in the contract.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel

from specctl.orchestrator.contract.dirs import Dirs
from specctl.orchestrator.contract.hardware import Hardware
from specctl.orchestrator.contract.launch import Endpoint, Installed, Launch, Progress
from specctl.orchestrator.contract.memory import Budget
from specctl.orchestrator.contract.model import ModelInfo
from specctl.orchestrator.contract.options import Options, OptionsT
from specctl.orchestrator.contract.plan import Plan
from specctl.orchestrator.contract.settings import EnvVar, settings_vars
from specctl.orchestrator.contract.stats import SpecStats
from specctl.orchestrator.contract.stores import ModelStore
from specctl.orchestrator.errors import BackendError

VocabCheck = Callable[[str, "ModelInfo", "ModelInfo", bool], str | None]
"""(rule, target, draft, relaxed) -> why the draft's vocabulary cannot serve, or None."""

_NUMBER = re.compile(r"-\d[\d.e+-]*")  # a negative number is a value, not a flag


@dataclass(frozen=True)
class Resources:
    """What a plan may use beyond this machine's devices (e.g. remote workers' memory)."""

    extra_bytes: int = 0
    why: str = ""
    options: Options | None = None  # the options with what was found filled in
    notes: tuple[str, ...] = ()


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
    # the inference API paths its server answers as specctl starts it, from its root
    # ("/v1/chat/completions", or a path at the root like "/infill"): the gateway forwards these
    # and nothing else, so the engine's own API (tokenize, slots, props) stays behind it; every
    # OpenAI-compatible server answers the two completions
    api_paths: ClassVar[frozenset[str]] = frozenset({"/v1/chat/completions", "/v1/completions"})
    # concurrent requests when the profile says parallel = "auto": the engine's own default
    default_slots: ClassVar[int] = 1
    # each slot holds its own context in the KV cache (llama.cpp's slots), rather than pages of
    # one pool the engine shares out (vLLM): the memory plan holds slots x context tokens
    kv_per_slot: ClassVar[bool] = False

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

    def install(self, dirs: Dirs, rebuild: bool, progress: Progress) -> Installed:
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

    def draft_problem(self, options: Options, target: ModelInfo, draft: ModelInfo,
                      vocab: VocabCheck) -> str | None:
        """Why `draft` cannot speculate for `target` here, or None: by default the vocabulary
        rule, checked by the `vocab` the planner gives (models/compat.vocab)."""
        return vocab(self.vocab_rule, target, draft, False)

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

    def remembers(self, plan: Plan) -> bool:
        """Whether this plan's speculation learns across requests (a drafter whose n-gram pool
        outlives the request): asked a prompt it has answered before, such a server drafts the
        whole reply from memory. bench and tune then restart it before it is asked a prompt again,
        so that every timed request is its first sight of that text, as in real traffic."""
        return False

    def rejecting(self, plan: Plan, installed: Installed) -> Plan | None:
        """The speculative `plan` with every draft rejected: verification still runs in
        batches, but only the target's own tokens are kept. Its greedy output against the
        baseline's is the numerics floor of identity. None when the backend cannot do it."""
        return None

    def structured(self, plan: Plan, installed: Installed) -> frozenset[str]:
        """The structured answers its server gives as `plan` starts it on `installed`: "tools"
        (an OpenAI chat request's `tools`, answered with `tool_calls`), "tool_use" (Anthropic
        Messages on /v1/messages, answered with `tool_use` blocks), "json_schema" (a
        `response_format` JSON schema the answer fills). `bench --quality` checks that each
        stays the target's; empty: it checks none (the server answers no such request, or not
        as asked)."""
        return frozenset()

    def spec_stats(self, endpoint: Endpoint) -> SpecStats:
        return SpecStats(source=f"{self.name} (reports no draft counters)")

    def placement(self, log: str) -> str:
        """What the engine itself chose for the placement (layers, context, buffers), read from
        its server log; empty when it does not say."""
        return ""

    def reply_stats(self, reply: Mapping[str, Any]) -> SpecStats | None:
        """Draft counters of one reply (a completion, or a stream's chunk that carries them),
        where the server reports them per request; None where it does not (the gateway then
        counts no drafts for that request)."""
        return None

    def malformed(self, status: int, message: str) -> bool:
        """Whether the server's error answer (a 5xx status and its message) means that it could
        not read the request, whose fault is the client's (the gateway answers 400), rather than
        that it failed serving it (502). A 4xx is always the request's."""
        return False

    def uncached(self) -> Mapping[str, Any]:
        """Fields of a chat request that keep the server from reusing what an earlier request
        left of its prompt (a prompt cache): bench and tune send them with each prompt's first
        turn, so a prompt asked again is prefilled as new, as in real traffic (a conversation's
        later turns may reuse its earlier ones, as a client's would). Empty: the server keeps no
        such cache, or it cannot be turned off per request."""
        return {}

    def prompt_tokens(self, reply: Mapping[str, Any]) -> int | None:
        """The prompt's tokens (the template included, cached ones too) as the server reports
        them outside `usage`, which a stream carries only where the client asked for it
        (`stream_options.include_usage`); None where it does not. The gateway's kept traffic
        reads `usage` first."""
        return None

    def decode_timing(self, reply: Mapping[str, Any]) -> tuple[int, float] | None:
        """(tokens, decode tokens/s) as the server measured them, when it reports them. The
        decode time starts once the prompt's pass has yielded the first token (llama-server's
        predicted_ms), so it covers tokens - 1 of them (measure/lab/servers.Timed.decoded)."""
        return None

    def prefill_timing(self, reply: Mapping[str, Any]) -> tuple[int, float] | None:
        """(prompt tokens prefilled, seconds) as the server measured them, when it reports
        them (the tokens taken from its prompt cache not among them)."""
        return None


def options_of(plan: Plan, kind: type[OptionsT]) -> OptionsT:
    """The plan's options as this backend's own type (a plan made for another is a bug)."""
    if not isinstance(plan.options, kind):
        raise BackendError(f"plan for {plan.backend} carries {type(plan.options).__name__}, "
                           f"not {kind.__name__}")
    return plan.options
