"""Service units: built as objects, compared with golden files, verified by systemd itself."""

from __future__ import annotations

import os
import plistlib
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from specctl.orchestrator.config import profiles
from specctl.orchestrator.contract.dirs import Dirs
from specctl.orchestrator.service import manage, quote, units
from tests.cli import specctl

GOLDEN = Path(__file__).parent / "fixtures" / "units"


def fixed_spec(system: bool = False) -> units.ServiceSpec:
    return units.ServiceSpec(
        profile="cpu-demo",
        argv=units.service_argv(("/usr/bin/python3", "-m", "specctl"), "cpu-demo"),
        env={"SPECCTL_STATE_DIR": "/var/lib/specctl/state", "PYTHONUNBUFFERED": "1"},
        writable=(Path("/var/lib/specctl/state"),), log_dir=Path("/var/lib/specctl/state/logs"),
        env_file=Path("/etc/specctl/service.env"), system=system)


def test_systemd_unit_matches_the_golden_file() -> None:
    assert units.systemd_unit(fixed_spec()).render() == \
        (GOLDEN / "specctl-cpu-demo.service").read_text()


def test_launchd_plist_matches_the_golden_file_and_round_trips() -> None:
    text = units.render_plist(units.launchd_plist(fixed_spec()))
    assert text == (GOLDEN / "dev.specctl.cpu-demo.plist").read_text()
    data = plistlib.loads(text.encode())
    assert data["Label"] == "dev.specctl.cpu-demo"
    assert data["ProgramArguments"][-4:] == ["up", "--profile", "cpu-demo", "--foreground"]
    assert data["RunAtLoad"] is True and data["KeepAlive"] == {"SuccessfulExit": False}
    assert data["EnvironmentVariables"]["SPECCTL_STATE_DIR"] == "/var/lib/specctl/state"
    assert data["StandardOutPath"].endswith("cpu-demo.launchd.out.log")


def test_quoting_keeps_hostile_values_as_one_word() -> None:
    def command(arg: str) -> str:
        return quote.systemd_value(quote.Words((arg,), "command"))

    assert command("cpu-demo") == "cpu-demo"
    assert command("/a b/x.toml") == '"/a b/x.toml"'
    assert command("$(rm -rf ~) 100%") == '"$$(rm -rf ~) 100%%"'
    assert command('a"b\\c') == '"a\\"b\\\\c"'
    assert command("a\nb") == '"a\\x0ab"'
    assert quote.systemd_value(quote.Words(("A=$HOME",))) == '"A=$HOME"'  # no $ expansion there


def _verify(unit_text: str, name: str, tmp: Path) -> subprocess.CompletedProcess[str]:
    path = tmp / name
    path.write_text(unit_text)
    return subprocess.run(["systemd-analyze", "verify", str(path)], capture_output=True,
                          text=True, check=False)


def _shipped_units(manager: str) -> dict[str, str]:
    """Every shipped profile's unit as `service install --dry-run` renders it: through the
    command for those that plan on this machine, else (`install` refuses what `plan` refuses:
    a CUDA profile on a CPU box) from the same spec and renderer in this process."""
    dirs = Dirs.from_env()
    out = {}
    for name in profiles.available(dirs):
        done = specctl("service", "install", "--profile", name, "--manager", manager,
                       "--dry-run")
        planned = specctl("plan", "--profile", name)
        assert (done.returncode == 0) == (planned.returncode == 0), (name, done.stderr)
        if done.returncode == 0:
            out[name] = done.stdout
        else:
            assert done.stderr == planned.stderr and done.stdout == ""
            profile = profiles.load(name, dirs)
            spec = manage.spec_for(name, name, dirs, False, os.environ, None,
                                   profile.server.api_key_env, profile.backend)
            out[name] = manage.render(spec, manager)
    return out


def test_every_shipped_profile_gives_a_unit_systemd_accepts(tmp_path: Path) -> None:
    found = _shipped_units("systemd")
    assert len(found) >= 5
    for name, text in found.items():
        assert "KillMode=control-group" in text
        checked = _verify(text, f"specctl-{name}.service", tmp_path)
        assert checked.returncode == 0, (name, checked.stderr)
        assert checked.stderr.strip() == "", (name, checked.stderr)  # not even a warning
    done = specctl("service", "install", "--profile", "cpu-demo", "--manager", "systemd",
                   "--system", "--user-name", "daemon", "--dry-run")  # never as root
    assert done.returncode == 0 and "User=daemon" in done.stdout, done.stderr
    checked = _verify(done.stdout, "specctl-cpu-demo.service", tmp_path)
    assert checked.returncode == 0 and checked.stderr.strip() == "", checked.stderr


def test_systemd_analyze_rejects_a_broken_unit(tmp_path: Path) -> None:
    broken = units.systemd_unit(fixed_spec()).render().replace("KillMode=control-group",
                                                                "KillMode=everything")
    checked = _verify(broken, "specctl-broken.service", tmp_path)
    assert "kill mode" in checked.stderr and ":17:" in checked.stderr


def test_every_plist_round_trips(tmp_path: Path) -> None:
    for name, text in _shipped_units("launchd").items():
        data = plistlib.loads(text.encode())
        assert data["Label"] == f"dev.specctl.{name}"
        assert {"ProgramArguments", "RunAtLoad", "KeepAlive", "StandardOutPath",
                "StandardErrorPath", "EnvironmentVariables"} <= set(data)


def test_install_writes_the_unit_and_runs_nothing_unless_asked(tmp_path: Path) -> None:
    import os

    env = {**os.environ, "HOME": str(tmp_path)}
    done = specctl("service", "install", "--profile", "cpu-demo", "--manager", "systemd",
                   env=env)
    assert done.returncode == 0, done.stderr
    unit = tmp_path / ".config/systemd/user/specctl-cpu-demo.service"
    assert unit.is_file() and "ran:" not in done.stdout
    assert "systemctl --user daemon-reload" in done.stdout  # told, not done
    gone = specctl("service", "uninstall", "cpu-demo", "--manager", "systemd", env=env)
    assert gone.returncode == 0 and not unit.exists()


def test_install_over_a_unit_shows_the_diff_and_replaces_it_atomically(tmp_path: Path) -> None:
    import os

    env = {**os.environ, "HOME": str(tmp_path)}
    env.pop("SPECCTL_SERVER__PORT", None)
    args = ("service", "install", "--profile", "cpu-demo", "--manager", "systemd")
    assert specctl(*args, env=env).returncode == 0
    unit = tmp_path / ".config/systemd/user/specctl-cpu-demo.service"
    before, inode = unit.read_text(), unit.stat().st_ino
    done = specctl(*args, env={**env, "SPECCTL_SERVER__PORT": "9123"})
    assert done.returncode == 0, done.stderr
    said = " ".join(done.stdout.replace("/\n", "/").split())  # a long path wraps after a '/'
    assert f"replaced {unit}" in said
    assert "+Environment=SPECCTL_SERVER__PORT=9123" in done.stdout.splitlines()
    after = unit.read_text()
    assert after != before and "SPECCTL_SERVER__PORT=9123" in after
    assert unit.stat().st_ino != inode  # a new file renamed over the old one, not rewritten
    assert sorted(p.name for p in unit.parent.iterdir()) == [unit.name]  # no temp file left
    again = specctl(*args, env={**env, "SPECCTL_SERVER__PORT": "9123"})
    assert f"replaced {unit}: unchanged" in " ".join(again.stdout.replace("/\n", "/").split())


def test_the_gateway_installs_as_one_service_systemd_accepts(tmp_path: Path) -> None:
    env = {**os.environ, "SPECCTL_GATEWAY_API_KEY": "sk-unit-secret-1"}
    for scope in (["--user"], ["--system", "--user-name", "daemon"]):
        done = specctl("service", "install", "--gateway", "-p", "cpu-demo", "-p", "cpu-demo-q4",
                       "--port", "8071", "--manager", "systemd", *scope, "--dry-run", env=env)
        assert done.returncode == 0, done.stderr
        exec_start = next(ln for ln in done.stdout.splitlines() if ln.startswith("ExecStart="))
        assert exec_start.endswith(" -m specctl gateway cpu-demo cpu-demo-q4 --host 127.0.0.1 "
                                   "--port 8071")
        assert "sk-unit-secret-1" not in done.stdout + done.stderr  # the key: the env file
        assert "EnvironmentFile=-" in done.stdout and "gateway.env" in done.stdout
        checked = _verify(done.stdout, "specctl-gateway.service", tmp_path)
        assert checked.returncode == 0 and checked.stderr.strip() == "", checked.stderr
    plist = specctl("service", "install", "--gateway", "--manager", "launchd", "--dry-run")
    assert plist.returncode == 0, plist.stderr
    args = plistlib.loads(plist.stdout.encode())["ProgramArguments"]
    assert args[-5:] == ["gateway", "--host", "127.0.0.1", "--port", "8070"]


def test_the_gateway_service_refuses_what_would_fail(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "SPECCTL_GATEWAY_API_KEY"}
    done = specctl("service", "install", "--gateway", "--host", "0.0.0.0", "--dry-run", env=env)
    assert done.returncode == 2 and "needs an API key" in done.stderr
    done = specctl("service", "install", "--gateway", "-p", "cpu-dem", "--dry-run")
    assert done.returncode != 0 and "cpu-dem" in done.stderr
    done = specctl("service", "install", "--dry-run")
    assert done.returncode == 2 and "name one profile with -p" in done.stderr


def test_an_install_under_tmp_is_bound_into_the_private_tmp(tmp_path: Path) -> None:
    """PrivateTmp=yes gives the service its own /tmp and /var/tmp: what it runs from, reads and
    writes there (a venv and profile in a checkout under /tmp, a state dir in /var/tmp) is bound
    in from the host, read-only or writable; the unit of an install elsewhere is unchanged."""
    golden = (GOLDEN / "specctl-cpu-demo.service").read_text()
    elsewhere = replace(fixed_spec(), readable=(Path("/usr"), Path("/opt/venv")))
    assert units.systemd_unit(elsewhere).render() == golden
    spec = units.ServiceSpec(
        profile="cpu-demo",
        argv=units.service_argv((sys.executable, "-m", "specctl"), "/tmp/co/p.toml"),
        env={"PYTHONUNBUFFERED": "1"},
        writable=(Path("/var/lib/specctl/state"), Path("/var/tmp/specctl/cache"),
                  Path("/tmp/co/state")),
        log_dir=Path("/var/lib/specctl/state/logs"),
        readable=(Path("/tmp/co/.venv"), Path("/tmp/co/.venv/bin/python3"), Path("/tmp/co"),
                  Path("/tmp/co/p.toml"), Path("/usr"), Path("/var/tmp/specctl/cache/x")))
    lines = units.systemd_unit(spec).render().splitlines()
    assert "ReadWritePaths=-/var/lib/specctl/state" in lines  # only what the host's view has
    assert "BindReadOnlyPaths=-/tmp/co" in lines  # once: the folders in it come with it
    assert "BindPaths=-/tmp/co/state -/var/tmp/specctl/cache" in lines  # on top: writable
    assert "PrivateTmp=yes" in lines
    checked = _verify("\n".join(lines) + "\n", "specctl-cpu-demo.service", tmp_path)
    assert checked.returncode == 0 and checked.stderr.strip() == "", checked.stderr
    colon = replace(spec, readable=(Path("/tmp/a:b"),))
    with pytest.raises(quote.UnitValueError, match="':' in BindPaths="):
        units.systemd_unit(colon).render()


def test_the_service_reads_this_install_wherever_it_lies() -> None:
    """What `service install` lists as read covers this very interpreter, venv and code, so an
    install under /tmp (a checkout there) is bound into the service's private /tmp."""
    spec = manage.spec_for("cpu-demo", "cpu-demo", Dirs.from_env(), False, dict(os.environ))
    code = Path(units.__file__).resolve()  # an editable install: where the checkout really is
    for path in (code, Path(sys.executable), Path(sys.prefix), Dirs.from_env().config):
        assert any(path.absolute().is_relative_to(r) for r in spec.readable), path
