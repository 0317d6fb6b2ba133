"""up / down / status / logs: run a profile's server under a supervisor, find it, stop it."""

from __future__ import annotations

import contextlib
import os
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import psutil
from tenacity import RetryError, Retrying, retry_if_result, stop_after_delay, wait_fixed

from specctl.orchestrator.app import App, Resolved
from specctl.orchestrator.config.adhoc import Flags
from specctl.orchestrator.contract.dirs import Dirs
from specctl.orchestrator.contract.launch import Endpoint, Launch, api_key
from specctl.orchestrator.contract.plan import plan_json
from specctl.orchestrator.contract.stats import SpecStats
from specctl.orchestrator.errors import ModelError, ServerError, SpecctlError, StateError
from specctl.orchestrator.files import inside, open_private, private_dir
from specctl.orchestrator.humanize import Say
from specctl.orchestrator.runtime import handoff, procs, state
from specctl.orchestrator.runtime import routed as router
from specctl.orchestrator.runtime.supervise import Policy, Supervisor
from specctl.orchestrator.service import observe


def _clean_leftover(runs: Path, profile: str, say: Say) -> None:
    """A previous supervisor that died (SIGKILL, reboot) may have left its server group."""
    try:
        old = state.load(runs, profile)
    except StateError as exc:
        say(f"note: {exc}")
        return
    if old is None:
        return
    if supervisor_of(old) is not None:
        raise ServerError(f"profile {profile} is already up at {old.url} (supervisor pid "
                          f"{old.supervisor_pid}); `specctl down {profile}` first")
    leader = server_of(old)
    if leader is not None:
        say(f"stopping a leftover {profile} server (pid {old.server_pid}) from an earlier run")
        procs.stop_recorded_group(old.server_pgid, leader)
    state.remove(runs, profile)


def supervisor_of(run: state.RunState) -> psutil.Process | None:
    """The run's supervisor, if the recorded one is still running (identity checked)."""
    return procs.ours(run.supervisor_pid, run.supervisor_started, run.supervisor_cmdline)


def server_of(run: state.RunState) -> psutil.Process | None:
    """The run's server (its process group's leader), if still the recorded one."""
    return procs.ours(run.server_pid, run.server_started, run.server_cmdline)


def ready_of(app: App, resolved: Resolved, ref: str = "",
             flags: Flags | None = None) -> handoff.Ready:
    """The resolved launch, checked: its model files are on disk (else how to get them). A
    plan that `routed` serves through the router: the launch is then `specctl gateway REF` of
    the profile alone, on the profile's address (`ref`, `flags`: what `up` was given)."""
    plan, resolver = resolved.plan, app.resolver()
    files = [str(resolver.require_file(m)) for m in (plan.target, plan.draft) if m is not None]
    engine = resolved.launch()
    launch, spec = engine, plan.describe_spec()
    data = plan_json(plan, resolved.installed, engine)
    if routed(resolved):
        launch = router_launch(resolved, ref or plan.profile, flags or Flags())
        spec = (f"{spec} or no draft, per request: the router learns which from what it "
                "serves") if plan.speculative else (
            "per request from the saved tune's figures per kind (no draft for the whole mix): "
            "the router learns from what it serves")
        data["served_by"] = list(launch.argv)  # the router, which runs the plan's servers
    return handoff.Ready.of(plan.profile, plan.host, plan.port, spec, launch, files, data)


def routed(resolved: Resolved) -> bool:
    """Whether `up` serves the profile through the router (the gateway's, for it alone): it
    speculates, or a saved tune left it without a draft (not surely faster for the whole mix:
    its figures per kind are still the router's start, as the gateway's), with k = "auto"
    (the choice is left to specctl), its engine's servers share the weights (a second server
    costs its KV, not a second copy: llama.cpp on the CPU and Metal) and its [gateway] route is
    on. Elsewhere one server serves the plan, its setting (tuned: the one best for the whole
    mix) for every request."""
    plan, profile = resolved.plan, resolved.profile
    return ((plan.speculative or plan.k_source == "tuned") and profile.k == "auto"
            and profile.gateway.route and resolved.backend.shares_weights(plan))


ROUTER_KEEP_ALIVE = {"SPECCTL_GATEWAY__KEEP_ALIVE": "-1"}  # its servers stay up, as `up`'s does


def router_launch(resolved: Resolved, ref: str, flags: Flags) -> Launch:
    """`specctl gateway REF --warm` on the profile's host and port: its servers started at
    once and kept up, no background tune, the profile's API key variable as its key (a
    profile file by its absolute path: the supervisor runs elsewhere)."""
    plan = resolved.plan
    where = Path(ref).expanduser()
    if ref.endswith(".toml") or where.is_file():
        ref = str(where.resolve())
    argv = [sys.executable, "-m", "specctl", "gateway", ref,
            "--host", plan.host, "--port", str(plan.port), "--idle-tune", "off", "--warm",
            "--start-wait", "0"]
    if plan.api_key_env:
        argv += ["--api-key-env", plan.api_key_env]
    return Launch.http(argv, plan.host, plan.port, health_failed=frozenset({500}),
                       env={**ROUTER_KEEP_ALIVE, **flags.environment()}, model=plan.profile)


def check_start(app: App, ready: handoff.Ready, say: Say) -> None:
    """Before a run starts, once: its state can be written, no earlier run of it is up (a
    leftover server of a dead one is stopped), its model files are there, its port is free.
    (`runtime/preflight.check` is `up`'s check of the plan before any work.)"""
    runs = app.dirs.runs
    private_dir(runs)
    state.check_writable(runs)
    _clean_leftover(runs, ready.name, say)
    for file in ready.files:
        if not Path(file).exists():
            raise ModelError(f"model file {file} is gone since `up` planned; restore it or run "
                             "`specctl up` again")
    procs.ensure_port_free(ready.host, ready.port)


def policy_of(app: App) -> Policy:
    s = app.settings
    return Policy(health_timeout=s.health_timeout, max_restarts=s.max_restarts,
                  backoff_base=s.restart_backoff, grace=s.stop_grace,
                  log_max_bytes=s.log_max_bytes, log_backups=s.log_backups)


def serve_foreground(app: App, ready: handoff.Ready, say: Say, checked: bool = False) -> int:
    """Run the supervisor in this process (for systemd/launchd and for the detached `up`),
    under the run's lock; `checked`: the `up` that handed the launch over ran `check_start`."""
    with state.profile_lock(app.dirs.runs, ready.name):
        if not checked:
            check_start(app, ready, say)
        return supervise_launch(app, ready, say)


def supervise_launch(app: App, ready: handoff.Ready, say: Say) -> int:
    """Supervise the launch under its run name (the caller holds its lock) and its port's."""
    with state.port_lock(app.dirs.runs, ready.port):
        return _supervise(app, ready, say)


def _supervise(app: App, ready: handoff.Ready, say: Say) -> int:
    private_dir(app.dirs.logs)
    me, launch = os.getpid(), ready.launch()
    started, cmdline = procs.identity(me) or (0.0, [])
    run = state.RunState(
        profile=ready.name, supervisor_pid=me, supervisor_started=started,
        supervisor_cmdline=cmdline, url=launch.base_url, metrics_url=launch.metrics_url,
        port=ready.port, host=ready.host,  # under systemd: the journal, else a rotated file
        log=procs.JOURNAL if procs.journal_connected() else str(
            inside(app.dirs.logs, ready.name, ".log")),
        spec=ready.spec, plan=ready.plan)
    state.save(app.dirs.runs, run)
    return Supervisor(run, launch, app.dirs.runs, policy_of(app), say).serve()


def serve_worker(app: App, host: str, port: int, threads: int | None, say: Say) -> int:
    """A worker that lends this machine to a server elsewhere, under supervision, as run
    `worker-PORT`: the first installed backend that has workers."""
    name = f"worker-{port}"
    able = {n: b for n, b in app.backends().items() if b.has_workers}
    probed = app.probe(able)
    found = next(((able[n], i) for n, i in probed.items() if i is not None), None)
    if found is None:
        hints = "; ".join(b.install_hint for b in able.values())
        raise ServerError(f"no backend with workers is installed here; {hints or 'none known'}")
    backend, installed = found
    launch = backend.worker(installed, host, port, threads)
    ready = handoff.Ready.of(name, host, port, "worker", launch, [],
                             {"backend": f"{backend.name}-worker", "argv": list(launch.argv)})
    with state.profile_lock(app.dirs.runs, name):
        _clean_leftover(app.dirs.runs, name, say)
        procs.ensure_port_free(host, port)
        return supervise_launch(app, ready, say)


def start_detached(app: App, ready: handoff.Ready, say: Say) -> state.RunState:
    """Start the supervisor in its own session with the launch resolved here; wait until the
    server is healthy, return. The checks come before the first line, so a refusal is one
    line."""
    check_start(app, ready, say)
    path = handoff.write(app.dirs.runs, ready)
    try:
        return detach(app, ready.name, ["up", "--profile", ready.name, "--foreground",
                                        "--handoff", str(path)],
                      lambda: say(f"starting {ready.name}: {ready.spec}"))
    finally:
        path.unlink(missing_ok=True)


def detach(app: App, name: str, args: list[str],
           starting: Callable[[], None] = lambda: None) -> state.RunState:
    """Run `specctl ARGS` (a --foreground supervisor) in its own session; wait until healthy.
    `starting()` once the supervisor has the run's locks (its state is written): a supervisor
    refused before that (another run holds the port) is the one line said."""
    private_dir(app.dirs.logs)
    sup_log = inside(app.dirs.logs, name, ".supervisor.log")
    with os.fdopen(open_private(sup_log), "ab") as out:
        child = subprocess.Popen([sys.executable, "-m", "specctl", *args],
                                 stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                 start_new_session=True)
    policy = policy_of(app)
    timeout = policy.health_timeout + 30

    said: list[bool] = []

    def serving() -> state.RunState | None:
        try:
            run = state.load(app.dirs.runs, name)
        except SpecctlError:
            run = None
        if run is not None and run.supervisor_pid == child.pid:
            if not said:
                said.append(True)
                starting()
            if run.status == "running":
                return run
        if child.poll() is not None:
            raise ServerError(_why_it_stopped(sup_log, run))
        return None

    try:
        found = Retrying(stop=stop_after_delay(timeout), wait=wait_fixed(0.25),
                         retry=retry_if_result(lambda run: run is None))(serving)
    except RetryError:
        found = None
    if found is None:
        child.send_signal(signal.SIGTERM)
        child.wait(timeout=policy.grace + 10)
        raise ServerError(f"{name} did not become healthy in {timeout:.0f} s; "
                          f"see `specctl logs {name}`")
    return found


def _why_it_stopped(sup_log: Path, run: state.RunState | None) -> str:
    if run is not None and run.error:
        return run.error
    lines = [ln for ln in procs.tail(str(sup_log), 40).splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith("specctl: error:")]
    if errors:
        return errors[-1].removeprefix("specctl: error: ")
    return "\n".join(lines[-15:]) or (f"the supervisor exited before the server was up and left "
                                      f"no message in {sup_log}; is the disk full?")


def down(app: App, profile: str) -> bool:
    """Stop a profile's supervisor and its whole server group. True if something was running."""
    runs, grace = app.dirs.runs, app.settings.stop_grace
    try:
        run = state.load(runs, profile)
    except StateError:
        return _down_without_state(profile, runs, grace)  # the file was moved aside
    if run is None:
        return _down_without_state(profile, runs, grace)
    stopped = False
    supervisor = supervisor_of(run)
    if supervisor is not None:
        with contextlib.suppress(psutil.NoSuchProcess):
            supervisor.terminate()  # psutil checks pid and create time again before signalling
        _gone, alive = psutil.wait_procs([supervisor], timeout=grace + 10)
        for proc in alive:
            with contextlib.suppress(psutil.NoSuchProcess):
                proc.kill()
        stopped = True
    if procs.stop_recorded_group(run.server_pgid, server_of(run), grace):
        stopped = True
    state.remove(runs, profile)
    return stopped


def supervisors_of(profile: str, runs: Path) -> list[psutil.Process]:
    """Running `specctl up --profile PROFILE --foreground` processes found by command line that
    hold the profile's lock in `runs`: a same-named profile's supervisor of another state dir
    (another user, a test) is not ours."""
    lock = os.path.realpath(state.lock_path(runs, profile))
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        cmd = proc.info["cmdline"] or []
        if "specctl" not in cmd or "--foreground" not in cmd or "--profile" not in cmd:
            continue
        ref = cmd[cmd.index("--profile") + 1] if cmd.index("--profile") + 1 < len(cmd) else ""
        named = ref == profile or (ref.endswith(".toml") and Path(ref).stem == profile)
        if named and _holds(proc, lock):
            found.append(proc)
    return found


def _holds(proc: psutil.Process, path: str) -> bool:
    try:
        return any(os.path.realpath(f.path) == path for f in proc.open_files())
    except psutil.Error:
        return False


def _down_without_state(profile: str, runs: Path, grace: float) -> bool:
    """No usable state file: stop the profile's supervisor found by its command line and its
    lock (it then stops its own server group)."""
    sups = supervisors_of(profile, runs)
    for proc in sups:
        with contextlib.suppress(psutil.NoSuchProcess):
            proc.terminate()
    _gone, alive = psutil.wait_procs(sups, timeout=grace + 10)
    for proc in alive:
        proc.kill()
    return bool(sups)


def endpoint_of(run: state.RunState) -> Endpoint:
    """The run's endpoint as `status` reads it. The API key goes only to the server's own
    address: a loopback one (or the host the server binds), at the server's port; a metrics URL
    the state names elsewhere is read without it."""
    env_from = run.plan.get("env_from")
    key = api_key(env_from, os.environ) if isinstance(env_from, dict) and all(
        isinstance(v, str) for v in env_from.values()) else None
    if key is None or not run.metrics_url or not _own_address(run.metrics_url, run):
        key = None
    return Endpoint(run.url, run.metrics_url, key)


def _own_address(url: str, run: state.RunState) -> bool:
    try:
        parts = urlsplit(url)
        host, port = parts.hostname or "", parts.port
    except ValueError:
        return False
    if parts.scheme != "http" or port != run.port or parts.username or parts.password:
        return False
    return host == "127.0.0.1" or host == "::1" or (host == run.host and host != "")


@dataclass(frozen=True)
class Row:
    profile: str
    status: str
    url: str
    uptime_s: float
    restarts: int
    spec: str
    stats: SpecStats | None
    note: str = ""
    placement: str = ""  # what the engine chose (layers, context, buffers), from its log
    certificate: dict[str, Any] | None = None  # certificates.Found.to_json(), when speculating


def annotate(rows: list[Row], dirs: Dirs) -> list[Row]:
    """`status` rows with the manager's restart count and last exit for a profile run as a
    service (the supervisor does not restart there: one layer, one count)."""
    seen = observe.of_profiles([r.profile for r in rows], dirs)
    return [replace(r, restarts=seen[r.profile].restarts,
                    note="; ".join(filter(None, (seen[r.profile].summary(), r.note))))
            if r.profile in seen else r for r in rows]


def status(app: App) -> list[Row]:
    rows = []
    registry = app.backends()
    for profile in state.all_profiles(app.dirs.runs):
        try:
            run = state.load(app.dirs.runs, profile)
        except SpecctlError as exc:
            rows.append(Row(profile, "corrupt", "-", 0, 0, "-", None, str(exc)))
            continue
        if run is None:
            continue
        up = supervisor_of(run) is not None
        stats, note = None, ""
        backend = registry.get(str(run.plan.get("backend", "")))
        if up and run.status == "running" and backend is not None:
            try:
                endpoint = endpoint_of(run)
                stats = (router.stats(endpoint) if router.is_router(run.server_cmdline)
                         else backend.spec_stats(endpoint))
            except SpecctlError as exc:
                note = str(exc)
        label = run.status if up or run.status == "failed" else "dead (run `specctl down`)"
        log = (router.engine_log(app.dirs.logs, run.profile, str(run.plan.get("spec", "")), True)
               if router.is_router(run.server_cmdline) else Path(run.log))
        chose = backend.placement(_log_head(str(log))) if up and backend is not None else ""
        cert, problem = _certificate(app, run)
        rows.append(Row(profile, label, run.url,
                        time.time() - run.started_at, run.restarts, run.spec, stats,
                        note or (run.error or "") or problem, chose, cert))
    return rows


LOG_READ = 4 << 20  # of a server log, the last 4 MiB: the latest start is in it


def _log_head(path: str) -> str:
    """The end of a server log, where its latest start is (untrusted text, bounded; a regular
    file only, so a FIFO put in its place cannot hang `status`)."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return ""
        with open(path, "rb") as log:
            log.seek(0, os.SEEK_END)
            log.seek(max(log.tell() - LOG_READ, 0))
            return log.read(LOG_READ).decode("utf-8", "replace")
    except OSError:
        return ""


def _certificate(app: App, run: state.RunState) -> tuple[dict[str, Any] | None, str]:
    """The served configuration's losslessness certificate (measure/results/certificates.py): its
    state and the engine build it is for; None when the run does not speculate."""
    if run.plan.get("method", "none") == "none" or not run.plan.get("k"):
        return None, ""
    try:
        found = app.certificate_of_run(run.plan)
    except (SpecctlError, OSError) as exc:
        return None, f"certificate: {exc}"
    return (found.to_json() if found else None), ""
