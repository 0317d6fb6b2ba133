"""The fault suite: real processes, real failures. Each case checks the message the user gets, the
exit code, that no process is left behind, and that no state or tuning file is corrupted.

The server cases use SmolLM2-135M drafting for itself (a real GGUF pair that starts in about a
second), with a short restart policy set through SPECCTL_* variables.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest

from specctl.orchestrator.app import App
from specctl.orchestrator.runtime import procs
from specctl.orchestrator.runtime.servers import free_port
from tests.cli import ROOT, specctl

pytestmark = pytest.mark.server
SMOL = 'target = "testbed:smollm2-135m"\ndraft = "testbed:smollm2-135m"\nk = 3\n'


def ours(state_dir: str) -> set[int]:
    """Processes started for this test: they inherit its SPECCTL_STATE_DIR."""
    found = set()
    for proc in psutil.process_iter(["name"]):
        if proc.info["name"] not in ("llama-server", "python", "python3"):
            continue
        try:
            if proc.environ().get("SPECCTL_STATE_DIR") == state_dir and proc.pid != os.getpid():
                found.add(proc.pid)
        except psutil.Error:
            continue
    return found


@pytest.fixture
def env(tmp_path: Path) -> Iterator[dict[str, str]]:
    e = {**os.environ, "SPECCTL_STATE_DIR": str(tmp_path / "state"),
         "SPECCTL_CONFIG_DIR": str(tmp_path / "config"), "SPECCTL_MAX_RESTARTS": "2",
         "SPECCTL_RESTART_BACKOFF": "0.2", "SPECCTL_STOP_GRACE": "3",
         "SPECCTL_HEALTH_TIMEOUT": "60"}
    yield e
    specctl("down", "--all", env=e)
    time.sleep(0.2)
    leftover = ours(e["SPECCTL_STATE_DIR"])
    assert not leftover, f"processes left behind: {leftover}"


@pytest.fixture
def smol(tmp_path: Path) -> Path:
    path = tmp_path / "smol.toml"
    path.write_text(SMOL + f"[server]\nport = {free_port()}\ncontext = 1024\n")
    return path


def runs(env: dict[str, str]) -> Path:
    return Path(env["SPECCTL_STATE_DIR"]) / "runs"


def read_state(env: dict[str, str]) -> dict[str, object]:
    data: dict[str, object] = json.loads((runs(env) / "smol.json").read_text())
    return data


def one_line_error(done: subprocess.CompletedProcess[str], *needles: str) -> str:
    assert done.returncode != 0, done.stdout
    lines = [ln for ln in done.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, done.stderr
    assert "Traceback" not in done.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def up(env: dict[str, str], profile: Path) -> subprocess.CompletedProcess[str]:
    return specctl("up", "--profile", str(profile), "--no-provision", env=env)


def url_of(profile: Path) -> str:
    port = next(ln.split("=")[1].strip() for ln in profile.read_text().splitlines()
                if ln.startswith("port"))
    return f"http://127.0.0.1:{port}"


def wait_for(check: object, timeout: float = 60) -> None:
    assert callable(check)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.2)
    pytest.fail("condition not reached in time")


def test_server_killed_while_serving_is_restarted(env: dict[str, str], smol: Path) -> None:
    assert up(env, smol).returncode == 0
    pid = read_state(env)["server_pid"]
    assert isinstance(pid, int)
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: read_state(env)["server_pid"] != pid and
             read_state(env)["status"] == "running")
    reply = httpx.post(url_of(smol) + "/v1/chat/completions", timeout=60, json={
        "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4})
    assert reply.status_code == 200
    assert read_state(env)["restarts"] == 1


def test_crash_loop_gives_up_with_the_last_log_lines(env: dict[str, str], smol: Path) -> None:
    assert up(env, smol).returncode == 0
    sup = read_state(env)["supervisor_pid"]
    assert isinstance(sup, int)
    killed: set[int] = set()
    deadline = time.monotonic() + 90
    while psutil.pid_exists(sup) and time.monotonic() < deadline:
        st = read_state(env)
        pid = st["server_pid"]
        if st["status"] == "running" and isinstance(pid, int) and pid not in killed:
            killed.add(pid)
            os.kill(pid, signal.SIGKILL)
        time.sleep(0.1)
    assert len(killed) == 3  # the first start, then max_restarts = 2 restarts
    st = read_state(env)
    assert st["status"] == "failed"
    assert isinstance(st["error"], str) and "giving up" in st["error"]
    assert "=== specctl: starting smol" in st["error"]  # the log's last lines
    rows = json.loads(specctl("status", "--json", env=env).stdout)
    assert rows[0]["status"] == "failed"
    assert procs.group_members(int(str(st["server_pgid"]))) == []


def test_specctl_sigterm_stops_the_whole_group(env: dict[str, str], smol: Path) -> None:
    assert up(env, smol).returncode == 0
    st = read_state(env)
    sup, pgid = int(str(st["supervisor_pid"])), int(str(st["server_pgid"]))
    os.kill(sup, signal.SIGTERM)
    wait_for(lambda: not psutil.pid_exists(sup) or
             psutil.Process(sup).status() == psutil.STATUS_ZOMBIE)
    assert procs.group_members(pgid) == []
    assert not (runs(env) / "smol.json").exists()


def test_specctl_sigkill_takes_its_server_group_with_it(env: dict[str, str],
                                                        smol: Path) -> None:
    """The server is leashed to its supervisor (runtime/leash.py): a supervisor killed with
    SIGKILL leaves no server; the next command clears the stale state."""
    assert up(env, smol).returncode == 0
    st = read_state(env)
    sup, pgid = int(str(st["supervisor_pid"])), int(str(st["server_pgid"]))
    assert procs.group_members(pgid)
    os.kill(sup, signal.SIGKILL)
    wait_for(lambda: procs.group_members(pgid) == [], 5)
    assert up(env, smol).returncode == 0
    assert read_state(env)["status"] == "running"


@pytest.mark.parametrize("then", ["down", "up"])
def test_a_group_left_behind_is_cleaned_by_the_next_command(
        env: dict[str, str], smol: Path, then: str) -> None:
    """A server group that outlived its supervisor (its leash stopped, so it could not act):
    `down` or the next `up` stops it, checked against the recorded identity."""
    assert up(env, smol).returncode == 0
    st = read_state(env)
    sup, pgid = int(str(st["supervisor_pid"])), int(str(st["server_pgid"]))
    os.kill(pgid, signal.SIGSTOP)  # the leash (the group's leader) cannot react
    os.kill(sup, signal.SIGKILL)
    time.sleep(0.5)
    assert procs.group_members(pgid), "the orphaned server is still there"
    done = specctl("down", "smol", env=env) if then == "down" else up(env, smol)
    assert done.returncode == 0, done.stderr
    assert procs.group_members(pgid) == []
    if then == "up":
        assert "leftover" in done.stderr  # a note: stderr (the URL alone is stdout)
        assert read_state(env)["status"] == "running"


def test_two_ups_of_one_profile_at_once(env: dict[str, str], smol: Path) -> None:
    cmd = [sys.executable, "-m", "specctl", "up", "--profile", str(smol), "--no-provision"]
    both = [subprocess.Popen(cmd, cwd=ROOT, env=env, text=True, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE) for _ in range(2)]
    results = [(p.wait(timeout=120), *p.communicate()) for p in both]
    codes = sorted(r[0] for r in results)
    assert codes[0] == 0 and codes[1] != 0, results
    loser = next(r for r in results if r[0] != 0)
    assert "already up" in loser[2] or "in use" in loser[2], loser[2]
    assert read_state(env)["status"] == "running"


def test_two_ups_of_two_profiles_on_one_port_at_once(env: dict[str, str],
                                                     tmp_path: Path) -> None:
    """Both find the port free; their supervisors race for it. The loser fails in one line
    (the port is in use, exit 1) and leaves nothing behind, round after round."""
    for round_ in range(3):
        port = free_port()
        paths = []
        for name, k in (("one", 3), ("two", 2)):
            path = tmp_path / f"{name}.toml"
            path.write_text(SMOL.replace("k = 3", f"k = {k}") +
                            f"[server]\nport = {port}\ncontext = 1024\n")
            paths.append(path)
        both = [subprocess.Popen([sys.executable, "-m", "specctl", "up", "--profile", str(p),
                                  "--no-provision"], cwd=ROOT, env=env, text=True,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE) for p in paths]
        results = [subprocess.CompletedProcess(p.args, p.wait(timeout=120), *p.communicate())
                   for p in both]
        assert sorted(r.returncode for r in results) == [0, 1], (round_, results)
        loser = next(r for r in results if r.returncode != 0)
        one_line_error(loser, f"port {port}", "in use")
        assert specctl("down", "--all", env=env).returncode == 0
        time.sleep(0.5)
        assert not ours(env["SPECCTL_STATE_DIR"]), f"round {round_}: left running"


def test_port_already_in_use(env: dict[str, str], tmp_path: Path) -> None:
    port = free_port()
    profile = tmp_path / "smol.toml"
    profile.write_text(SMOL + f"[server]\nport = {port}\n")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))
        sock.listen()
        one_line_error(up(env, profile), f"port {port}", "in use")


def test_state_file_garbage_is_set_aside(env: dict[str, str], smol: Path) -> None:
    runs(env).mkdir(parents=True)
    (runs(env) / "smol.json").write_text("{ this is not json")
    status = json.loads(specctl("status", "--json", env=env).stdout)
    assert status[0]["status"] == "corrupt" and "unreadable" in status[0]["note"]
    assert (runs(env) / "smol.json.corrupt").exists()
    (runs(env) / "smol.json").write_bytes(b"\x00\x01garbage")
    done = up(env, smol)
    assert done.returncode == 0, done.stderr
    assert "unreadable" in done.stderr
    assert read_state(env)["status"] == "running"


def test_state_file_truncated_then_down(env: dict[str, str], smol: Path) -> None:
    assert up(env, smol).returncode == 0
    text = (runs(env) / "smol.json").read_text()
    (runs(env) / "smol.json").write_text(text[: len(text) // 2])
    done = specctl("down", "smol", env=env)
    assert done.returncode == 0 and "stopped" in done.stdout, done.stderr


def _auto_k_app(env: dict[str, str], tmp_path: Path,
                monkeypatch: pytest.MonkeyPatch) -> tuple[Path, App]:
    """The smol profile with k = "auto" (so a tuned result is looked up), and the App of env."""
    profile = tmp_path / "smol.toml"
    profile.write_text(SMOL.replace("k = 3", 'k = "auto"'))
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    return profile, App.from_env()


def test_tuning_file_garbage_is_set_aside_and_reported_by_plan(
        env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    profile, app = _auto_k_app(env, tmp_path, monkeypatch)
    resolved = app.resolve(str(profile))
    app.dirs.tuned.mkdir(parents=True)
    bad = app.dirs.tuned / f"{app.tuned_key(resolved.plan, resolved.installed)}.json"
    bad.write_text('{"profile": "smol", "method": ')
    plan = specctl("plan", "--profile", str(profile), "--json", env=env)
    assert plan.returncode == 0 and json.loads(plan.stdout)["k_source"] == "cost model"
    assert any("unreadable" in r and f"{bad.name}.corrupt" in r
               for r in json.loads(plan.stdout)["reasons"])
    aside = bad.with_name(f"{bad.name}.corrupt")  # set aside for the user to see, never trusted
    assert not bad.exists() and aside.read_text() == '{"profile": "smol", "method": '
    one_line_error(specctl("tune", "--profile", str(profile), "--show", env=env),
                   "no tuning result")


def test_profile_toml_malformed(env: dict[str, str], tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('target = "testbed:smollm2-135m"\n[server\nport = 1\n')
    one_line_error(up(env, bad), str(bad), "not valid TOML")


def test_model_file_missing(env: dict[str, str], tmp_path: Path) -> None:
    profile = tmp_path / "missing.toml"
    profile.write_text('target = "/nonexistent/model.gguf"\ndraft = "none"\n')
    one_line_error(up(env, profile), "/nonexistent/model.gguf", "not found")


def test_model_file_truncated_or_not_gguf(env: dict[str, str], tmp_path: Path) -> None:
    from specctl.orchestrator.contract.dirs import Dirs
    from specctl.orchestrator.models import testbed

    real = testbed.path_of("smollm2-135m", Dirs.from_env().models)
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(real.read_bytes()[:4096])
    text = tmp_path / "text.gguf"
    text.write_text("not a model\n" * 10)
    for model, needle in ((cut, "truncated"), (text, "not a GGUF")):
        profile = tmp_path / f"{model.stem}.toml"
        profile.write_text(f'target = "{model}"\ndraft = "none"\n')
        one_line_error(up(env, profile), str(model), needle)


def test_draft_incompatible(env: dict[str, str], tmp_path: Path) -> None:
    profile = tmp_path / "smol-draft.toml"
    profile.write_text('target = "testbed:qwen-1.5b-q4"\ndraft = "testbed:smollm2-135m"\n')
    one_line_error(up(env, profile), "cannot speculate", "vocab sizes differ by 102784")


def test_plan_too_big_for_memory(env: dict[str, str]) -> None:
    one_line_error(up(env, ROOT / "profiles" / "m3-ultra-70b.toml"), "needs", "budget")


def test_disk_full_when_writing_state(env: dict[str, str], smol: Path, tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("mounting a tiny tmpfs needs root (CI runs as root)")
    full = tmp_path / "full"
    full.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(full)], check=True)
    try:
        (full / "runs").mkdir()
        (full / "logs").mkdir()
        with open(full / "filler", "wb") as fh, contextlib.suppress(OSError):
            fh.write(b"\0" * 1024 * 1024)
        done = up({**env, "SPECCTL_STATE_DIR": str(full)}, smol)
        line = one_line_error(done)
        assert "space" in line.lower() or "cannot write" in line, line
        assert not list((full / "runs").glob("*.json"))
        assert not [p for p in (full / "runs").iterdir() if p.name.startswith(".smol")]
    finally:
        subprocess.run(["umount", str(full)], check=False)


def test_non_loopback_bind_without_api_key_is_refused(env: dict[str, str],
                                                       tmp_path: Path) -> None:
    profile = tmp_path / "open.toml"
    profile.write_text(SMOL + '[server]\nhost = "0.0.0.0"\n')
    one_line_error(up(env, profile), "0.0.0.0", "api_key_env")


def test_api_key_reaches_the_server_by_environment_never_argv(env: dict[str, str],
                                                              tmp_path: Path) -> None:
    profile = tmp_path / "smol.toml"
    profile.write_text(SMOL + f'[server]\nport = {free_port()}\napi_key_env = "SMOL_KEY"\n')
    secret = "s3cret-key-for-test"
    one_line_error(up(env, profile), "SMOL_KEY")  # not exported: refused, says which variable
    env = {**env, "SMOL_KEY": secret}
    assert up(env, profile).returncode == 0
    st = json.loads((runs(env) / "smol.json").read_text())
    server = psutil.Process(st["server_pid"])
    assert secret not in " ".join(server.cmdline())
    assert server.environ().get("LLAMA_API_KEY") == secret
    assert secret not in (runs(env) / "smol.json").read_text()
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    url = url_of(profile) + "/v1/chat/completions"
    assert httpx.post(url, json=body, timeout=60).status_code == 401
    ok = httpx.post(url, json=body, timeout=60, headers={"Authorization": f"Bearer {secret}"})
    assert ok.status_code == 200
    rows = json.loads(specctl("status", "--json", env=env).stdout)
    assert rows[0]["drafted"] is not None  # status reads /metrics with the key


def test_state_files_are_user_only(env: dict[str, str], smol: Path) -> None:
    assert up(env, smol).returncode == 0
    for path in (runs(env) / "smol.json", runs(env)):
        mode = stat.S_IMODE(path.stat().st_mode)
        assert mode & 0o077 == 0, oct(mode)


def test_profile_values_never_reach_a_shell(env: dict[str, str], tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    profile = tmp_path / "evil.toml"
    profile.write_text(f'target = "/tmp/x.gguf; touch {marker}"\ndraft = "none"\n'
                       f'description = "$(touch {marker})"\n')
    one_line_error(up(env, profile), "not found")
    specctl("service", "install", "--profile", str(profile), "--dry-run", env=env)
    assert not marker.exists()


@pytest.mark.parametrize("signals", [1, 30])
def test_bench_killed_with_sigterm_stops_its_servers(env: dict[str, str], smol: Path,
                                                     signals: int) -> None:
    """Twice: a second SIGTERM (from `timeout`, a process manager, an impatient user) while the
    first one's cleanup runs must not cut it short and leave servers behind."""
    bench = subprocess.Popen([sys.executable, "-m", "specctl", "bench", "--profile", str(smol),
                              "--prompts", "4", "--repeats", "3", "--max-tokens", "64"],
                             cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    def servers() -> set[int]:
        found = set()
        for pid in ours(env["SPECCTL_STATE_DIR"]):
            with contextlib.suppress(psutil.Error):
                if psutil.Process(pid).name() == "llama-server":
                    found.add(pid)
        return found

    wait_for(lambda: len(servers()) == 2)  # baseline and speculative, side by side
    for _ in range(signals):
        with contextlib.suppress(ProcessLookupError):
            bench.send_signal(signal.SIGTERM)
        time.sleep(0.02)
    assert bench.wait(timeout=30) == 128 + signal.SIGTERM
    wait_for(lambda: not servers(), timeout=20)


def test_bench_k_after_tune_turned_speculation_off_measures_the_profiles_draft(
        env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """After a tune saved "off" the plan has no draft model: `bench --k 2` failed in 4 s with
    "'draft' speculation needs a draft file (-md)" instead of measuring the draft it asked for."""
    from specctl.orchestrator.commands import bench
    from specctl.orchestrator.measure.bench import flow as bench_mod
    from specctl.orchestrator.measure.prompts.workload import from_suites
    from specctl.orchestrator.measure.results import tuned

    profile, app = _auto_k_app(env, tmp_path, monkeypatch)
    written = app.resolve(str(profile))
    off = tuned.Result(profile="smol", method="none", k=0, p_min=None, speedup=1.0,
                       summary="nothing beats the baseline by 5%: speculation off", alpha=0.5,
                       cost=1.0, verify={}, baseline_tps=10.0,
                       key=app.tuned_key(written.plan, written.installed))
    tuned.save(app.dirs.tuned, off)
    assert app.resolve(str(profile)).plan.draft is None  # what tune saved
    said: list[str] = []
    work = from_suites({"chat": ["Say hello."]}, {})
    ask = bench.Ask(str(profile), work, ks=(2,))
    asked = bench.resolve(app, ask)
    assert asked.plan.draft is None  # tune's pick is still what is measured as it
    got = bench.drafts_of(app, ask, asked, said.append)
    assert got is not None
    drafts = got.plan
    assert drafts.draft is not None and written.plan.draft is not None
    assert drafts.draft.ref == written.plan.draft.ref
    assert any("has no draft model (speculation off)" in line for line in said), said
    labels = {c.label: c.plan for c in bench_mod.configs_for(asked.plan, (2,), None, (), drafts)}
    assert list(labels) == ["baseline", "draft k=2"] and labels["draft k=2"].draft is not None
    plain = bench.Ask(str(profile), work)
    assert bench.drafts_of(app, plain, bench.resolve(app, plain), said.append) is None  # no --k
