"""Issue 26: the second hardening round. A hostile profile, state file, model header, Hub answer
or terminal gets one line and nothing else. One test (or a few) per numbered problem and class of
the issue; each failed before its fix. tests/test_properties.py generates more of each class."""

from __future__ import annotations

import http.server
import itertools
import json
import os
import subprocess
import threading
import time
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import psutil
import pytest
from pydantic import ValidationError

from specctl.adapters import registry
from specctl.adapters.tgi import IMAGE, Tgi, TgiOptions
from specctl.orchestrator import runs
from specctl.orchestrator.app import App
from specctl.orchestrator.config import profiles
from specctl.orchestrator.config.paths import Dirs
from specctl.orchestrator.errors import ProfileError, SettingsError, StateError
from specctl.orchestrator.runtime import state
from specctl.orchestrator.runtime.servers import free_port
from tests.cli import run_main
from tests.conftest import HARDWARE
from tests.test_hardening import one_line

H100 = str(HARDWARE / "linux_1x_h100_80g.json")
QWEN = 'target = "hf:Qwen/Qwen2.5-Coder-7B-Instruct"\ndraft = "ngram"\nbackend = ["tgi"]\n'


def profile_file(tmp: Path, body: str, name: str = "hostile") -> Path:
    path = tmp / f"{name}.toml"
    path.write_text(body)
    return path


# --- 1. a profile chooses no program, image, mount or code execution -------------------------

@pytest.mark.parametrize(("section", "line", "needle"), [
    ("tgi", 'image = "evil.example/pwn:latest"', "SPECCTL_TGI_IMAGE"),
    ("tgi", 'hf_cache = "/"', "HF_HOME"),
    ("tgi", 'hf_hub_cache = "/etc"', "HF_HUB_CACHE"),
    ("tgi", 'extra_args = ["--trust-remote-code"]', "trust_remote_code"),
    ("tgi", 'extra_args = ["--weights-cache-override", "/"]', "--weights-cache-override"),
    ("tgi", 'extra_args = ["--huggingface-hub-cache=/"]', "--huggingface-hub-cache"),
    ("tgi", 'extra_args = ["--otlp-endpoint", "http://evil.example"]', "--otlp-endpoint"),
    ("tgi", 'extra_args = ["-e"]', "-e"),
    ("tgi", 'trust_remote_code = "yes"', "trust_remote_code"),
    ("mlx", 'trust_remote_code = "yes"', "trust_remote_code"),
    ("mlx", "trust_remote_code = 1", "trust_remote_code"),
    ("llamacpp", 'draft_local = "no"', "draft_local"),
    ("vllm", 'heterogeneous_vocab = "true"', "heterogeneous_vocab"),
])
def test_1_a_profile_cannot_choose_the_program_mounts_or_code(
        section: str, line: str, needle: str, tmp_path: Path, isolated_dirs: Dirs) -> None:
    path = profile_file(tmp_path, f"{QWEN}[{section}]\n{line}\n")
    with pytest.raises(ProfileError) as caught:
        profiles.load(str(path), isolated_dirs)
    assert needle in str(caught.value) and f"'{section}" in str(caught.value)


def test_1_plan_of_a_hostile_tgi_profile_is_one_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    path = profile_file(tmp_path, f'{QWEN}[tgi]\nimage = "evil.example/pwn:latest"\n'
                                  'hf_cache = "/"\nextra_args = ["--trust-remote-code"]\n')
    code, out, err = run_main(monkeypatch, capsys, "plan", "-p", str(path), "--hardware", H100)
    one_line(code, err)
    assert "evil.example" not in out


def test_1_no_options_field_takes_a_loose_boolean() -> None:
    """Every true/false option of every backend takes true or false only."""
    checked = 0
    for cls in registry.adapter_classes().values():
        for name, field in cls.options.model_fields.items():
            if bool in (field.annotation, *typing.get_args(field.annotation)):
                for loose in ("yes", "true", 1, 0, "1", "on"):
                    with pytest.raises(ValidationError):
                        cls.options.model_validate({name: loose})
                checked += 1
    assert checked >= 4


def test_1_remote_code_only_through_the_typed_option(monkeypatch: pytest.MonkeyPatch,
                                                     tmp_path: Path, isolated_dirs: Dirs) -> None:
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    from specctl.orchestrator.app import App

    path = profile_file(tmp_path, f"{QWEN}[tgi]\ntrust_remote_code = true\n")
    argv = App.from_env().resolve(str(path), Path(H100)).launch().argv
    assert argv.count("--trust-remote-code") == 1
    assert ("-v", f"{tmp_path / 'hf'}:/data") in set(itertools.pairwise(argv))
    assert IMAGE in argv  # the recorded image
    plain = profile_file(tmp_path, QWEN, "plain")
    assert "--trust-remote-code" not in App.from_env().resolve(
        str(plain), Path(H100)).launch().argv


def test_1_the_image_comes_from_the_users_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPECCTL_TGI_IMAGE", "registry.local/tgi:3.3.7-patched")
    assert Tgi.create(Dirs.from_env()).image == "registry.local/tgi:3.3.7-patched"
    for bad in ("--privileged", "a b", "x\n-v /:/data"):
        monkeypatch.setenv("SPECCTL_TGI_IMAGE", bad)
        with pytest.raises(SettingsError, match="SPECCTL_TGI_IMAGE"):
            Tgi.create(Dirs.from_env())


def test_1_tgi_options_hold_no_image_or_mount() -> None:
    assert not {"image", "hf_cache", "hf_hub_cache"} & set(TgiOptions.model_fields)


# --- 2. `up --handoff PATH` removes only a handoff it read and validated ----------------------

@pytest.mark.parametrize("kind", ["outside", "invalid", "dir", "symlink", "fifo"])
def test_2_a_handoff_that_is_not_ours_is_never_removed(
        kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str], isolated_dirs: Dirs) -> None:
    runs_dir = isolated_dirs.runs
    runs_dir.mkdir(parents=True, mode=0o700)
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    path = {"outside": victim, "invalid": runs_dir / "p.handoff-1.json",
            "dir": runs_dir / "d.handoff-1.json", "symlink": runs_dir / "s.handoff-1.json",
            "fifo": runs_dir / "f.handoff-1.json"}[kind]
    if kind == "invalid":
        path.write_text('{"name": 3}')
    elif kind == "dir":
        path.mkdir()
    elif kind == "symlink":
        path.symlink_to(victim)
    elif kind == "fifo":
        os.mkfifo(path)
    code, _out, err = run_main(monkeypatch, capsys, "up", "-p", "cpu-demo", "--foreground",
                              "--handoff", str(path))
    one_line(code, err, "handoff")
    assert victim.read_text() == "precious"
    assert os.path.lexists(path)  # only a handoff of ours, read and validated, is removed


def test_2_a_valid_handoff_is_read_and_removed(isolated_dirs: Dirs) -> None:
    from specctl.adapters.base import Launch
    from specctl.orchestrator.runtime import handoff

    ready = handoff.Ready.of("demo", "127.0.0.1", 8080, "none", Launch(
        argv=("true",), health_url="http://127.0.0.1:8080/health",
        base_url="http://127.0.0.1:8080/v1"), [], {})
    path = handoff.write(isolated_dirs.runs, ready)
    assert handoff.take(path, isolated_dirs.runs) == ready
    assert not path.exists()


# --- 3. state directs no signal and no key unless it is ours --------------------------------

@pytest.fixture
def stranger() -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen(["sleep", "60"], start_new_session=True)
    yield proc
    proc.kill()
    proc.wait()


def _record(runs_dir: Path, name: str, **fields: object) -> Path:
    data = {"profile": name, "supervisor_pid": 1, "supervisor_started": 1.0,
            "url": "http://127.0.0.1:1/v1", "port": 1, "host": "127.0.0.1", "log": "x.log",
            "status": "running", **fields}
    runs_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    path = runs_dir / f"{name}.json"
    path.write_text(json.dumps(data))
    path.chmod(0o600)
    return path


def test_3_an_empty_command_line_is_no_identity(stranger: subprocess.Popen[bytes],
                                                isolated_dirs: Dirs) -> None:
    started = psutil.Process(stranger.pid).create_time()
    _record(isolated_dirs.runs, "ghost", server_pid=stranger.pid, server_pgid=stranger.pid,
            server_started=started, server_cmdline=[], supervisor_pid=stranger.pid,
            supervisor_started=started, supervisor_cmdline=[])
    runs.down(App.from_env(), "ghost")
    time.sleep(0.2)
    assert stranger.poll() is None, "a process with an empty recorded command line was signalled"


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")
@pytest.mark.parametrize("whose", ["file", "dir"])
def test_3_state_of_another_user_is_not_trusted(
        whose: str, stranger: subprocess.Popen[bytes], isolated_dirs: Dirs,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    proc = psutil.Process(stranger.pid)
    path = _record(isolated_dirs.runs, "ghost", server_pid=stranger.pid,
                   server_pgid=stranger.pid, server_started=proc.create_time(),
                   server_cmdline=proc.cmdline())
    os.chown(path if whose == "file" else isolated_dirs.runs, 65534, 65534)
    _code, _out, err = run_main(monkeypatch, capsys, "down", "ghost")
    time.sleep(0.2)
    assert stranger.poll() is None, "down signalled a process named by another user's state"
    assert "Traceback" not in err
    assert path.exists()  # not ours to move aside either
    with pytest.raises(StateError, match="not to you"):
        state.load(isolated_dirs.runs, "ghost")


class _Capture(http.server.BaseHTTPRequestHandler):
    seen: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        self.seen.append(self.headers.get("Authorization") or "")
        body = b"# nothing\n"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.mark.parametrize("where", ["http://{evil}/metrics", "http://localhost:{port}/metrics"])
def test_3_status_sends_the_key_only_to_the_servers_own_endpoint(
        where: str, stranger: subprocess.Popen[bytes], isolated_dirs: Dirs,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The state names a metrics URL; the key goes only to the recorded server's loopback
    address and port, never to another host or port a state file names."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Capture)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    evil = f"127.0.0.1:{server.server_address[1]}"
    _Capture.seen.clear()
    monkeypatch.setenv("MY_KEY", "s3cret")
    proc = psutil.Process(stranger.pid)
    port = free_port()
    _record(isolated_dirs.runs, "keyed", supervisor_pid=stranger.pid,
            supervisor_started=proc.create_time(), supervisor_cmdline=proc.cmdline(),
            url=f"http://127.0.0.1:{port}/v1", port=port,
            metrics_url=where.format(evil=evil, port=server.server_address[1]),
            plan={"backend": "llamacpp", "env_from": {"API_KEY": "MY_KEY"}})
    try:
        runs.status(App.from_env())
    finally:
        server.shutdown()
    assert all("s3cret" not in h for h in _Capture.seen), _Capture.seen
