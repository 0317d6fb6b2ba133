"""A generated unit under a real systemd (tests/real_systemd.py: its own namespaces, nothing
outside them writable): it serves the smallest testbed profile, survives a `kill -9` of the
server (restarted once, by systemd alone: the supervisor does not restart under a manager),
reports that restart once with its last exit in `service status` and `status`, logs to the
journal read by `specctl logs`, and `systemctl stop` leaves no process behind."""

from __future__ import annotations

import os
import shlex
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from specctl.orchestrator.contract.dirs import Dirs
from specctl.orchestrator.runtime import state
from specctl.orchestrator.runtime.servers import free_port
from tests.cli import ROOT
from tests.real_systemd import Manager, why_not

WHY_NOT = why_not()
pytestmark = [pytest.mark.manager,
              pytest.mark.skipif(WHY_NOT is not None, reason=f"no service manager can run "
                                 f"here: {WHY_NOT}")]
SMOL = ('target = "testbed:smollm2-135m"\ndraft = "testbed:smollm2-135m"\nk = 3\n'
        'backend = ["llamacpp"]\n')
USER = "nobody"  # a system service never runs as root
UNIT = "specctl-smol.service"
TOKEN = "hf_it's \"quoted\" $HOME `x` \\ 100%"


@pytest.fixture
def manager() -> Iterator[Manager]:
    rw = Path(tempfile.mkdtemp(prefix="specctl-manager-", dir="/home"))
    rw.chmod(0o755)
    # what the tests and the service run from, wherever the checkout is (a clone under /tmp)
    started = Manager(rw, keep=(ROOT, Path(sys.prefix), Path(sys.base_prefix),
                                Path(sys.executable).resolve().parent, Dirs.from_env().cache))
    try:
        yield started
    finally:
        started.stop()
        shutil.rmtree(rw, ignore_errors=True)


def wait_for(check: Callable[[], object], what: str, timeout: float = 180) -> object:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.5)
    pytest.fail(f"{what}: not reached in {timeout:.0f} s")


@pytest.mark.server
def service_env(rw: Path) -> dict[str, str]:
    return {"PATH": f"{Path(sys.executable).parent}:/usr/sbin:/usr/bin:/sbin:/bin",
            # nobody's home: the dirs below stay where they are for the service user
            "HOME": "/nonexistent", "SPECCTL_STATE_DIR": str(rw / "state"),
            "SPECCTL_CONFIG_DIR": str(rw / "config"), "HF_HOME": str(rw / "hf"),
            "SPECCTL_CACHE_DIR": str(Dirs.from_env().cache),  # the testbed build and models
            "HF_HUB_OFFLINE": "1", "NO_COLOR": "1", "COLUMNS": "250",
            "HF_TOKEN": TOKEN}  # a secret: only in the environment file, read by systemd


def specctl_in(manager: Manager, env: dict[str, str], *args: str) -> tuple[int, str]:
    done = manager.run(["env", "-C", str(ROOT), sys.executable, "-m", "specctl", *args],
                       env=env)
    return done.returncode, done.stdout + done.stderr


def show_of(manager: Manager, prop: str) -> str:
    return manager.run(["systemctl", "show", "-p", prop, "--value", UNIT]).stdout.strip()


@pytest.mark.server
def test_a_unit_serves_survives_kill_9_once_and_stops_clean(manager: Manager) -> None:
    rw, port = manager.rw, free_port()
    profile = rw / "smol.toml"
    profile.write_text(SMOL + f"[server]\nport = {port}\ncontext = 1024\n")
    env = service_env(rw)

    def specctl(*args: str) -> tuple[int, str]:
        return specctl_in(manager, env, *args)

    def show(prop: str) -> str:
        return show_of(manager, prop)

    code, out = specctl("service", "install", "--profile", str(profile), "--system",
                        "--user-name", USER, "--manager", "systemd", "--enable")
    assert code == 0, out
    url = f"http://127.0.0.1:{port}/health"
    wait_for(lambda: _ok(url) and _running(rw), "the service serves")
    first = int(show("MainPID"))
    environ = manager.run(["cat", f"/proc/{first}/environ"]).stdout.split("\0")
    assert f"HF_TOKEN={TOKEN}" in environ  # systemd read the file exactly as written
    assert TOKEN not in manager.run(["systemctl", "cat", UNIT]).stdout
    server = _server_pid(manager)
    assert manager.run(["kill", "-9", str(server)]).returncode == 0
    wait_for(lambda: show("NRestarts") == "1" and _ok(url) and _running(rw)
             and _server_pid(manager) != server, "systemd restarted it")
    assert int(show("MainPID")) != first  # the whole service restarted: systemd's layer
    time.sleep(3)
    assert show("NRestarts") == "1"  # once: nothing else restarted it
    code, out = specctl("service", "status", "smol", "--system")
    assert code == 0, out
    assert f"systemd {UNIT}: active (running), 1 restart by systemd, last exit status 137" in out
    code, out = specctl("status")
    assert "1 restart by systemd, last exit status 137" in out, out
    code, out = specctl("logs", "smol", "-n", "400")
    assert code == 0 and out.count("=== specctl: starting smol") == 2, out
    assert manager.run(["systemctl", "stop", UNIT]).returncode == 0
    assert show("ActiveState") == "inactive"
    left = manager.run(["pgrep", "-u", USER]).stdout.split()
    assert left == [], f"processes left after stop: {left}"


def _ok(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def _running(rw: Path) -> bool:
    """The supervisor says it serves (healthy and set up), not only the server. The state file
    is the service user's: specctl (as root here) rightly refuses to trust it, so the test reads
    it with the model's parser, past the owner check."""
    path = rw / "state" / "runs" / "smol.json"
    if not path.exists():
        return False
    return state.RunState.model_validate_json(path.read_text()).status == "running"


def _server_pid(manager: Manager) -> int:
    found = manager.run(["pgrep", "-u", USER, "-x", "llama-server"]).stdout.split()
    return int(found[0]) if found else 0


def test_the_harness_keeps_the_machine_as_it_was(manager: Manager) -> None:
    """Nothing outside the namespaces changes: / is read-only there, /tmp is its own; the
    checkout is seen there wherever it is (under /tmp too), read-only."""
    canary = Path(tempfile.mkstemp(prefix="specctl-canary-")[1])
    kept = ROOT / "pyproject.toml"
    try:
        assert manager.run(["sh", "-c", "rm -rf /tmp/* ; touch /etc/specctl-x"]).returncode
        assert canary.exists() and not Path("/etc/specctl-x").exists()
        assert os.access(manager.rw, os.W_OK)
        assert manager.run(["test", "-f", str(kept)]).returncode == 0
        assert manager.run(["touch", str(kept)]).returncode != 0 and kept.is_file()
    finally:
        canary.unlink()


@pytest.mark.server
def test_a_unit_reads_and_writes_its_files_under_tmp(manager: Manager) -> None:
    """PrivateTmp=yes gives the service a /tmp of its own: a profile and a state dir under the
    machine's /tmp (here the manager's) are bound into it, so the service reads the one and
    writes the other where the user looks, not into its own /tmp, dropped when it stops."""
    tmp, port = Path("/tmp/specctl-service-files"), free_port()
    profile, run = tmp / "smol.toml", tmp / "state" / "runs" / "smol.json"
    text = SMOL + f"[server]\nport = {port}\ncontext = 1024\n"
    made = manager.run(["sh", "-c", f"mkdir -m 0755 {tmp} && printf %s {shlex.quote(text)} "
                        f"> {profile}"])
    assert made.returncode == 0, made.stderr
    env = {**service_env(manager.rw), "SPECCTL_STATE_DIR": str(tmp / "state")}
    code, out = specctl_in(manager, env, "service", "install", "--profile", str(profile),
                           "--system", "--user-name", USER, "--manager", "systemd", "--enable")
    assert code == 0, out

    def running() -> bool:
        found = manager.run(["cat", str(run)])
        return found.returncode == 0 and state.RunState.model_validate_json(
            found.stdout).status == "running"

    # read here, in the manager's /tmp: the service wrote it there, not in its own
    wait_for(lambda: _ok(f"http://127.0.0.1:{port}/health") and running(), "the service serves")
    assert manager.run(["systemctl", "stop", UNIT]).returncode == 0
    assert show_of(manager, "ActiveState") == "inactive"


def test_systemd_reads_the_secrets_file_exactly_as_written(manager: Manager) -> None:
    from specctl.orchestrator.service import envfile

    secrets = {"HF_TOKEN": TOKEN, "KEY": "plain", "OTHER": "it's", "EMPTY": ""}
    env_file, out = manager.rw / "s.env", manager.rw / "environ"
    envfile.write(env_file, secrets)
    unit = manager.rw / "specctl-envcheck.service"
    unit.write_text(f"[Service]\nType=oneshot\nEnvironmentFile={env_file}\n"
                    f"ExecStart=/bin/sh -c 'env -0 > {out}'\n")
    assert manager.run(["systemctl", "link", str(unit)]).returncode == 0
    done = manager.run(["systemctl", "start", "specctl-envcheck.service"])
    assert done.returncode == 0, done.stderr
    got = dict(v.split("=", 1) for v in out.read_text().split("\0") if "=" in v)
    assert {k: got.get(k) for k in secrets} == secrets


def test_a_crash_loop_is_systemds_alone_and_reported_once(manager: Manager) -> None:
    """A profile broken after install: every start fails (exit 2); systemd restarts it up to
    StartLimitBurst=5 starts and stops; `service status` reports the count and last exit."""
    rw = manager.rw
    profile = rw / "smol.toml"
    profile.write_text(SMOL)
    env = service_env(rw)
    code, out = specctl_in(manager, env, "service", "install", "--profile", str(profile),
                           "--system", "--user-name", USER, "--manager", "systemd", "--enable")
    assert code == 0, out
    profile.write_text(SMOL + "k = 0\n")  # now invalid: `up` exits 2 at once
    wait_for(lambda: show_of(manager, "ActiveState") == "failed", "systemd gave up", 150)
    # StartLimitBurst=5: five starts ran, the fifth restart was refused
    assert show_of(manager, "NRestarts") == "5"
    code, out = specctl_in(manager, env, "service", "status", "smol", "--system")
    assert code == 0, out
    assert (f"systemd {UNIT}: failed (failed, exit-code), 5 restarts by systemd, "
            "last exit status 2") in out, out
    code, out = specctl_in(manager, env, "logs", "smol", "-n", "200")
    assert out.count("not valid TOML") == 5, out  # each start's one line, in the journal
