"""One verdict for `bench` from speed and losslessness together: changed output is no speedup.

A speculative setting is usable only when every check below passes; its speed is reported as a
speedup only then, and `bench --backends` only picks a usable one:

* **Greedy output against what numerics can explain** (measure/lossless/numerics.py: near-ties flip
  at most once per 100 tokens, anywhere in a reply): more or earlier divergence from the
  baseline's replies than that (p <= 1%) is a changed output.
* **Sampling** (`bench --quality`, measure/lossless/twosample.py): a category whose sampled
  distribution differs from the target's alone is a changed output.
* **Tool calls and structured output** (`bench --quality`, measure/lossless/structured.py): a
  setting whose greedy answer to a tool-call or JSON-schema prompt is not the baseline's is a
  changed output (the sampled structured prompt is one more category of the sampling check).
* **Drafting.** A speculative server whose engine reports no drafted tokens (or no counters at
  all, where its adapter says it has them) did not speculate: "the engine did not draft".

The floor (the same engine with every draft rejected, measure/lossless/check.py) is held to the same
greedy model and, when sampled, the same distribution test. A floor that fails is a broken
engine: reported as such, and never an excuse for the speculative side.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from specctl.orchestrator.contract.plan import Plan
from specctl.orchestrator.measure.bench import flow as bench
from specctl.orchestrator.measure.lossless.numerics import FLIP_RATE, LEVEL, Greedy, greedy

OUTPUT_CHANGED = "output changed"
BROKEN_ENGINE = "broken engine"
DID_NOT_DRAFT = "the engine did not draft"
PROBLEMS = (OUTPUT_CHANGED, BROKEN_ENGINE, DID_NOT_DRAFT)
SHORT = {OUTPUT_CHANGED: "replies differ from the target's alone",
         BROKEN_ENGINE: "the floor, every draft rejected, fails its own check",
         DID_NOT_DRAFT: "no drafted tokens reported"}
SPEEDUP_KEYS = ("speedup", "speedup_low", "speedup_high", "speedup_min", "speedup_max", "noisy",
                "e2e_speedup", "e2e_low", "e2e_high", "ttft_ratio", "ttft_low", "ttft_high",
                "decode_speedup", "decode_low", "decode_high")  # figures.row's
NUMERICS = (f"numerics flip at most 1 greedy token in {round(1 / FLIP_RATE)} (anywhere in a "
            f"reply); more or earlier divergence than that (p <= {LEVEL:g}) is a changed output")


def tested_label(plan: Plan) -> str:
    """The bench config label of `plan` itself (as bench.configs_for names it)."""
    return f"{plan.method} k={plan.k}"


def _pairs(samples: Sequence[Mapping[str, Any]], config: str,
           category: str | None) -> list[tuple[str, str, int]]:
    base = {_key(s): s for s in samples if s["config"] == bench.BASELINE and s["level"] == 1}
    return [(str(s.get("text", "")), str(base[_key(s)].get("text", "")),
             int(base[_key(s)]["tokens"])) for s in samples
            if s["config"] == config and s["level"] == 1 and category in (None, s["category"])
            and _key(s) in base]


def _key(s: Mapping[str, Any]) -> tuple[Any, ...]:
    return (s["repeat"], s["category"], s["prompt"])


def _differs(quality: Mapping[str, Any] | None) -> list[str]:
    """The categories whose sampled distributions differ, with the test's message."""
    if not quality:
        return []
    return [f"{cat}: sampled {found['message']}" for cat, found in
            quality.get("categories", {}).items() if found.get("verdict") == "differs"]


def judge(result: dict[str, Any], counts_drafts: bool) -> dict[str, Any]:
    """Add the checks and the one verdict to a bench report (in place; also returned).

    Reads `samples` (with their reply texts), `configs`, `categories`, and when present
    `quality` (the sampling check; only when it sampled the speculative setting),
    `floor_quality` and `structured` (tool calls and structured output, per setting). Writes
    per config `checks`, `usable` and an `identity` line; `floor_check`;
    `findings`; `outcome` (one of PROBLEMS, or "speed"); `usable`; `numerics`; `verdict`."""
    samples, categories = result["samples"], result["categories"]
    labels = [label for label in result["configs"]]
    has_floor = any(s["config"] == bench.FLOOR for s in samples)
    floor = {c: greedy(_pairs(samples, bench.FLOOR, c)) for c in categories} if has_floor else {}
    floor_bad = [f"{c}: greedy {g.message()}" for c, g in floor.items() if not g.explained]
    floor_bad += _differs(result.get("floor_quality"))
    result["floor_check"] = None if not has_floor else {
        "passed": not floor_bad, "greedy": {c: g.to_json() for c, g in floor.items()},
        "problems": floor_bad}
    quality = result.get("quality")
    sampled = _differs(quality) if quality and quality.get("against") == "speculative" else []
    findings: list[dict[str, str]] = []
    for label in labels:
        rows = result["configs"][label]
        checks = {c: greedy(_pairs(samples, label, c)) for c in categories}
        problems: list[dict[str, str]] = []
        for cat, g in checks.items():
            rows[cat]["checks"] = {"greedy": g.to_json()}
            rows[cat]["identity"] = _identity(g, floor.get(cat), floor_bad)
            if not g.explained:
                problems.append(_finding(OUTPUT_CHANGED, label, f"{cat}: greedy {g.message()}"))
        shaped = ((result.get("structured") or {}).get("configs") or {}).get(label)
        if shaped is not None and not shaped["passed"]:
            problems.append(_finding(OUTPUT_CHANGED, label, "tool calls and structured output: "
                                     f"{shaped['message']}"))
        if sampled:
            tested = quality.get("config", label) if quality else label
            note = "" if tested == label else f" (sampled at {tested}; same engine)"
            problems += [_finding(OUTPUT_CHANGED, label, s + note) for s in sampled]
        if floor_bad:
            problems.append(_finding(BROKEN_ENGINE, label, "the floor (every draft rejected) "
                                     f"fails its own check: {'; '.join(floor_bad)}"))
        drafted = sum(int(s["drafted"]) for s in samples
                      if s["config"] == label and s["level"] == 1)
        rows["overall"]["drafted_total"] = drafted
        if counts_drafts and drafted == 0:
            problems.append(_finding(DID_NOT_DRAFT, label, "its engine reported no drafted "
                                     "tokens over the whole run (counters zero or missing): "
                                     "this is the target alone, not speculation"))
        rows["overall"]["usable"] = not problems
        if problems:  # its speed is not a speculation speedup: kept apart, under another name
            for row in rows.values():
                row["ratio_not_a_speedup"] = {k: row.pop(k) for k in SPEEDUP_KEYS if k in row}
            levels = (result.get("concurrency") or {}).pop(label, None)
            if levels is not None:
                rows["overall"]["concurrency_not_a_speedup"] = levels
            lengths = (result.get("buckets") or {}).pop(label, None)
            if lengths:
                rows["overall"]["buckets_not_a_speedup"] = lengths
        findings += problems
    result["findings"] = findings
    result["numerics"] = NUMERICS
    usable = [label for label in labels if result["configs"][label]["overall"]["usable"]]
    result["usable"] = usable
    result["verdict"], result["outcome"] = _verdict(result, usable, findings, counts_drafts)
    return result


def _finding(kind: str, config: str, evidence: str) -> dict[str, str]:
    return {"kind": kind, "config": config, "evidence": evidence}


def _identity(check: Greedy, floor: Greedy | None, floor_bad: Sequence[str]) -> str:
    if not check.n:
        return "-"
    line = check.message()
    if floor is None:
        return line
    state = "FAILS its own check: a broken engine, no licence" if floor_bad else "passes"
    return f"{line}; the floor ({floor.identical}/{floor.n} identical) {state}"


def _verdict(result: Mapping[str, Any], usable: Sequence[str],
             findings: Sequence[Mapping[str, str]], counts_drafts: bool) -> tuple[str, str]:
    if not result["categories"]:
        return "", "speed"
    if findings:
        kinds = [k for k in PROBLEMS if any(f["kind"] == k for f in findings)]
        outcome = kinds[0]
        bad = list(dict.fromkeys(f["config"] for f in findings))
        why = "; ".join(dict.fromkeys(f"{f['evidence']}" for f in findings
                                      if f["kind"] == outcome))
        head = {OUTPUT_CHANGED: f"output changed: {', '.join(bad)} must not be used ({why})",
                BROKEN_ENGINE: f"broken engine: {why}; {', '.join(bad)} must not be used",
                DID_NOT_DRAFT: f"the engine did not draft ({', '.join(bad)}): {why}; its speed "
                               "is not a speculation speedup"}[outcome]
        also = [f"{k} ({SHORT[k]})" for k in kinds[1:]]
        tail = f"; also: {', '.join(also)}" if also else ""
        if usable:
            tail += f". Of the rest: {bench.verdict(_only(result, usable), result['categories'])}"
        return head + tail, outcome
    speed = bench.verdict(dict(result["configs"]), result["categories"])
    if not counts_drafts:
        speed += " (this engine reports no draft counters: that it drafted is not checked)"
    return speed, "speed"


def _only(result: Mapping[str, Any], labels: Sequence[str]) -> dict[str, Any]:
    return {label: result["configs"][label] for label in labels}
