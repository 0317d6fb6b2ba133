"""What a llama-server build understands, read from its own `--help` and `--version`.

Builds since spring 2026 turn drafting on with `--spec-type draft-simple` and name the knobs
`--spec-draft-n-max/-n-min/-p-min`; older builds use `--draft-max/--draft-min/--draft-p-min` and
draft whenever `-md` is given. A flag the build lacks is an error before launch, never a guess.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from specctl.orchestrator.contract.launch import Installed

NAME = "llamacpp"
SPEC_TYPE_DIALECT = "spec-type"
LEGACY_DIALECT = "legacy"
_GAP = re.compile(r"\s{2,}")

# Flag names per dialect (the 2026 names first, the older ones where they differ).
FLAGS = {
    SPEC_TYPE_DIALECT: {"n_max": "--spec-draft-n-max", "n_min": "--spec-draft-n-min",
                        "p_min": "--spec-draft-p-min", "ctk_draft": "--spec-draft-type-k",
                        "ctv_draft": "--spec-draft-type-v"},
    LEGACY_DIALECT: {"n_max": "--draft-max", "n_min": "--draft-min", "p_min": "--draft-p-min",
                     "ctk_draft": "-ctkd", "ctv_draft": "-ctvd"},
}

# specctl's method -> llama.cpp's --spec-type value (every type of the 2026 builds)
SPEC_TYPES = {"draft": "draft-simple", "eagle3": "draft-eagle3", "mtp": "draft-mtp",
              "dflash": "draft-dflash", "dspark": "draft-dspark", "ngram": "ngram-simple",
              "ngram-mod": "ngram-mod", "ngram-map-k": "ngram-map-k",
              "ngram-map-k4v": "ngram-map-k4v", "ngram-cache": "ngram-cache"}
METHOD_OF = {v: k for k, v in SPEC_TYPES.items()}


@dataclass(frozen=True)
class Help:
    flags: frozenset[str]
    removed: frozenset[str]
    spec_types: frozenset[str]
    chains: bool = False  # --spec-type takes a comma-separated list

    @property
    def dialect(self) -> str:
        return SPEC_TYPE_DIALECT if "--spec-type" in self.flags else LEGACY_DIALECT


def parse_help(text: str) -> Help:
    """Flags (with aliases) that `llama-server --help` lists; removed ones set apart."""
    flags: set[str] = set()
    removed: set[str] = set()
    spec_types: set[str] = set()
    chains = False
    current: list[str] = []
    for line in text.splitlines():
        if line.startswith("-"):
            head = []
            for chunk in _GAP.split(line.rstrip()):  # "-m,", "--model FNAME", "description"
                if not chunk.startswith("-"):
                    break
                head.append(chunk)
            words = " ".join(head).replace(",", " ").split()
            current = [w for w in words if w.startswith("-")]
            flags.update(current)
            values = re.search(r"--spec-type\s+(\S+)", " ".join(head))
            if values:
                spec_types.update(values.group(1).split(","))
        if current and "has been removed" in line:
            removed.update(current)
        if "--spec-type" in current and "comma-separated list" in line:
            chains = True
    return Help(frozenset(flags - removed), frozenset(removed), frozenset(spec_types), chains)


def parse_version(text: str) -> str:
    """'0.5.0-dev (build 1, commit 0c1e570)' or '5460 (a1b2c3d)' from `--version`."""
    m = re.search(r"version:\s*(.+)", text)
    return m.group(1).strip() if m else "unknown"


def methods_of(help_: Help) -> frozenset[str]:
    """specctl's names for the spec types the build lists."""
    methods = {"none", "draft"}
    methods.update(METHOD_OF[t] for t in help_.spec_types if t in METHOD_OF)
    return frozenset(methods)


def installed_from(help_text: str, version_text: str, path: str | None,
                   assumed: bool = False) -> Installed:
    help_ = parse_help(help_text)
    return Installed(backend=NAME, version=parse_version(version_text), dialect=help_.dialect,
                     path=path, flags=help_.flags, methods=methods_of(help_),
                     chains=help_.chains, assumed=assumed)
