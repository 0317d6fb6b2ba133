"""A profile for a model named on the command line (`specctl up hf:ORG/REPO`), and the command
line's overrides of any profile (`--port`, `--host`, `--ctx`, `--backend`, `--draft`).

A model reference becomes profile TOML text (commented), which profiles.parse validates like any
file: `specctl profiles new NAME REF` writes the same text, so the profile it writes plans what
`specctl up REF` runs. The flags of a named profile are merged over the file and the SPECCTL_*
variables (the command line is the most specific).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from typing import Any

from specctl.orchestrator.errors import BadInputError, BadRefError
from specctl.orchestrator.files import expand_user

_REPO = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}")
_STORE = re.compile(r"[a-z][a-z0-9]+:\S+")  # another tool's store, e.g. ollama:qwen2.5:1.5b
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


@dataclass(frozen=True)
class Flags:
    """What the command line sets over a profile (None or empty: the profile's own)."""

    port: int | None = None
    host: str | None = None
    ctx: int | None = None
    backend: tuple[str, ...] = ()
    draft: str | None = None
    extra: tuple[str, ...] = ()  # `-- ARGS`: engine arguments

    def data(self) -> dict[str, Any]:
        """The overrides as profile data (nested like the TOML)."""
        out: dict[str, Any] = {}
        server = {k: v for k, v in (("host", self.host), ("port", self.port),
                                    ("context", self.ctx)) if v is not None}
        if server:
            out["server"] = server
        if self.backend:
            out["backend"] = list(self.backend)
        if self.draft is not None:
            out["draft"] = self.draft
        if self.extra:
            out["extra_args"] = list(self.extra)
        return out

    def environment(self) -> dict[str, str]:
        """The same flags as the SPECCTL_* profile overrides a child command reads
        (config/overrides.py): `up` serving through the router hands them to its gateway."""
        out: dict[str, str] = {}
        for var, value in (("SPECCTL_SERVER__PORT", self.port), ("SPECCTL_SERVER__HOST",
                           self.host), ("SPECCTL_SERVER__CONTEXT", self.ctx),
                           ("SPECCTL_DRAFT", self.draft)):
            if value is not None:
                out[var] = str(value)
        if self.backend:
            out["SPECCTL_BACKEND"] = json.dumps(list(self.backend))
        if self.extra:
            out["SPECCTL_EXTRA_ARGS"] = json.dumps(list(self.extra))
        return out

    def argv(self) -> list[str]:
        """The same flags as command-line words (for the hint that keeps them)."""
        words: list[str] = []
        for flag, value in (("--port", self.port), ("--host", self.host), ("--ctx", self.ctx),
                            ("--draft", self.draft)):
            if value is not None:
                words += [flag, str(value)]
        if self.backend:
            words += ["--backend", ",".join(self.backend)]
        return [*words, "--", *self.extra] if self.extra else words


def bare_repo(text: str) -> bool:
    """`org/repo` written without `hf:` (the Hub habit), and no such file here."""
    return bool(_REPO.fullmatch(text)) and not expand_user(text).exists()


def is_model_ref(text: str) -> bool:
    """Does `text` name a model rather than a profile: hf:/testbed:/a store's scheme, a .gguf
    file, or a model folder (config.json)?"""
    if text.startswith(("hf:", "testbed:")) or text.endswith(".gguf"):
        return True
    if text.endswith(".toml"):
        return False
    path = expand_user(text)
    if path.is_dir() and (path / "config.json").is_file():
        return True
    return bool(_STORE.fullmatch(text)) and not path.exists()


def not_a_model(ref: str) -> BadInputError:
    """The refusal of text that names no model (with "did you mean hf:" for a bare org/repo)."""
    hint = f"; did you mean hf:{ref}?" if bare_repo(ref) else ""
    return BadInputError(f"'{ref}' is not a model reference (hf:ORG/REPO[:QUANT], a .gguf "
                         f"file, a store's STORE:NAME){hint}")


def _local(ref: str) -> bool:
    """A model on this machine named by its path (a .gguf file or a model folder)."""
    if ref.startswith(("hf:", "testbed:")):
        return False
    return ref.endswith(".gguf") or expand_user(ref).is_dir() or not _STORE.fullmatch(ref)


def _pinned_path(ref: str, what: str) -> str:
    """A local model's path made absolute (the profile works from any folder); one that is not
    there is refused."""
    path = expand_user(ref).absolute()
    if not path.exists():
        raise BadRefError(f"{what} {ref}: no such file ({path}); check the path")
    return str(path)


def pinned(ref: str, flags: Flags) -> tuple[str, Flags]:
    """The model and flags as a profile file keeps them (`profiles new`): a local model's path
    absolute, and refused when it is not there or the draft names nothing specctl can use."""
    from specctl.orchestrator.config.profiles import DRAFTLESS

    if not is_model_ref(ref):
        raise not_a_model(ref)
    if _local(ref):
        ref = _pinned_path(ref, "model")
    draft = flags.draft
    if draft is not None and draft != "auto" and draft not in DRAFTLESS:
        if not is_model_ref(draft):
            raise BadInputError(f"--draft {draft}: not a draft; name a model (hf:ORG/REPO"
                                f"[:QUANT], a .gguf file, STORE:NAME), auto, ngram or none")
        if _local(draft):
            flags = replace(flags, draft=_pinned_path(draft, "--draft"))
    return ref, flags


def name_for(ref: str) -> str:
    """A profile (and run) name for a model reference: the model's own name, lowercase, with
    its quantisation: hf:bartowski/Qwen2.5-7B-Instruct-GGUF:Q4_K_M -> qwen2.5-7b-instruct-q4_k_m."""
    if ref.startswith("hf:"):
        repo, _, quant = ref[3:].partition(":")
        stem = repo.split("/")[-1]
        stem = re.sub(r"[-_.]gguf$", "", stem, flags=re.IGNORECASE)
        text = f"{stem}-{quant}" if quant else stem
    elif ref.endswith(".gguf") or "/" in ref or ref.startswith((".", "~")):
        path = expand_user(ref)
        text = path.stem if path.suffix == ".gguf" else path.name
    else:
        text = ref.partition(":")[2] or ref  # ollama:qwen2.5-coder:1.5b -> qwen2.5-coder:1.5b
    name = _UNSAFE.sub("-", text.lower()).strip("-._")[:64].rstrip("-._")
    return name or "model"


def toml_value(value: Any) -> str:
    """A value as TOML writes it: JSON's spelling is TOML's for a basic string, an integer, a
    float, a boolean and an array of them (the one TOML quoting function)."""
    return json.dumps(value)


def toml_for(ref: str, flags: Flags, name: str | None = None, description: str = "") -> str:
    """The commented profile TOML for a model reference and the command line's flags."""
    name = name or name_for(ref)
    data = flags.data()
    server = data.get("server", {})
    words = " ".join([name, ref, *flags.argv()])
    lines = [
        f"# written by `specctl profiles new {words}`",
        "# every key but target is optional (`specctl profiles show NAME` fills in defaults)",
        f"description = {toml_value(description or f'{ref}, draft and k chosen by specctl')}",
        f"target = {toml_value(ref)}",
        "# \"auto\": the best compatible draft on disk, on the Hub or in the catalog (or n-gram);",
        "# or a model reference, \"ngram\", \"none\"",
        f"draft = {toml_value(data.get('draft', 'auto'))}",
        "# \"auto\": `specctl tune`'s result on this machine, else the cost model; or a number",
        'k = "auto"',
    ]
    if "backend" in data:
        lines += ["# preference order (default: by this machine's hardware)",
                  f"backend = {toml_value(data['backend'])}"]
    else:
        lines += ["# backend = [\"NAME\"]   # preference order (`specctl backend list`); "
                  "default: by hardware"]
    if "extra_args" in data:
        lines += ["# engine arguments, checked against the installed engine's flags",
                  f"extra_args = {toml_value(data['extra_args'])}"]
    lines += ["", "[server]"]
    for key, default, note in (("host", "127.0.0.1", "a non-loopback host needs api_key_env"),
                               ("port", 8080, ""), ("context", 8192, "tokens; shrunk to fit "
                                                                     "memory when needed")):
        comment = f"   # {note}" if note else ""
        if key in server:
            lines.append(f"{key} = {toml_value(server[key])}{comment}")
        else:
            lines.append(f"# {key} = {toml_value(default)}{comment}")
    return "\n".join(lines) + "\n"
