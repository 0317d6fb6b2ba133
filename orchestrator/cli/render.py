"""Turn plans, machines and profiles into rich tables and JSON. No decisions here."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.markup import escape
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.text import Text

from specctl.orchestrator import sanitise
from specctl.orchestrator.cli import tables, wrap
from specctl.orchestrator.cli.tables import Column
from specctl.orchestrator.contract.hardware import Hardware
from specctl.orchestrator.contract.launch import Installed, Launch
from specctl.orchestrator.contract.plan import Plan
from specctl.orchestrator.humanize import duration
from specctl.orchestrator.planning.drafts import Candidate
from specctl.orchestrator.sizes import gib, gib_pair

if TYPE_CHECKING:
    from specctl.orchestrator.gateway.owned import Gateway
    from specctl.orchestrator.measure.results.tuned import Measured
    from specctl.orchestrator.measure.results.tuned import Result as Tuned
    from specctl.orchestrator.runs import Row


def hanging(console: Console, rows: Iterable[tuple[str, str]], bold: bool = True) -> None:
    """Key-value rows whose values wrap at spaces under themselves (a hanging indent) to the
    console's width; a word longer than the line (a path) is broken at the edge."""
    rows = list(rows)
    keys = max((len(k) for k, _ in rows), default=0)
    for key, value in rows:
        lines = wrap.prose(value, console.width, " " * (keys + 1))
        text = Text(key.ljust(keys) + " ", style="bold" if bold else "")
        text.append("\n".join(lines)[keys + 1:])
        console.print(text, soft_wrap=True, highlight=False)


def show_plan(console: Console, plan: Plan, installed: Installed, launch: Launch) -> None:
    m = plan.memory
    hanging(console, [(key, sanitise.line(value)) for key, value in (
        ("profile", plan.profile),
        ("machine", f"{plan.hardware.name}: {plan.hardware.describe()}"),
        ("backend", installed.describe()), ("target", plan.target.describe()),
        ("draft", plan.draft.describe() if plan.draft else "-"),
        ("speculation", plan.describe_spec() if plan.speculative else "off"),
        ("memory", "{} of {}: {}".format(*gib_pair(m.device_bytes, m.budget.limit),
                                         m.breakdown())),
        ("url", launch.base_url), *(("note", n) for n in plan.notices))])
    console.print("\n[bold]argv[/bold]")
    for line in wrap.shell(launch.argv, console.width):  # pastes back as the same command
        console.print(sanitise.line(line), soft_wrap=True, highlight=False, markup=False)
    console.print("\n[bold]why[/bold]")
    hanging(console, [("-", sanitise.line(reason)) for reason in plan.reasons], bold=False)


def status_json(row: Row) -> dict[str, Any]:
    stats = row.stats
    return {"profile": row.profile, "status": row.status, "url": row.url,
            "uptime_s": round(row.uptime_s), "restarts": row.restarts, "speculation": row.spec,
            "drafted": stats.drafted if stats else None,
            "accepted": stats.accepted if stats else None,
            "acceptance_rate": stats.acceptance_rate if stats else None, "note": row.note,
            "placement": row.placement or None, "certificate": row.certificate}


def show_status(console: Console, rows: list[Row]) -> None:
    cells = []
    for r in rows:
        rate = r.stats.acceptance_rate if r.stats else None
        acc = (f"{rate:.0%} ({r.stats.accepted}/{r.stats.drafted})" if r.stats and rate is not None
               else "-")
        cells.append([r.profile, r.status, r.url, duration(r.uptime_s) if r.uptime_s else "-",
                      str(r.restarts), r.spec, acc])
    tables.show(console, [Column("profile"), Column("status"), Column("url"),
                          Column("uptime", right=True), Column("restarts", right=True),
                          Column("speculation", text=True), Column("acceptance", right=True)],
                cells)
    for r in rows:
        if r.placement:
            console.print(f"{r.profile}: the engine chose {sanitise.line(r.placement)}",
                          highlight=False,
                          markup=False)
        if r.note:
            console.print(f"{r.profile}: {sanitise.line(r.note)}", highlight=False,
                          markup=False)
        if r.certificate:
            console.print(f"{r.profile}: certificate: {sanitise.line(r.certificate['line'])}",
                          highlight=False, markup=False)
            if r.certificate.get("structured"):
                console.print(f"{r.profile}: certificate: "
                              f"{sanitise.line(r.certificate['structured'])}", highlight=False,
                              markup=False)


@contextmanager
def progress_bar(console: Console, what: str) -> Iterator[Callable[[str], None]]:
    """A spinner line that shows the latest step of long work; where stderr is not a terminal
    (a log, a service, CI), a line per step with the seconds since the start instead."""
    if not console.is_terminal:
        began = time.monotonic()
        yield lambda msg: console.print(
            f"{what} [{time.monotonic() - began:4.0f} s]: {sanitise.line(msg)}",
            highlight=False, markup=False, soft_wrap=True)
        return
    with Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
                  console=console, transient=True) as bar:
        task = bar.add_task(what)
        yield lambda msg: bar.update(task, description=f"{what}: {msg}")


def _x(value: float | None) -> str:
    return f"{value:.2f}x" if value is not None else "-"


def _pct(value: float | None) -> str:
    return f"{value:.0%}" if value is not None else "-"


def _span(low: float | None, high: float | None) -> str:
    return f"{_x(low)}-{_x(high)}" if low is not None and high is not None else "-"


def _show_checks(console: Console, result: dict[str, Any]) -> None:
    """Greedy identity against the numerics model, and the floor's own check."""
    if result.get("numerics"):
        console.print(f"greedy identity against the baseline ({result['numerics']}):",
                      highlight=False, markup=False)
    for label, rows in result["configs"].items():
        if result.get("numerics") or any(rows[c].get("floor") is not None
                                         for c in result["categories"]):
            for cat in result["categories"]:
                console.print(f"  {label}, {cat}: {rows[cat]['identity']}",
                              highlight=False, markup=False)
    floor = result.get("floor_check")
    if floor:
        state = "passes" if floor["passed"] else "FAILS: the engine is broken"
        console.print(f"floor (every draft rejected) against the baseline: {state}",
                      highlight=False, markup=False)
        for cat, found in floor["greedy"].items():
            console.print(f"  greedy, {cat}: {found['message']}", highlight=False, markup=False)
        for cat, found in (result.get("floor_quality") or {}).get("categories", {}).items():
            console.print(f"  sampled, {cat}: {found['message']}", highlight=False, markup=False)


def _show_structured(console: Console, checked: dict[str, Any] | None) -> None:
    """--quality's tool-call and structured-output check: each setting's greedy answers against
    the baseline's, and each prompt not checked (and why)."""
    if checked is None:
        return
    kinds = ", ".join(dict.fromkeys(p["kind"] for p in checked["prompts"])) or "none"
    rule = ("the baseline's answer, or the floor's (numerics)" if checked.get("floor") else
            "the baseline's answer (no floor to explain a difference)")
    state = "the target's" if checked["passed"] else "CHANGED"
    console.print(f"tool calls and structured output, greedy ({len(checked['prompts'])} "
                  f"prompts: {kinds}; each must be {rule}): {state}", highlight=False,
                  markup=False)
    for label, side in checked["configs"].items():
        if side["n"]:
            console.print(f"  {label}: {sanitise.line(side['message'])}", highlight=False,
                          markup=False)
    for line in checked["not_checked"]:
        console.print(f"  not checked: {sanitise.line(line)}", highlight=False, markup=False)


def _show_conditions(console: Console, result: dict[str, Any]) -> None:
    """How the bench was measured, and each configuration's physical bound: what was
    discarded or is flagged against it."""
    said = result.get("conditions") or {}
    for label, rows in result["configs"].items():
        overall = rows.get("overall", {})
        if overall.get("bound") is None:
            continue
        line = f"{label}: physical bound {overall['bound']:.2f}x " + _bound_of(label, said)
        gone = sum(r.get("discarded", 0) for c, r in rows.items() if c != "overall")
        if gone:
            line += f"; {gone} pair(s) above it discarded as noise"
        console.print(line, highlight=False, markup=False)
        for cat, r in rows.items():
            if r.get("implausible"):
                console.print(f"(!) {label}, {cat}: {r['implausible']}", highlight=False,
                              markup=False)
    if not said:
        return
    how = ("one server at a time (alternating blocks), " if said.get("sequential") else
           "servers side by side, ")
    stop = {"precision": f"the precision ±{(said.get('precision') or 0):.0%} was reached",
            "budget": f"the budget ran out before ±{(said.get('precision') or 0):.0%}",
            "repeats": "the passes asked were done"}.get(str(said.get("stopped")), "")
    console.print(f"measured with {how}the baseline drifted {said.get('drift', 0):.0%} between "
                  f"blocks; {said.get('noise', '')}; {stop}", highlight=False, markup=False)
    if said.get("restarts"):
        console.print(f"servers whose drafter remembers earlier requests were restarted "
                      f"{said['restarts']} time(s), so that each timed request was new to them",
                      highlight=False, markup=False)


def _show_control(console: Console, control: dict[str, Any] | None) -> None:
    """`--also baseline`: the A/A control's figure, and what it says of this run's pairing."""
    if not control:
        return
    top = control["rows"]["overall"]
    if top.get("speedup") is None:
        return
    figure = (f"A/A control (a second baseline server, the same argv): {_x(top['speedup'])} "
              f"[{_span(top.get('speedup_low'), top.get('speedup_high'))}] over the baseline")
    cats = ", ".join(f"{c} {_x(r['speedup'])}" for c, r in control["rows"].items()
                     if c != "overall" and r.get("speedup") is not None)
    said = (f": the servers differ by up to {control['margin']:.0%} beyond what pairing "
            "removes; a difference within that is not shown (repeat on a quieter machine, or "
            "with more --repeats)" if control["biased"] else
            ": the pairing holds (its interval holds 1.00x)")
    console.print(f"{figure} ({cats}){said}", highlight=False, markup=False)


FIGURES = (("e2e", "e2e_speedup", "e2e"), ("TTFT", "ttft_ratio", "ttft"),
           ("decode", "decode_speedup", "decode"))  # header, key, interval prefix
OBJECTIVE_OF = {"latency": "e2e", "decode": "decode", "throughput": "tok/s"}


def _bench_row(cat: str, r: dict[str, Any], objective: str, usable: bool) -> list[str]:
    """A category's cells: the end-to-end, first-token and decode figures with their
    intervals (the objective's marked * where noisy; decode's (!) above the physical bound;
    in parentheses where the setting is not usable: no speedup), the range, the rest."""
    got = r if usable else {**r, **(r.get("ratio_not_a_speedup") or {})}
    if "decode_speedup" not in got and objective == "decode":  # a report from before
        got = {**got, "decode_speedup": got.get("speedup"), "decode_low": got.get(
            "speedup_low"), "decode_high": got.get("speedup_high")}
    cells = [cat]
    figures = ((("tok/s", "speedup", "speedup"),) if objective == "throughput" else ()) + FIGURES
    for header, key, prefix in figures:
        mark = ("*" if got.get("noisy") and header == OBJECTIVE_OF[objective] else "") + (
            " (!)" if r.get("implausible") and header == "decode" else "")
        text = _x(got.get(key)) + (mark if got.get(key) is not None else "")
        cells += [text if usable or got.get(key) is None else f"({text})",
                  _span(got.get(f"{prefix}_low"), got.get(f"{prefix}_high"))]
    return [*cells, _span(got.get("speedup_min"), got.get("speedup_max")),
            _pct(r["acceptance"]),
            f"{r['accepted_per_step']:.2f}" if r["accepted_per_step"] else "-",
            _pct(r["identical"]), str(r["n"]),
            f"{r['baseline_tps']:.1f}" if r["baseline_tps"] else "-",
            f"{r['tps']:.1f}" if r["tps"] else "-"]


def show_bench(console: Console, result: dict[str, Any]) -> None:
    objective = result.get("objective", "decode")
    heads = [*((["tok/s", "95% CI"]) if objective == "throughput" else []),
             *(h for head, _, _ in FIGURES for h in (head, "95% CI"))]
    columns = [Column("category"), *(Column(h, right=True) for h in (
        *heads, "range", "accept", "acc/step", "same", "n", "base t/s", "spec t/s"))]
    for label, rows in result["configs"].items():
        usable = rows["overall"].get("usable", True)
        cells = [_bench_row(cat, rows[cat], objective, usable)
                 for cat in [*result["categories"], "overall"]]
        tables.show(console, columns, cells,
                    title=f"{result['profile']} on {result['backend']}: {label} vs baseline "
                          f"({result['hardware']})" + ("" if usable else
                                                       ": NOT USABLE, (x) is no speedup"))
        _show_lengths(console, label, (result.get("buckets") or {}).get(label))
    console.print(f"objective: {OBJECTIVE_OF[objective]}; e2e, decode: the end-to-end and "
                  "decode speedups against the baseline on the same prompts (the workload's "
                  "mix overall); TTFT: the baseline's time to the first token over its; 95% "
                  "bootstrap intervals; range: per-prompt ratios; * = noisy (wide interval or "
                  "few samples); same = greedy output identical to the baseline's; t/s: "
                  "decode tokens/s", highlight=False, markup=False)
    _show_conditions(console, result)
    _show_control(console, result.get("control"))
    _show_checks(console, result)
    _show_structured(console, result.get("structured"))
    for label, found in (result.get("concurrency") or {}).items():
        cells = [[str(r["level"]), f"{r['baseline_tps']:.1f}", f"{r['tps']:.1f}",
                  _x(r["speedup"]), _span(r["speedup_low"], r["speedup_high"]),
                  f"{r['baseline_latency_s']:.2f}", f"{r['latency_s']:.2f}"]
                 for r in found["levels"]]
        tables.show(console, [Column("streams", right=True), *(Column(h, right=True) for h in (
            "base t/s", "spec t/s", "speedup", "95% CI", "base lat s", "spec lat s"))], cells,
            title=f"{label} under concurrent streams (aggregate tokens/s, median latency)")
        where = found["stops_paying_at"]
        console.print(f"{label}: " + (f"speculation stops paying at {where} concurrent "
                                      "stream(s)" if where else "speculation pays at every "
                                      "level measured"), highlight=False, markup=False)
    if result.get("settings", {}).get("workload"):
        console.print(f"workload: {result['settings']['workload']} (overall: the categories "
                      "weighted so)", highlight=False, markup=False)
    if result.get("routing"):
        show_routing(console, result["routing"], result.get("control"))
    quality = result.get("quality")
    if quality:
        console.print(f"sampling check at temperature {quality['temperature']}, top-p "
                      f"{quality['top_p']} ({quality['against']} vs baseline, "
                      f"{quality['samples_per_prompt']} completions of {quality['tokens']} tokens "
                      "per prompt and side):", highlight=False, markup=False)
        for cat, found in quality["categories"].items():
            console.print(f"  {cat}: {found['message']}", highlight=False, markup=False)
    console.print(f"[bold]verdict:[/bold] {escape(result['verdict'])}")


def _show_lengths(console: Console, label: str, rows: list[dict[str, Any]] | None) -> None:
    """The end-to-end speedup by prompt length (prompt tokens), where speculation stops
    paying."""
    if not rows:
        return
    cells = [[r["bucket"], str(r["prompts"]), _x(r["e2e_speedup"]),
              _span(r.get("e2e_low"), r.get("e2e_high"))] for r in rows]
    tables.show(console, [Column("prompt tokens"), *(Column(h, right=True) for h in (
        "prompts", "e2e", "95% CI"))], cells, title=f"{label}: end to end by prompt length")


def show_routing(console: Console, routing: dict[str, Any],
                 control: dict[str, Any] | None = None) -> None:
    """`bench --also routed`: the route and the classifier's confusion matrices; `control`:
    the A/A control (`--also baseline`), which says whether the route's edge is shown."""
    console.print(f"routed: {routing['route']}; {routing['memory']}", highlight=False,
                  markup=False)
    best = routing.get("over_best")
    if best:
        aa = ("" if not control or control.get("margin") is None else
              f" (A/A control {'FAILED' if control['biased'] else 'held'}: ±"
              f"{control['margin']:.0%})")
        console.print(f"routed over the best single setting ({best['best']}), paired: "
                      f"{best['speedup']:.2f}x [{best['speedup_low']:.2f}-"
                      f"{best['speedup_high']:.2f}]{aa}", highlight=False, markup=False)
    for key, title in (("held_out", "the shipped suites' held-out prompts (7-12)"),
                       ("workload", "this workload's prompts")):
        matrix = routing[key]
        kinds = list(next(iter(matrix.values()), {}))
        cells = [[true, *(str(row.get(k, 0)) for k in kinds)] for true, row in matrix.items()]
        tables.show(console, [Column("true kind"), *(Column(k, right=True) for k in kinds)],
                    cells, title=f"router on {title} (columns: routed as): "
                    f"{routing[key + '_accuracy']:.0%} right")


def show_gateway_routes(console: Console, found: Gateway) -> None:
    """A running gateway (gateway/owned.Gateway): its engines, each model's route and load,
    and per kind and load what its served requests told (the setting they chose and why)."""
    engines = ", ".join(f"{e.model} ({e.setting}) on {e.port}" for e in found.engines)
    console.print(f"gateway at {found.url} (pid {found.pid}): {engines or 'no server up'}",
                  highlight=False, markup=False)
    for model, routed in found.routes.items():
        load = f" [{routed.load}]" if routed.load else ""
        console.print(f"{model}{load}: {routed.route or routed.why}", highlight=False,
                      markup=False)
        cells = [[k.kind, k.load, k.setting, f"{k.requests} ({k.explored} explored)",
                  ", ".join(f"{s} {t:.1f} ({k.measured.get(s, 0)})"
                            for s, t in sorted(k.tps.items())) or "-", k.why]
                 for k in routed.kinds]
        if cells:
            tables.show(console, [Column("kind"), Column("load"), Column("serves"),
                                  Column("requests", right=True),
                                  Column("decode t/s (requests)", text=True),
                                  Column("why", text=True)], cells,
                        title=f"{model}: per kind and load, what the served requests chose")


def show_curve(console: Console, data: dict[str, Any]) -> None:
    """The predicted curve; "best" marks only a k that is faster than the target alone."""
    cells = [[str(p["k"]), f"{p['tokens_per_step']:.2f}", f"{p['speedup']:.2f}x",
              "best" if p["k"] == data["best_k"] else ""] for p in data["curve"]]
    tables.show(console, [Column("k", right=True), Column("tokens/step", right=True),
                          Column("speedup", right=True), Column("")], cells,
                title=f"alpha {data['alpha']}, c {data['cost']}")
    console.print(escape(data["verdict"]), highlight=False)


def _bound_of(label: str, said: dict[str, Any]) -> str:
    """What a bound is for its method: a draft model's drafts cost c each; n-gram methods,
    heads and chains (whose n-gram drafts are free) are held to k+1 of the longest draft."""
    if label.startswith("draft k=") and " + " not in label:
        return "(k+1)/(k*c+1)" + (f" for c = {said['cost']:.3f} measured here"
                                  if said.get("cost") else "")
    what = "a chain" if " + " in label else label.split(" k=")[0]
    return f"k+1 of the longest draft ({what} drafts cost no draft model's steps)"


def _show_pick(console: Console, result: Tuned) -> None:
    """The pick's end-to-end, first-token and decode figures with their intervals (none from
    fewer than MIN_REQUESTS paired requests: 'one request: no interval')."""
    from specctl.orchestrator.measure.estimates.estimate import shown as said

    shown = [(n, result.figures[k]) for n, k in (("end to end", "latency"), ("TTFT", "ttft"),
                                                 ("decode", "decode")) if k in result.figures]
    if shown:
        console.print("the pick: " + ", ".join(
            f"{name} {said(p or 0.0, lo, hi, result.requests)}" for name, (p, lo, hi) in shown)
            + f" (decided on {result.objective})", highlight=False, markup=False)


def _tuned_table(console: Console, result: Tuned) -> None:
    """Each measured configuration's row; its interval only from MIN_REQUESTS requests."""
    from specctl.orchestrator.measure.estimates.estimate import backed, no_interval

    predicted = {int(p["k"]): p["speedup"] for p in result.predicted}
    cats = list(dict.fromkeys(c for m in result.measured for c in m.categories))
    cells = []
    for m in result.measured:
        pred = (predicted.get(m.k) if m.method == "draft" and m.p_min is None and not m.chain
                else None)
        span = (f"{m.low:.2f}-{m.high:.2f}" if m.low is not None and m.high is not None
                else "-" if backed(m.requests) else no_interval(m.requests or 0))
        above = m.bound is not None and m.flag.startswith("above the physical bound")
        cells.append([m.label + (" (!)" if above else ""), _x(m.speedup), span,
                      *(_x(m.categories.get(c)) for c in cats), _x(m.latency), _x(m.ttft),
                      _x(m.decode), _x(pred), _x(m.bound), f"{m.tps:.1f}",
                      _pct(m.acceptance)])
    what = OBJECTIVE_OF[result.objective]
    tables.show(console, [Column("config"), *(Column(h, right=True) for h in (
        what, "95% interval", *cats, "e2e", "TTFT", "decode", "predicted", "bound", "tok/s",
        "acceptance"))], cells,
        title=f"{result.profile}: alpha {result.alpha}, c {result.cost}, v {result.verify}, "
              f"baseline {result.baseline_tps:.1f} tok/s")


def show_tuned(console: Console, result: Tuned) -> None:
    _tuned_table(console, result)
    what = OBJECTIVE_OF[result.objective]
    if result.workload:
        console.print(f"tuned for: {result.workload}; {result.concurrency} concurrent "
                      f"request(s); decided on {result.objective} ({what}: the workload's "
                      "figure against the baseline's, each category's beside it; e2e: "
                      "end to end, TTFT: the baseline's time to the first token over its, "
                      "decode: decode speed, predicted by the cost model)",
                      highlight=False, markup=False)
    for line in result.skipped:
        console.print(escape(line), highlight=False)
    for m in result.measured:
        if m.flag:
            console.print(f"{m.label}: {m.flag}", highlight=False, markup=False)
    if result.noise:
        console.print(f"while measuring: {result.noise}"
                      + ("; one server at a time" if result.sequential else ""),
                      highlight=False, markup=False)
    for line in result.schedule_notes:
        console.print(f"k by batch size: {line}", highlight=False, markup=False)
    if result.k_by_batch:
        ranges = ", ".join(f"{a}-{b}: k={k}" for a, b, k in result.k_by_batch)
        console.print(f"schedule: {ranges}", highlight=False, markup=False)
    if result.quality:
        console.print(f"quality: {result.quality}", highlight=False, markup=False)
    if result.winners:
        console.print("each category's best: " + "; ".join(
            f"{w.category} {w.text()}" for w in result.winners), highlight=False, markup=False)
    if result.unmeasured:
        console.print(f"not measured: {', '.join(result.unmeasured)} (served as before, no "
                      "draft: a pick measured on other kinds is no figure for them)",
                      highlight=False, markup=False)
    console.print(f"[bold]result ({result.state}):[/bold] {escape(result.summary)} (tuning "
                  f"took {result.seconds:.0f} s)")
    _show_pick(console, result)
    if result.method != "none" and not result.serves:
        slows = ", ".join(f"{c} {s.text()}" for c, s in result.slows.items())
        console.print("served: without a draft (" + (
            f"it surely slows {slows}" if slows else "not surely faster: it needs an interval "
            "above 1.00x and a point 5% over") + ")", highlight=False, markup=False)


def sweep_json(results: list[Measured], base_tps: float, seconds: float,
               tuned: Tuned | None) -> dict[str, Any]:
    best = max(results, key=lambda m: m.speedup)
    seconds = round(seconds, 1)  # the ratio below is of the figures shown, not of hidden digits
    data: dict[str, Any] = {"baseline_tps": round(base_tps, 3), "seconds": seconds,
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
    cells = [[str(row["k"]), _x(row["speedup"]), f"{row['tps']:.1f}", _pct(row["acceptance"])]
             for row in data["sweep"]]
    tables.show(console, [Column(h, right=True) for h in ("k", "speedup", "tok/s", "acceptance")],
                cells, title=f"exhaustive sweep (baseline {data['baseline_tps']:.1f} tok/s, "
                             f"{data['seconds']:.0f} s)")
    t = data.get("tuned")
    if t:
        console.print(f"tuned choice: {t['method']} k={t['k']} reaches "
                      f"{_pct(t['share_of_best'])} of the best measured here (k={data['best_k']});"
                      f" tuning took {_pct(t['time_ratio'])} of this sweep's time")


def show_drafts(console: Console, target: str, ranked: list[Candidate]) -> None:
    cells = [[c.name, "yes" if c.compatible else "no", f"{c.score:.2f}x" if c.compatible else "-",
              f"{c.source}: {c.path or c.model}", c.reason] for c in ranked]
    tables.show(console, [Column("draft"), Column("ok"), Column("score", right=True),
                          Column("where"), Column("reason", text=True)], cells,
                title=f"drafts for {sanitise.line(target)}")


def show_hardware(console: Console, hw: Hardware) -> None:
    def out(text: str) -> str:  # a recorded machine's names are outside text
        return escape(sanitise.line(text))

    console.print(f"[bold]machine[/bold]  {out(f'{hw.name} ({hw.os}/{hw.arch}): ')}"
                  f"{out(hw.describe())}")
    console.print(f"[bold]cpu[/bold]      {out(hw.cpu.model)}, {hw.cpu.cores} cores, "
                  f"{gib(hw.cpu.ram_bytes)} RAM, SIMD: {out(', '.join(hw.cpu.flags) or '-')}")
    for g in hw.gpus:
        console.print(f"[bold]gpu {g.index}[/bold]    {out(g.name)}, {gib(g.memory_bytes)}, "
                      f"{gib(g.used_bytes)} used by other processes, {gib(g.free_bytes)} free",
                      highlight=False)
    if hw.visibility:
        console.print(f"[bold]visible[/bold]  {out(hw.visibility)}", highlight=False)
