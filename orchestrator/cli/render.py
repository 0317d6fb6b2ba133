"""Turn plans, machines and profiles into rich tables and JSON. No decisions here."""

from __future__ import annotations

import shlex
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.markup import escape
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from specctl.adapters.base import Installed, Launch
from specctl.orchestrator.machine.hardware import Hardware
from specctl.orchestrator.measure.tuned import Measured
from specctl.orchestrator.measure.tuned import Result as Tuned
from specctl.orchestrator.models.drafts import Candidate
from specctl.orchestrator.models.resolve import ModelInfo
from specctl.orchestrator.planning.plan import Plan

if TYPE_CHECKING:
    from specctl.orchestrator.runtime.runs import Row


def model_json(info: ModelInfo | None) -> dict[str, Any] | None:
    if info is None:
        return None
    return {"ref": info.ref, "name": info.name, "path": str(info.path) if info.path else None,
            "quant": info.quant, "size_gb": round(info.weights_gb, 2),
            "architecture": info.architecture, "layers": info.layers,
            "kv_heads": info.kv_heads, "head_dim": info.head_dim, "vocab_size": info.vocab_size}


def plan_json(plan: Plan, installed: Installed, launch: Launch) -> dict[str, Any]:
    return {
        "profile": plan.profile, "hardware": plan.hardware.name, "backend": plan.backend,
        "backend_version": installed.version, "dialect": installed.dialect,
        "target": model_json(plan.target), "draft": model_json(plan.draft),
        "method": plan.method, "k": plan.k, "k_source": plan.k_source, "p_min": plan.p_min,
        "context": plan.context, "argv": list(launch.argv), "env": dict(launch.env),
        "env_from": dict(launch.env_from), "url": launch.base_url, "model": launch.model,
        "memory": plan.memory.to_json(), "reasons": list(plan.reasons),
    }


def show_plan(console: Console, plan: Plan, installed: Installed, launch: Launch) -> None:
    table = Table(show_header=False, box=None, pad_edge=False)
    table.add_column(style="bold")
    table.add_column()
    table.add_row("profile", plan.profile)
    table.add_row("machine", f"{plan.hardware.name}: {plan.hardware.describe()}")
    table.add_row("backend", installed.describe())
    table.add_row("target", plan.target.describe())
    table.add_row("draft", plan.draft.describe() if plan.draft else "-")
    table.add_row("speculation", plan.describe_spec())
    m = plan.memory
    table.add_row("memory", f"{m.total_gb:.1f} GB of {m.budget.gb:.1f} GB: {m.breakdown()}")
    table.add_row("url", launch.base_url)
    console.print(table)
    console.print("\n[bold]argv[/bold]")
    console.print(shlex.join(launch.argv), soft_wrap=True, highlight=False)
    console.print("\n[bold]why[/bold]")
    for reason in plan.reasons:
        console.print(f"- {reason}", highlight=False)


def status_json(row: Row) -> dict[str, Any]:
    stats = row.stats
    return {"profile": row.profile, "status": row.status, "url": row.url,
            "uptime_s": round(row.uptime_s), "restarts": row.restarts, "speculation": row.spec,
            "drafted": stats.drafted if stats else None,
            "accepted": stats.accepted if stats else None,
            "acceptance_rate": stats.acceptance_rate if stats else None, "note": row.note}


def show_status(console: Console, rows: list[Row]) -> None:
    table = Table("profile", "status", "url", "uptime", "restarts", "speculation", "acceptance")
    for r in rows:
        rate = r.stats.acceptance_rate if r.stats else None
        acc = (f"{rate:.0%} ({r.stats.accepted}/{r.stats.drafted})" if r.stats and rate is not None
               else "-")
        table.add_row(r.profile, r.status, r.url, f"{r.uptime_s / 60:.0f} min", str(r.restarts),
                      r.spec, acc)
    console.print(table)
    for r in rows:
        if r.note:
            console.print(f"{r.profile}: {r.note}", highlight=False)


@contextmanager
def progress_bar(console: Console, what: str) -> Iterator[Callable[[str], None]]:
    """A spinner line that shows the latest step of long work."""
    with Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
                  console=console, transient=True) as bar:
        task = bar.add_task(what)
        yield lambda msg: bar.update(task, description=f"{what}: {msg}")


def _x(value: float | None) -> str:
    return f"{value:.2f}x" if value is not None else "-"


def _pct(value: float | None) -> str:
    return f"{value:.0%}" if value is not None else "-"


def show_bench(console: Console, result: dict[str, Any]) -> None:
    for label, rows in result["configs"].items():
        table = Table(title=f"{result['profile']}: {label} vs baseline ({result['hardware']})")
        for col in ("category", "base t/s", "spec t/s", "speedup", "95% CI", "range", "accept",
                    "acc/step", "same", "n"):
            table.add_column(col, justify="left" if col == "category" else "right")
        for cat in [*result["categories"], "overall"]:
            r = rows[cat]
            table.add_row(
                cat, f"{r['baseline_tps']:.1f}" if r["baseline_tps"] else "-",
                f"{r['tps']:.1f}" if r["tps"] else "-", _x(r.get("speedup")) +
                ("*" if r.get("noisy") else ""),
                f"{_x(r.get('speedup_low'))}-{_x(r.get('speedup_high'))}".replace("x-", "-"),
                f"{_x(r.get('speedup_min'))}-{_x(r.get('speedup_max'))}".replace("x-", "-"),
                _pct(r["acceptance"]),
                f"{r['accepted_per_step']:.2f}" if r["accepted_per_step"] else "-",
                _pct(r["identical"]), str(r["n"]))
        console.print(table)
    console.print("speedup: median of paired ratios; * = noisy (wide interval or few samples); "
                  "same = greedy output identical to the baseline's")
    console.print(f"[bold]verdict:[/bold] {escape(result['verdict'])}")


def show_curve(console: Console, data: dict[str, Any]) -> None:
    table = Table("k", "tokens/step", "speedup", title=f"alpha {data['alpha']}, c {data['cost']}")
    for p in data["curve"]:
        mark = " <- best" if p["k"] == data["best_k"] else ""
        table.add_row(str(p["k"]), f"{p['tokens_per_step']:.2f}", f"{p['speedup']:.2f}x{mark}")
    console.print(table)


def show_tuned(console: Console, result: Tuned) -> None:
    predicted = {int(p["k"]): p["speedup"] for p in result.predicted}
    table = Table("config", "predicted", "measured", "tok/s", "acceptance", "seconds",
                  title=f"{result.profile}: alpha {result.alpha}, c {result.cost}, "
                        f"v {result.verify}, baseline {result.baseline_tps:.1f} tok/s")
    for m in result.measured:
        pred = predicted.get(m.k) if m.method == "draft" and m.p_min is None else None
        table.add_row(m.label, _x(pred), _x(m.speedup), f"{m.tps:.1f}", _pct(m.acceptance),
                      f"{m.seconds:.0f}")
    console.print(table)
    for line in result.skipped:
        console.print(escape(line), highlight=False)
    console.print(f"[bold]result:[/bold] {escape(result.summary)} (tuning took "
                  f"{result.seconds:.0f} s)")


def sweep_json(results: list[Measured], base_tps: float, seconds: float,
               tuned: Tuned | None) -> dict[str, Any]:
    best = max(results, key=lambda m: m.speedup)
    data: dict[str, Any] = {"baseline_tps": round(base_tps, 3), "seconds": round(seconds, 1),
                            "best_k": best.k, "best_speedup": best.speedup,
                            "sweep": [{"k": m.k, "speedup": m.speedup, "tps": m.tps,
                                       "acceptance": m.acceptance} for m in results]}
    if tuned is not None:
        mine = next((m for m in results if m.k == tuned.k), None)
        data["tuned"] = {"method": tuned.method, "k": tuned.k, "seconds": tuned.seconds,
                         "time_ratio": round(tuned.seconds / seconds, 3) if seconds else None,
                         "share_of_best": (round(mine.speedup / best.speedup, 3)
                                           if mine and tuned.method == "draft" else None)}
    return data


def show_sweep(console: Console, data: dict[str, Any]) -> None:
    table = Table("k", "speedup", "tok/s", "acceptance",
                  title=f"exhaustive sweep (baseline {data['baseline_tps']:.1f} tok/s, "
                        f"{data['seconds']:.0f} s)")
    for row in data["sweep"]:
        table.add_row(str(row["k"]), _x(row["speedup"]), f"{row['tps']:.1f}",
                      _pct(row["acceptance"]))
    console.print(table)
    t = data.get("tuned")
    if t:
        console.print(f"tuned choice: {t['method']} k={t['k']} reaches "
                      f"{_pct(t['share_of_best'])} of the best measured here (k={data['best_k']});"
                      f" tuning took {_pct(t['time_ratio'])} of this sweep's time")


def show_drafts(console: Console, target: str, ranked: list[Candidate]) -> None:
    table = Table("#", "draft", "where", "ok", "score", "reason", title=f"drafts for {target}")
    for i, c in enumerate(ranked, 1):
        where = str(c.path) if c.path else c.model
        table.add_row(str(i), c.name, f"{c.source}: {where}", "yes" if c.compatible else "no",
                      f"{c.score:.2f}x" if c.compatible else "-", escape(c.reason))
    console.print(table)


def show_hardware(console: Console, hw: Hardware) -> None:
    console.print(f"[bold]machine[/bold]  {hw.name} ({hw.os}/{hw.arch}): {hw.describe()}")
    console.print(f"[bold]cpu[/bold]      {hw.cpu.model}, {hw.cpu.cores} cores, "
                  f"{hw.cpu.ram_gb:.1f} GB RAM, SIMD: {', '.join(hw.cpu.flags) or '-'}")
    for g in hw.gpus:
        console.print(f"[bold]gpu {g.index}[/bold]    {g.name}, {g.memory_gb:.1f} GB")
