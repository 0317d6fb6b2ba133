"""Issue 14: what a hostile profile, a stale state file or a corrupt cache could do. One test (or
a few) per numbered item of the issue; each failed before the fix. The property-based suite
(tests/test_properties_parsers_writers.py) covers the same boundaries with generated inputs."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from specctl.adapters.ollama import Ollama
from specctl.adapters.ollama_store import MODEL_LAYER, OllamaStore
from specctl.orchestrator import runs
from specctl.orchestrator.app import App
from specctl.orchestrator.config import profiles
from specctl.orchestrator.contract.dirs import Dirs
from specctl.orchestrator.contract.launch import Launch, api_key
from specctl.orchestrator.errors import (
    BackendError,
    ModelError,
    ProfileError,
    ServerError,
    SpecctlError,
    StateError,
)
from specctl.orchestrator.measure.results import tuned
from specctl.orchestrator.planning import drafts
from specctl.orchestrator.runtime.server import server_env
from specctl.orchestrator.service import manage, units
from tests import plans
from tests.cli import ROOT, run_main
from tests.conftest import HARDWARE
from tests.test_planner import MAC, mac_profile, plan_for

MINIMAL = 'target = "hf:org/model"\ndraft = "none"\n'


def one_line(code: int, err: str, *needles: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code != 0 and len(lines) == 1, err
    assert "Traceback" not in err
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def directives(unit_text: str) -> list[str]:
    """The directive names of a unit, as systemd's line parser sees them."""
    keys, joined = [], unit_text.replace("\\\n", "")
    for line in joined.splitlines():
        line = line.strip()
        if line and not line.startswith(("#", ";", "[")) and "=" in line:
            keys.append(line.split("=", 1)[0].strip())
    return keys


def fixed_spec(**changes: Any) -> units.ServiceSpec:
    base: dict[str, Any] = dict(
        profile="cpu-demo", argv=units.service_argv(("/usr/bin/python3", "-m", "specctl"),
                                                    "cpu-demo"),
        env={"SPECCTL_STATE_DIR": "/var/lib/specctl/state"},
        writable=(Path("/var/lib/specctl/state"),), log_dir=Path("/var/lib/specctl/state/logs"),
        env_file=Path("/etc/specctl/service.env"))
    return units.ServiceSpec(**{**base, **changes})


def verify(unit_text: str, tmp: Path, name: str = "specctl-x.service") -> str:
    path = tmp / name
    path.write_text(unit_text)
    done = subprocess.run(["systemd-analyze", "verify", str(path)], capture_output=True,
                          text=True, check=False)
    assert done.returncode == 0, done.stderr
    return done.stderr.strip()


# --- 1. unit injection ------------------------------------------------------------------------

def test_1_a_profile_name_is_a_strict_identifier(tmp_path: Path, isolated_dirs: Dirs) -> None:
    for name in ("x\nExecStartPre=/bin/sh -c id", "a b", "../x", "x;y", ""):
        evil = tmp_path / "evil.toml"
        evil.write_text(f"name = {json.dumps(name)}\n" + MINIMAL)
        with pytest.raises(ProfileError, match="'name'"):
            profiles.load(str(evil), isolated_dirs)
    spaced = tmp_path / "my box.toml"
    spaced.write_text(MINIMAL)
    with pytest.raises(ProfileError, match="name"):
        profiles.load(str(spaced), isolated_dirs)


def test_1_service_install_refuses_an_injecting_name(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        tmp_path: Path) -> None:
    evil = tmp_path / "evil.toml"
    evil.write_text('name = "x\\nExecStartPre=/bin/sh -c id"\n' + MINIMAL)
    code, out, err = run_main(monkeypatch, capsys, "service", "install", "-p", str(evil),
                              "--manager", "systemd", "--dry-run")
    one_line(code, err, "name")
    assert "ExecStartPre" not in out


@pytest.mark.parametrize("field,value", [
    ("profile", "x\nExecStartPre=/bin/evil"),
    ("argv", ("/usr/bin/python3", "-m", "specctl", "up", "--profile",
              "a\nExecStartPost=/bin/evil", "--foreground")),
    ("env", {"A": "b\nUser=root", "B": "c\rExecStopPost=/bin/evil", "C": "d\\"}),
])
def test_1_no_value_can_add_a_directive(field: str, value: object, tmp_path: Path) -> None:
    expected = directives(units.systemd_unit(fixed_spec()).render())
    try:
        text = units.systemd_unit(fixed_spec(**{field: value})).render()
    except SpecctlError:
        return  # refused: fine
    found = directives(text)
    env_lines = len(value) if field == "env" and isinstance(value, dict) else 1
    assert [k for k in found if k != "Environment"] == \
        [k for k in expected if k != "Environment"], text
    assert found.count("Environment") == env_lines, text


def test_1_unit_and_label_names_are_escaped() -> None:
    spec = fixed_spec(profile="a/b c\nd")
    assert "\n" not in spec.unit_name and "/" not in spec.unit_name and " " not in spec.unit_name
    assert all(c.isalnum() or c in "._-\\" for c in spec.label), spec.label
    with pytest.raises(SpecctlError):  # and neither file is written for it
        units.launchd_plist(spec)
    with pytest.raises(SpecctlError):
        units.unit_path(spec, "systemd", Path("/home/x"))


# --- 2. path traversal ------------------------------------------------------------------------

def test_2_down_refuses_a_name_outside_the_runs_dir(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        tmp_path: Path) -> None:
    victim = tmp_path / "victim.json"
    victim.write_text('{"not": "a run"}')
    for name in (str(tmp_path / "victim"), "../../victim", "../victim"):
        code, _, err = run_main(monkeypatch, capsys, "down", name)
        one_line(code, err, "name")
    assert victim.read_text() == '{"not": "a run"}'
    assert not (tmp_path / "victim.json.corrupt").exists()


def test_2_logs_refuses_a_name_outside_the_logs_dir(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        isolated_dirs: Dirs) -> None:
    isolated_dirs.logs.mkdir(parents=True)
    (isolated_dirs.state / "secret.log").write_text("the secret\n")
    code, out, err = run_main(monkeypatch, capsys, "logs", "../secret")
    one_line(code, err, "name")
    assert "the secret" not in out


def test_2_service_uninstall_refuses_a_name_outside_the_unit_dir(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        tmp_path: Path) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    units_dir = tmp_path / ".config/systemd/user"
    (units_dir / "specctl-x").mkdir(parents=True)
    victim = tmp_path / "victim.service"
    victim.write_text("mine")
    code, _, err = run_main(monkeypatch, capsys, "service", "uninstall",
                            "x/../../../../victim", "--manager", "systemd")
    one_line(code, err, "name")
    assert victim.read_text() == "mine"


# --- 3. process identity before signals ---------------------------------------------------------

def _record(dirs: Dirs, name: str, proc: subprocess.Popen[bytes], **fields: object) -> None:
    dead = subprocess.Popen(["true"])
    dead.wait()
    data = {"profile": name, "supervisor_pid": dead.pid, "supervisor_started": 1.0,
            "url": "http://127.0.0.1:1/v1", "port": 1, "host": "127.0.0.1", "log": "x.log",
            "status": "running", "server_pid": proc.pid, "server_pgid": proc.pid, **fields}
    dirs.runs.mkdir(parents=True, exist_ok=True)
    (dirs.runs / f"{name}.json").write_text(json.dumps(data))


@pytest.fixture
def stranger() -> Any:
    proc = subprocess.Popen(["sleep", "60"], start_new_session=True)
    yield proc
    proc.kill()
    proc.wait()


def test_3_down_leaves_alone_a_group_started_at_another_time(
        stranger: subprocess.Popen[bytes], isolated_dirs: Dirs) -> None:
    _record(isolated_dirs, "ghost", stranger, server_started=1.0)
    runs.down(App.from_env(), "ghost")
    time.sleep(0.2)
    assert stranger.poll() is None, "an unrelated process group was signalled"


def test_3_down_leaves_alone_a_group_with_another_command_line(
        stranger: subprocess.Popen[bytes], isolated_dirs: Dirs) -> None:
    started = psutil.Process(stranger.pid).create_time()
    _record(isolated_dirs, "ghost", stranger, server_started=started,
            server_cmdline=["llama-server", "--port", "1"])
    runs.down(App.from_env(), "ghost")
    time.sleep(0.2)
    assert stranger.poll() is None


def test_3_down_stops_a_group_that_is_ours(stranger: subprocess.Popen[bytes],
                                           isolated_dirs: Dirs) -> None:
    proc = psutil.Process(stranger.pid)
    _record(isolated_dirs, "mine", stranger, server_started=proc.create_time(),
            server_cmdline=proc.cmdline())
    assert runs.down(App.from_env(), "mine")
    stranger.wait(timeout=15)


def _supervisor_like(name: str, lock: Path | None) -> subprocess.Popen[bytes]:
    """A process whose command line reads like a profile's supervisor; holding `lock` if given."""
    code = (f"fh = open({str(lock)!r}, 'a')\n" if lock else "") + "import time; time.sleep(60)"
    proc = subprocess.Popen([sys.executable, "-c", code, "specctl", "up", "--profile", name,
                             "--foreground"])
    deadline = time.monotonic() + 10
    while lock and time.monotonic() < deadline and str(lock) not in {  # the lock, not the
            f.path for f in psutil.Process(proc.pid).open_files()}:  # .pth files of start-up
        time.sleep(0.05)
    return proc


def test_3_down_without_state_stops_only_a_supervisor_holding_our_lock(
        isolated_dirs: Dirs) -> None:
    isolated_dirs.runs.mkdir(parents=True)
    other = _supervisor_like("ghost", None)  # same name, another state dir (or no specctl)
    mine = _supervisor_like("ghost", isolated_dirs.runs / "ghost.lock")
    try:
        assert runs.down(App.from_env(), "ghost")
        mine.wait(timeout=15)
        assert other.poll() is None, "a same-named run of another state dir was signalled"
    finally:
        for proc in (other, mine):
            proc.kill()
            proc.wait()


# --- 4. an open Ollama ----------------------------------------------------------------------------

def test_4_ollama_is_never_served_beyond_loopback() -> None:
    ollama = Ollama()
    plan = plans.plan(backend="ollama", host="0.0.0.0", api_key_env="MY_KEY",
                      target=plans.target(ref="ollama:qwen2.5-coder:1.5b"), draft=None,
                      method="none", k=0)
    with pytest.raises(BackendError, match="no authentication"):
        ollama.launch(plan, ollama.assumed())
    assert ollama.launch(plan.but(host="127.0.0.1"), ollama.assumed()).argv


def test_4_an_empty_key_variable_counts_as_no_key() -> None:
    launch = Launch(argv=("llama-server",), env_from={"LLAMA_API_KEY": "MY_KEY"})
    assert api_key(launch.env_from, {"MY_KEY": ""}) is None
    with pytest.raises(ServerError, match="MY_KEY"):
        server_env(launch, {"MY_KEY": ""})
    assert server_env(launch, {"MY_KEY": "s3cret"})["LLAMA_API_KEY"] == "s3cret"


# --- 5. --system units run as a named user --------------------------------------------------------

def test_5_system_units_run_as_a_named_user(monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_main(monkeypatch, capsys, "service", "install", "-p", "cpu-demo",
                              "--system", "--manager", "systemd", "--dry-run",
                              "--user-name", "daemon")
    assert code == 0, err
    assert "\nUser=daemon\n" in out
    code, out, err = run_main(monkeypatch, capsys, "service", "install", "-p", "cpu-demo",
                              "--system", "--manager", "launchd", "--dry-run",
                              "--user-name", "daemon")
    assert code == 0, err
    assert "<key>UserName</key>" in out and "<string>daemon</string>" in out


def test_5_system_units_default_to_the_sudo_user_and_refuse_root(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setenv("SUDO_USER", "daemon")
    code, out, err = run_main(monkeypatch, capsys, "service", "install", "-p", "cpu-demo",
                              "--system", "--manager", "systemd", "--dry-run")
    assert code == 0, err
    assert "\nUser=daemon\n" in out
    monkeypatch.delenv("SUDO_USER")
    monkeypatch.setattr(os, "getuid", lambda: 0)
    code, _, err = run_main(monkeypatch, capsys, "service", "install", "-p", "cpu-demo",
                            "--system", "--manager", "systemd", "--dry-run")
    one_line(code, err, "root", "--user-name")
    code, out, err = run_main(monkeypatch, capsys, "service", "install", "-p", "cpu-demo",
                              "--system", "--manager", "systemd", "--dry-run",
                              "--user-name", "no-such-user-here")
    one_line(code, err, "no-such-user-here")


# --- 6. one line, never a traceback ---------------------------------------------------------------

def test_6_a_non_utf8_profile_breaks_only_itself(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        isolated_dirs: Dirs) -> None:
    isolated_dirs.profiles.mkdir(parents=True)
    (isolated_dirs.profiles / "latin.toml").write_bytes(
        b'description = "caf\xe9"\ntarget = "hf:org/model"\n')
    code, out, err = run_main(monkeypatch, capsys, "profiles")
    assert code == 0, err
    assert "latin" in out and "cpu-demo" in out
    code, _, err = run_main(monkeypatch, capsys, "plan", "-p", "latin")
    one_line(code, err, "UTF-8")


def _plan_with_hardware(path: str) -> subprocess.CompletedProcess[str]:
    def limit() -> None:  # the old code read /dev/zero without end
        resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))

    return subprocess.run([sys.executable, "-m", "specctl", "plan", "-p", "cpu-demo",
                           "--hardware", path], cwd=ROOT, text=True, capture_output=True,
                          timeout=90, check=False, preexec_fn=limit)


@pytest.mark.parametrize("kind", ["dir", "binary", "fifo", "zero", "types", "list"])
def test_6_hardware_files_that_are_not_machines(kind: str, tmp_path: Path) -> None:
    path = tmp_path / "hw.json"
    machine = json.loads((HARDWARE / "linux_cpu_2c_24g.json").read_text())
    if kind == "dir":
        path.mkdir()
    elif kind == "binary":
        path.write_bytes(b"\x00\xff\xfe" * 100)
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "zero":
        path = Path("/dev/zero")
    elif kind == "types":
        machine["cpu"]["ram_gb"] = "lots"
        path.write_text(json.dumps(machine))
    else:
        path.write_text(json.dumps([machine]))
    done = _plan_with_hardware(str(path))
    one_line(done.returncode, done.stderr, str(path))


def test_6_a_corrupt_ollama_manifest(tmp_path: Path) -> None:
    manifests = tmp_path / "manifests/registry.ollama.ai/library"
    secret = tmp_path / "outside"
    secret.write_text("not a model")
    bad = {"list": [], "layers": {"layers": [1, "x"]},
           "digest": {"layers": [{"mediaType": MODEL_LAYER, "digest": 7}]},
           "escape": {"layers": [{"mediaType": MODEL_LAYER,
                                  "digest": "sha256:../../outside"}]}}
    for name, manifest in bad.items():
        (manifests / name).mkdir(parents=True)
        (manifests / name / "latest").write_text(json.dumps(manifest))
    (manifests / "binary").mkdir()
    (manifests / "binary" / "latest").write_bytes(b"\xff\xfe\x00")
    store = OllamaStore(tmp_path)
    for name in [*bad, "binary"]:
        with pytest.raises(ModelError, match="manifest"):
            store.locate(f"{name}:latest")
    assert list(store.models()) == []
    with pytest.raises(ModelError):
        store.locate(store.normalize("../../../outside"))


def _state(**changes: object) -> dict[str, object]:
    return {"profile": "smol", "supervisor_pid": 1, "supervisor_started": 1.0,
            "url": "http://127.0.0.1:1/v1", "port": 1, "host": "127.0.0.1", "log": "x.log",
            "status": "running", **changes}


@pytest.mark.parametrize("changes", [{"supervisor_pid": "1"}, {"plan": []},
                                     {"status": 7}, {"port": True}])
def test_6_a_run_state_with_wrong_types_is_set_aside(changes: dict[str, object],
                                                     isolated_dirs: Dirs) -> None:
    isolated_dirs.runs.mkdir(parents=True)
    path = isolated_dirs.runs / "smol.json"
    path.write_text(json.dumps(_state(**changes)))
    rows = runs.status(App.from_env())
    assert [r.status for r in rows] == ["corrupt"]
    assert (isolated_dirs.runs / "smol.json.corrupt").exists() and not path.exists()
    path.write_text(json.dumps(_state(**changes)))
    assert runs.down(App.from_env(), "smol") is False


def _tuned(**changes: object) -> dict[str, object]:
    return {"profile": "smol", "method": "draft", "k": 4, "p_min": None, "speedup": 1.4,
            "summary": "draft k=4 measured 1.40x", "alpha": 0.7, "cost": 0.1,
            "verify": {"4": 1.1}, "baseline_tps": 10.0, **changes}


@pytest.mark.parametrize("changes", [{"k": "4"}, {"verify": []}, {"measured": "abc"},
                                     {"measured": [{"label": 1}]}, {"speedup": "fast"}])
def test_6_tuned_results_with_wrong_types_are_set_aside(changes: dict[str, object],
                                                        tmp_path: Path) -> None:
    (tmp_path / "key.json").write_text(json.dumps(_tuned(**changes)))
    with pytest.raises(StateError, match=r"key\.json"):
        tuned.load(tmp_path, "key")
    assert (tmp_path / "key.json.corrupt").exists()
    assert tuned.load(tmp_path, "key") is None


@pytest.mark.parametrize("var,value", [("SPECCTL_MAX_RESTARTS", "abc"),
                                       ("SPECCTL_HEALTH_TIMEOUT", "-5"),
                                       ("SPECCTL_STOP_GRACE", "nan"),
                                       ("SPECCTL_VLLM_PYTHON", "")])
def test_6_bad_settings_variables_are_one_line(
        var: str, value: str, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv(var, value)
    code, _, err = run_main(monkeypatch, capsys, "status")
    if value == "":
        assert code == 0, err  # empty: the default
        return
    one_line(code, err, var)


def test_6_alpha_nan_is_a_usage_error(monkeypatch: pytest.MonkeyPatch,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_main(monkeypatch, capsys, "tune", "--what-if", "--alpha", "nan",
                            "--cost", "0.1")
    assert code == 2 and "Traceback" not in err and "alpha" in err


# --- 7. trusted caches ----------------------------------------------------------------------------

@pytest.mark.parametrize("changes", [{"k": 10**9}, {"p_min": -7.5}, {"k": 0},
                                     {"method": "warp"}, {"speedup": float("nan")},
                                     {"method": "none", "k": 3}])
def test_7_tuned_results_beyond_the_profile_limits_are_set_aside(
        changes: dict[str, object], tmp_path: Path) -> None:
    (tmp_path / "key.json").write_text(json.dumps(_tuned(**changes)))
    with pytest.raises(StateError, match=r"moved it to key\.json\.corrupt"):
        tuned.load(tmp_path, "key")


def test_7_plan_reports_a_set_aside_tuned_result(tmp_path: Path) -> None:
    broken = StateError("tuning result x.json was unreadable; moved it to x.json.corrupt")
    plan, _ = plan_for(mac_profile(), MAC, tmp_path, broken)  # what the lookup found
    assert plan.k_source == "cost model"
    assert any("x.json.corrupt" in r for r in plan.reasons)


def test_7_a_valid_tuned_result_round_trips(tmp_path: Path) -> None:
    result = tuned.Result.from_json(_tuned(key="key"))
    tuned.save(tmp_path, result)
    again = tuned.load(tmp_path, "key")
    assert again is not None and again.k == 4 and again.to_json() == result.to_json()


# --- 8. silent nonsense ---------------------------------------------------------------------------

@pytest.mark.parametrize("cost", ["inf", "nan", "-inf"])
def test_8_what_if_refuses_a_cost_that_is_not_finite(
        cost: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_main(monkeypatch, capsys, "tune", "--what-if", "--alpha", "0.5",
                              "--cost", cost, "--json")
    assert code == 2 and out == "" and "cost" in err


def test_8_a_predicted_slowdown_is_not_called_best(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_main(monkeypatch, capsys, "tune", "--what-if", "--alpha", "0.1",
                              "--cost", "0.9", "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["best_k"] is None and "off" in data["verdict"]
    code, out, err = run_main(monkeypatch, capsys, "tune", "--what-if", "--alpha", "0.1",
                              "--cost", "0.9")
    assert code == 0, err
    assert "best" not in out and "off" in out
    code, out, _ = run_main(monkeypatch, capsys, "tune", "--what-if", "--alpha", "0.8",
                            "--cost", "0.05")
    assert "best" in out


def test_8_a_draft_equal_to_the_target_is_called_a_slowdown(tmp_path: Path) -> None:
    one = mac_profile()["draft"]
    plan, _ = plan_for(mac_profile(target=one, draft=one), MAC, tmp_path)
    said = " ".join(plan.reasons)
    assert "is the target itself" in said and "slower than without a draft" in said
    assert plan.draft is not None
    slower = drafts.predict(plan.target, plan.draft).speedup  # the one estimate (drafts too)
    assert slower < 1 and "by these assumptions slower than without a draft" in \
        plan.reasons[-1] and f"{slower:.2f}x" not in plan.reasons[-1]


@pytest.mark.parametrize("snippet,where", [
    ("k = true\n", "'k'"),
    ("[server]\nport = true\n", "server.port"),
    ("[server]\ncontext = 8192.5\n", "server.context"),
    ("[speculative]\nngram_min = 5\nngram_max = 2\n", "speculative"),
    ("[llamacpp]\nworker_memory_gb = [-4.0]\n", "llamacpp.worker_memory_gb"),
    ("[llamacpp]\nrpc_workers = [\"10.0.0.2:99999\"]\n", "llamacpp.rpc_workers"),
    ("[[cluster.nodes]]\ngpus = 100000\n", "cluster.nodes"),
    ("[[cluster.nodes]]\ncount = 100000\n", "cluster.nodes"),
    ("[[cluster.nodes]]\ngpus = 1\ngpu_memory_gb = -80\n", "cluster.nodes"),
    ("[memory]\nbudget_gb = -1\n", "memory.budget_gb"),
])
def test_8_out_of_range_profile_values_are_refused(snippet: str, where: str, tmp_path: Path,
                                                   isolated_dirs: Dirs) -> None:
    path = tmp_path / "odd.toml"
    path.write_text(MINIMAL + snippet)
    with pytest.raises(ProfileError, match=where.replace(".", r"\.")):
        profiles.load(str(path), isolated_dirs)


@pytest.mark.parametrize("change", [
    {"gpus": [{"name": "g", "memory_gb": 80.0, "index": i} for i in range(100000)]},
    {"gpus": [{"name": "g", "memory_gb": -80.0, "index": 0}]},
    {"cpu": {"model": "m", "cores": 2, "ram_gb": -24.0}},
    {"cpu": {"model": "m", "cores": True, "ram_gb": 24.0}},
])
def test_8_out_of_range_hardware_is_refused(change: dict[str, object], tmp_path: Path) -> None:
    from specctl.orchestrator.errors import HardwareError
    from specctl.orchestrator.machine import hardware

    machine = {**json.loads((HARDWARE / "linux_cpu_2c_24g.json").read_text()), **change}
    path = tmp_path / "hw.json"
    path.write_text(json.dumps(machine))
    with pytest.raises(HardwareError, match=r"hw\.json"):
        hardware.load(path)


def test_8_overrides_name_the_variable_and_unknown_ones_are_errors(
        monkeypatch: pytest.MonkeyPatch, isolated_dirs: Dirs) -> None:
    monkeypatch.setenv("SPECCTL_SERVER__PROT", "9000")
    with pytest.raises(ProfileError, match="SPECCTL_SERVER__PROT") as info:
        profiles.load("cpu-demo", isolated_dirs)
    assert "cpu-demo.toml" not in str(info.value)
    monkeypatch.delenv("SPECCTL_SERVER__PROT")
    monkeypatch.setenv("SPECCTL_SERVER__PORT", "abc")
    with pytest.raises(ProfileError, match="SPECCTL_SERVER__PORT") as info:
        profiles.load("cpu-demo", isolated_dirs)
    assert "cpu-demo.toml" not in str(info.value)
    monkeypatch.delenv("SPECCTL_SERVER__PORT")
    monkeypatch.setenv("SPECCTL_LLAMACPP__N_MIN", "2")
    profile = profiles.load("cpu-demo", isolated_dirs)
    assert profile.section("llamacpp").model_dump()["n_min"] == 2


def test_8_a_state_dir_with_a_space_stays_one_path(tmp_path: Path) -> None:
    state = tmp_path / "my state"
    dirs = Dirs(config=tmp_path / "my config", state=state, cache=tmp_path / "cache")
    spec = manage.spec_for("cpu-demo", "cpu-demo", dirs, False, {})
    text = units.systemd_unit(spec).render()
    assert verify(text, tmp_path) == ""
    # a state dir under /tmp (tmp_path, usually) is bound in from the host: PrivateTmp=yes
    key = "BindPaths" if units.private_tmp(state) else "ReadWritePaths"
    line = next(ln for ln in text.splitlines() if ln.startswith(f"{key}="))
    assert line == f'{key}="-{state}"'
