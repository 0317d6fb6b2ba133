"""Losslessness certificates: what `bench --quality` tested, per engine build and model files.

A certificate records that one speculative setting (method, k) of one engine build, on one
target and draft (by the SHA-256 of their files), was sampled against the target alone and
passed or failed: the sample sizes, the p-values and the smallest shift the test could have
seen, the greedy check and the floor's, and whether its tool calls and structured output were
the target's (`structured`). `plan` and `status` look it up for the configuration
they show: passing, failing, none, or one for another engine build (the engine changed since:
test again).

One file per (setting, models) and engine build, `<setting key>-<build key>.json` under the
state dir, written atomically and read back through files.read_back: validated by the same model
as a fresh record, set aside when it fails, never trusted. The engine build is its version
string and the SHA-256 of its program file; SHA-256s of large files are computed once per (path,
size, mtime) (measure/results/tuned.py's cache).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field

from specctl.orchestrator.contract.launch import Installed
from specctl.orchestrator.contract.plan import Plan
from specctl.orchestrator.files import inside, read_back, write_atomic
from specctl.orchestrator.humanize import Say
from specctl.orchestrator.measure.results.record import Record
from specctl.orchestrator.models import digest

Sha = Annotated[str, Field(pattern=r"^([0-9a-f]{64}|-|ref:.+)$", max_length=4100)]  # ref: 1-4096


def folder(state: Path) -> Path:
    return state / "certificates"


class Build(Record):
    """An engine build: its backend, version string and the SHA-256 of its program."""

    backend: str = Field(max_length=40)
    version: str = Field(max_length=200)
    program: str = Field(max_length=4096)  # its path when tested
    sha256: Sha

    def key(self) -> str:
        return hashlib.sha256(f"{self.backend}|{self.version}|{self.sha256}".encode()
                              ).hexdigest()[:12]

    def describe(self) -> str:
        short = self.sha256[:12] if len(self.sha256) == 64 else self.sha256
        return f"{self.backend} {self.version} (program sha256 {short})"


class Setting(Record):
    """What was tested: the models (by file SHA-256) and the speculation."""

    target: str = Field(max_length=4096)
    target_sha256: Sha
    draft: str | None = Field(None, max_length=4096)
    draft_sha256: Sha
    method: str = Field(max_length=40)
    k: int = Field(ge=0, le=4096)

    def key(self) -> str:
        parts = [self.target_sha256, self.draft_sha256, self.method, str(self.k)]
        return hashlib.sha256("|".join(parts).encode()).hexdigest()[:20]


class Category(Record):
    category: str = Field(max_length=64)
    verdict: str = Field(max_length=40)
    p_value: float = Field(ge=0, le=1)
    prompts: int = Field(ge=0, le=10**6)
    baseline_samples: int = Field(ge=0, le=10**8)
    candidate_samples: int = Field(ge=0, le=10**8)
    min_detectable_tv: float | None = Field(None, ge=0, le=1)  # per token position
    min_detectable_shift: float | None = Field(None, ge=0, le=1e6)  # nats/token


class Structured(Record):
    """The tested setting's tool calls and structured output against the baseline's
    (measure/lossless/structured.py): how many prompts were asked and answered alike, how many
    of the baseline's answers were tool calls, each difference and each prompt not checked."""

    passed: bool
    prompts: int = Field(ge=0, le=64)
    identical: int = Field(ge=0, le=64)
    explained: int = Field(0, ge=0, le=64)  # answered as the floor answers: numerics
    calls: int = Field(ge=0, le=64)  # the baseline's answers that were tool calls
    differences: tuple[Annotated[str, Field(max_length=600)], ...] = Field((), max_length=64)
    not_checked: tuple[Annotated[str, Field(max_length=600)], ...] = Field((), max_length=64)

    def line(self) -> str:
        if not self.prompts:
            why = f": {self.not_checked[0]}" if self.not_checked else ""
            return f"tool calls and structured output: not checked{why}"
        state = "the target's" if self.passed else "CHANGED"
        line = (f"tool calls and structured output: {state}, {self.identical}/{self.prompts} "
                f"answers identical to the baseline's")
        if self.explained:
            line += f", {self.explained} the floor's (numerics)"
        line += f" ({self.calls} tool call{'' if self.calls == 1 else 's'} among them)"
        if self.differences:
            line += f": {'; '.join(self.differences)}"
        if self.not_checked:
            line += f"; {len(self.not_checked)} prompt(s) not checked"
        return line


class Certificate(Record):
    profile: str = Field(max_length=64)
    engine: Build
    setting: Setting
    passed: bool
    verdict: str = Field(max_length=4000)
    temperature: float = Field(ge=0, le=2)
    top_p: float = Field(gt=0, le=1)
    samples_per_prompt: int = Field(ge=1, le=10**6)
    tokens: int = Field(ge=1, le=10**6)
    alpha: float = Field(gt=0, lt=1)
    categories: tuple[Category, ...] = Field(max_length=64)
    greedy: str = Field("", max_length=4000)  # the greedy check's lines
    floor: Literal["passed", "failed", "not measured"] = "not measured"
    structured: Structured | None = None  # None: tested before specctl checked them
    created: str = Field(max_length=40)

    def line(self) -> str:
        state = "passing" if self.passed else "FAILING"
        ps = ", ".join(f"{c.category} p={c.p_value:.2g}" for c in self.categories)
        tv = [c.min_detectable_tv for c in self.categories if c.min_detectable_tv is not None]
        shift = f"; could see a shift of {max(tv):.2g} TV per token" if tv else ""
        return (f"{state} for {self.engine.describe()}, {self.setting.method} "
                f"k={self.setting.k}: sampled at temperature {self.temperature:g}, "
                f"{self.samples_per_prompt} x {self.tokens} tokens a prompt and side ({ps}"
                f"{shift}); floor {self.floor}; tested {self.created}")


@dataclass(frozen=True)
class Found:
    """What `plan` and `status` say about a configuration's certificate."""

    state: Literal["passing", "failing", "engine changed", "none"]
    engine: Build
    certificate: Certificate | None = None
    profile: str = "PROFILE"

    def structured_line(self) -> str | None:
        """The tool-call and structured-output check's line, where this build's certificate
        has one."""
        found = self.certificate
        if self.state == "engine changed" or found is None:
            return None
        return found.structured.line() if found.structured is not None else (
            "tool calls and structured output: not tested (the certificate is older than the "
            f"check: test again with `specctl bench -p {self.profile} --quality`)")

    def line(self) -> str:
        if self.certificate is None:
            return (f"none for {self.engine.describe()} with this setting: run `specctl bench "
                    f"-p {self.profile} --quality` to test it")
        if self.state == "engine changed":
            return (f"the engine build changed since the last test (it was "
                    f"{self.certificate.engine.describe()}, now {self.engine.describe()}): "
                    f"test again with `specctl bench -p {self.profile} --quality`")
        return self.certificate.line()

    def to_json(self) -> dict[str, Any]:
        return {"state": self.state, "engine": self.engine.model_dump(), "line": self.line(),
                "structured": self.structured_line(),
                "certificate": self.certificate.model_dump() if self.certificate else None}


def engine_of(backend: str, version: str, program: str | None, cache_file: Path) -> Build:
    path = Path(program) if program else None
    sha = digest.file_sha(path, cache_file) if path is not None and path.is_file() else "-"
    return Build(backend=backend, version=version, program=program or "-", sha256=sha)


def setting_of(plan: Plan, cache_file: Path, say: Say | None = None) -> Setting:
    return Setting(target=plan.target.ref,
                   target_sha256=digest.model_id(plan.target, cache_file, say),
                   draft=plan.draft.ref if plan.draft else None,
                   draft_sha256=digest.model_id(plan.draft, cache_file, say), method=plan.method,
                   k=plan.k if plan.speculative else 0)


def for_plan(state: Path, plan: Plan, installed: Installed,
             say: Say | None = None) -> Found:
    """The certificate state of a resolved plan on the installed engine (`plan`, `bench`);
    with no certificate saved at all, nothing is hashed to find none."""
    cache_file = digest.cache_of(state)
    engine = engine_of(plan.backend, installed.version, installed.path, cache_file)
    if not any(folder(state).glob("*.json")):
        return Found("none", engine, None, plan.profile)
    return find(folder(state), setting_of(plan, cache_file, say), engine, plan.profile)


def for_run(state: Path, plan: Mapping[str, Any]) -> Found | None:
    """The certificate state of a run, from the plan its state file recorded (`status`); None
    when the record lacks what it takes (a run started by an older specctl)."""
    try:
        backend, version = str(plan["backend"]), str(plan["backend_version"])
        method, k = str(plan["method"]), int(plan["k"])
        target, draft = plan["target"], plan.get("draft")
        program = plan.get("engine")
    except (KeyError, TypeError, ValueError):
        return None
    if not isinstance(target, Mapping) or not (draft is None or isinstance(draft, Mapping)):
        return None
    cache_file = digest.cache_of(state)
    setting = Setting(target=str(target.get("ref", "")), target_sha256=_sha(target, cache_file),
                      draft=str(draft.get("ref", "")) if draft else None,
                      draft_sha256=_sha(draft, cache_file), method=method,
                      k=k if method != "none" else 0)
    engine = engine_of(backend, version, str(program) if program else None, cache_file)
    return find(folder(state), setting, engine, str(plan.get("profile", "PROFILE")))


def _sha(model: Mapping[str, Any] | None, cache_file: Path) -> str:
    """As tuned.model_id, from a recorded plan's model entry."""
    if model is None:
        return "-"
    path = Path(str(model["path"])) if model.get("path") else None
    if path is not None and path.is_file():
        return digest.file_sha(path, cache_file)
    return f"ref:{model.get('ref', '')}"


def _file(folder: Path, setting: Setting, engine: Build) -> Path:
    return inside(folder, f"{setting.key()}-{engine.key()}", ".json", "certificate key")


def save(folder: Path, cert: Certificate) -> Path:
    path = _file(folder, cert.setting, cert.engine)
    checked = Certificate.model_validate(cert.model_dump())
    write_atomic(path, checked.model_dump_json(indent=2) + "\n")
    return path


def _parse(setting: Setting, text: str) -> Certificate:
    cert = Certificate.model_validate_json(text, strict=True)
    if cert.setting.key() != setting.key():
        raise ValueError("it is the certificate of another setting")
    return cert


def find(folder: Path, setting: Setting, engine: Build, profile: str = "PROFILE") -> Found:
    """This build's certificate for the setting; else the newest for another build (the engine
    changed since); else none. A file that fails validation is set aside (StateError)."""
    def load(path: Path) -> Certificate | None:
        return read_back(path, lambda text: _parse(setting, text), "certificate",
                         "Test again with `specctl bench --quality`.")

    mine = load(_file(folder, setting, engine))
    if mine is not None:
        return Found("passing" if mine.passed else "failing", engine, mine, profile)
    others = []
    for path in sorted(folder.glob(f"{setting.key()}-*.json")) if folder.is_dir() else []:
        found = load(inside(folder, path.stem, ".json", "certificate key"))
        if found is not None:
            others.append(found)
    if others:
        return Found("engine changed", engine, max(others, key=lambda c: c.created), profile)
    return Found("none", engine, None, profile)


def from_report(profile: str, engine: Build, setting: Setting, result: Mapping[str, Any]
                ) -> Certificate:
    """The certificate of a judged `bench --quality` report (measure/bench/verdicts.judge)."""
    quality = result["quality"]
    label = quality.get("config", "")
    row = result["configs"].get(label, {}).get("overall", {})
    cats = [Category(category=c, verdict=q["verdict"], p_value=q["p_value"], prompts=q["prompts"],
                     baseline_samples=q["baseline_samples"],
                     candidate_samples=q["candidate_samples"],
                     min_detectable_tv=(q.get("tokens") or {}).get("min_detectable_tv"),
                     min_detectable_shift=(q.get("loglik") or {}).get("min_detectable_shift"))
            for c, q in quality["categories"].items()]
    greedy = "; ".join(f"{c}: {result['configs'][label][c]['identity']}"
                       for c in result["categories"] if label in result["configs"])
    floor = result.get("floor_check")
    shaped = _structured(result.get("structured"), label)
    return Certificate(
        profile=profile, engine=engine, setting=setting,
        passed=bool(row.get("usable")) and all(c.verdict != "differs" for c in cats) and (
            shaped is None or shaped.passed),
        verdict=result["verdict"][:4000], temperature=quality["temperature"],
        top_p=quality["top_p"], samples_per_prompt=quality["samples_per_prompt"],
        tokens=quality["tokens"], alpha=next((q["alpha"] for q in
                                              quality["categories"].values()), 0.05),
        categories=tuple(cats), greedy=greedy[:4000],
        floor="not measured" if not floor else "passed" if floor["passed"] else "failed",
        structured=shaped, created=time.strftime("%Y-%m-%d %H:%M:%S"))


def _structured(checked: Mapping[str, Any] | None, label: str) -> Structured | None:
    """The tested setting's part of a report's `structured` check; None where it has none."""
    if not checked:
        return None
    side = (checked.get("configs") or {}).get(label)
    if side is None:
        return None
    return Structured(passed=bool(side["passed"]), prompts=int(side["n"]),
                      identical=int(side["identical"]),
                      explained=len(side.get("explained", [])),
                      calls=int(side.get("shapes", {}).get("tool call", 0)),
                      differences=tuple(f"'{d['prompt']}' ({d['kind']}): {d['what']}"[:600]
                                        for d in side["differences"][:64]),
                      not_checked=tuple(str(n)[:600] for n in checked.get("not_checked", [])
                                        [:64]))
