"""Issue 26: the second hardening round. A hostile profile, state file, model header, Hub answer
or terminal gets one line and nothing else. One test (or a few) per numbered problem and class of
the issue; each failed before its fix. tests/test_properties_parsers_writers.py generates more of
each class."""

from __future__ import annotations

import http.server
import itertools
import json
import math
import os
import socket
import stat
import subprocess
import threading
import time
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import psutil
import pytest
from pydantic import ValidationError

from specctl.adapters.tgi import IMAGE, Tgi, TgiOptions
from specctl.orchestrator import runs, sanitise
from specctl.orchestrator.app import App
from specctl.orchestrator.config import profiles
from specctl.orchestrator.contract import registry
from specctl.orchestrator.contract.dirs import Dirs
from specctl.orchestrator.errors import ModelError, ProfileError, SettingsError, StateError
from specctl.orchestrator.models import compat
from specctl.orchestrator.models.hub import Hub
from specctl.orchestrator.models.info import from_gguf, from_hf_dir, parse_ref
from specctl.orchestrator.models.resolve import from_hub
from specctl.orchestrator.runtime import state
from specctl.orchestrator.runtime.servers import free_port
from tests import hostile_gguf
from tests.cli import run_main
from tests.conftest import HARDWARE
from tests.fake_hf_hub import FakeHub
from tests.ggufs import write_gguf
from tests.test_fake_hf_hub import hf_cache  # noqa: F401 (a fixture: the client online)
from tests.test_hostile_profiles_and_state import one_line

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
    from specctl.orchestrator.contract.launch import Launch
    from specctl.orchestrator.runtime import handoff

    ready = handoff.Ready.of("demo", "127.0.0.1", 8080, "none", Launch(
        argv=("true",), health_url="http://127.0.0.1:8080/health",
        base_url="http://127.0.0.1:8080/v1"), [], {})
    path = handoff.write(isolated_dirs.runs, ready)
    assert handoff.take(path, isolated_dirs.runs) == ready
    assert not path.exists()


_BROKEN_LAUNCHES: dict[str, Any] = {
    "a field missing": lambda ln: ln.pop("health_url"),
    "an unknown key": lambda ln: ln.update(shell="sh -c x"),
    "no program": lambda ln: ln.update(argv=[]),
    "a number for an argument": lambda ln: ln.update(argv=["true", 1]),
    "too many failing answers": lambda ln: ln.update(health_failed=list(range(500, 517))),
    "a call with an unknown key": lambda ln: ln["setup"][0].update(headers={}),
}


@pytest.mark.parametrize("broken", list(_BROKEN_LAUNCHES))
def test_2_the_launch_handed_over_is_validated_whole(broken: str, isolated_dirs: Dirs) -> None:
    """The supervisor reads the contract's Launch model back as untrusted input: it round-trips
    (setup calls, failing answers), and a launch with a field missing, an unknown key or a bad
    value is one line, its file left in place."""
    from specctl.orchestrator.contract.launch import HttpCall, Launch
    from specctl.orchestrator.runtime import handoff

    launch = Launch(argv=("true", "--x"), env={"A": "1"}, health_url="http://h/health",
                    health_failed=frozenset({503, 500}), base_url="http://h/v1",
                    env_from={"KEY": "MY_KEY"}, model="m",
                    setup=(HttpCall(method="POST", url="http://h/load", body={"n": [1]}),))
    ready = handoff.Ready.of("demo", "127.0.0.1", 8080, "none", launch, [], {})
    path = handoff.write(isolated_dirs.runs, ready)
    data = json.loads(path.read_text())
    assert data["launch"]["health_failed"] == [500, 503]
    assert handoff.take(path, isolated_dirs.runs).launch() == launch
    _BROKEN_LAUNCHES[broken](data["launch"])
    path = handoff.write(isolated_dirs.runs, ready)
    path.write_text(json.dumps(data))
    with pytest.raises(StateError, match="is not valid"):
        handoff.take(path, isolated_dirs.runs)
    assert path.exists()


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


# --- 4. one hostile model file is one rejected candidate, never the end of planning -----------

HOSTILE_GGUFS: dict[str, dict[str, bytes | hostile_gguf.Hole]] = {
    "block-count-text": {"qwen2__block_count": hostile_gguf.scalar(hostile_gguf.STRING, "4")},
    "heads-nan": {"qwen2__attention__head_count": hostile_gguf.scalar(6, math.nan)},
    "heads-inf": {"qwen2__attention__head_count": hostile_gguf.scalar(12, math.inf)},
    "heads-huge": {"qwen2__attention__head_count": hostile_gguf.scalar(10, 2**63)},
    "heads-neg": {"qwen2__attention__head_count": hostile_gguf.scalar(5, -8)},
    "name-array": {"general__name": hostile_gguf.array(4, [1, 2])},
    "arch-number": {"general__architecture": hostile_gguf.scalar(4, 7)},
    "model-array": {"tokenizer__ggml__model": hostile_gguf.array(hostile_gguf.STRING, ["gpt2"])},
    "holes": {f"x.holes{i}": hostile_gguf.Hole(1 << 26) for i in range(200)},
    "big-tokens": {"tokenizer__ggml__tokens": hostile_gguf.Hole(64, 16 << 20)},
}


@pytest.fixture(scope="module")
def hostile_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("hostile")
    for name, changes in HOSTILE_GGUFS.items():
        hostile_gguf.model(folder / f"{name}.gguf", **changes)
    return folder


@pytest.mark.parametrize("name", sorted(HOSTILE_GGUFS))
def test_4_a_hostile_gguf_is_one_model_error_naming_it(name: str, hostile_dir: Path) -> None:
    path = hostile_dir / f"{name}.gguf"
    started = time.monotonic()
    with pytest.raises(ModelError) as caught:
        info = from_gguf(path, str(path))
        compat.file_tokens(info)  # the vocabulary too, as the draft rules read it
    assert str(path) in str(caught.value) and len(str(caught.value)) < 1000
    assert time.monotonic() - started < 10


def test_4_drafts_ranks_around_hostile_candidates(
        hostile_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    target = write_gguf(tmp_path / "target.gguf", name="target model", block_count=24)
    write_gguf(hostile_dir / "good-draft.gguf", name="good draft", block_count=2)
    started = time.monotonic()
    code, out, err = run_main(monkeypatch, capsys, "drafts", "--target", str(target),
                              "--backend", "llamacpp", "--models-dir", str(hostile_dir), "--json")
    assert code == 0, err
    assert time.monotonic() - started < 30
    rows = {Path(c["path"]).stem: c for c in json.loads(out)["candidates"] if c.get("path")}
    assert rows["good-draft"]["compatible"]
    for name in HOSTILE_GGUFS:
        assert not rows[name]["compatible"] and f"{name}.gguf" in rows[name]["reason"], rows[name]
    assert max(len(line) for line in out.splitlines()) < 2000


def _hf_folder(root: Path, config: object, tokenizer: object | None = None) -> Path:
    root.mkdir(parents=True)
    (root / "config.json").write_text(json.dumps(config))
    if tokenizer is not None:
        (root / "tokenizer.json").write_text(json.dumps(tokenizer))
    return root


GOOD_CONFIG = {"model_type": "qwen2", "num_hidden_layers": 2, "num_attention_heads": 4,
               "hidden_size": 64, "vocab_size": 16}


@pytest.mark.parametrize("config", [
    {**GOOD_CONFIG, "num_attention_heads": "4"}, {**GOOD_CONFIG, "hidden_size": [64]},
    {**GOOD_CONFIG, "vocab_size": 1e30}, {**GOOD_CONFIG, "num_hidden_layers": True},
    {**GOOD_CONFIG, "num_key_value_heads": -1}, {**GOOD_CONFIG, "architectures": "Qwen2"},
    {**GOOD_CONFIG, "text_config": []}, {**GOOD_CONFIG, "quantization": {"bits": "4"}},
    {**GOOD_CONFIG, "num_attention_heads": 0, "hidden_size": 64, "head_dim": None,
     "model_type": {"x": 1}},
    ["not", "an", "object"]])
def test_4_a_config_of_the_wrong_types_is_one_model_error(config: object, tmp_path: Path) -> None:
    folder = _hf_folder(tmp_path / "m", config)
    with pytest.raises(ModelError, match=str(folder / "config.json")):
        from_hf_dir(folder, str(folder))


@pytest.mark.parametrize("tokenizer", [
    {"model": {"type": "BPE", "vocab": {"a": 0}}, "added_tokens": [{"id": 10**12,
                                                                     "content": "x"}]},
    {"model": {"type": "BPE", "vocab": {"a": "0"}}},
    {"model": {"type": "BPE", "vocab": {"a": -1}}},
    {"model": {"type": ["BPE"], "vocab": {}}},
    {"model": "BPE"},
    {"model": {"type": "Unigram", "vocab": [["a", 0.0], "b"]}},
    {"model": {"type": "BPE", "vocab": {}}, "added_tokens": [{"id": 1}]},
    {"model": {"type": "BPE", "vocab": {}}, "added_tokens": {"id": 1}},
])
def test_4_a_tokenizer_of_the_wrong_types_is_one_model_error(tokenizer: object,
                                                              tmp_path: Path) -> None:
    folder = _hf_folder(tmp_path / "m", GOOD_CONFIG, tokenizer)
    started = time.monotonic()
    with pytest.raises(ModelError, match=str(folder / "tokenizer.json")):
        info = from_hf_dir(folder, str(folder))
        compat.file_tokens(info)
    assert time.monotonic() - started < 10


# --- 4/5. Hub answers, the Hub cache and a silent Hub ---------------------------------------

def _repo_folder(root: Path, repo: str, config: object) -> None:
    folder = root / repo
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(config))


@pytest.fixture
def online(hf_cache: Path) -> None:  # noqa: F811 (the fixture imported above)
    """The real client, online (the suite runs with HF_HUB_OFFLINE=1)."""


@pytest.fixture
def fake_hub(tmp_path: Path, online: None) -> Iterator[FakeHub]:
    root = tmp_path / "hub-root"
    _repo_folder(root, "acme/a", {"base_model_name_or_path": "acme/b", "medusa_num_heads": 2})
    _repo_folder(root, "acme/b", {"base_model_name_or_path": "acme/a", "medusa_num_heads": 2})
    _repo_folder(root, "acme/odd", GOOD_CONFIG)
    with FakeHub(root) as running:
        yield running


def test_4_base_models_naming_each_other_are_one_model_error(fake_hub: FakeHub,
                                                             tmp_path: Path) -> None:
    hub = Hub(tmp_path / "cache", endpoint=fake_hub.url)
    with pytest.raises(ModelError, match="acme/a"):
        from_hub(hub, parse_ref("hf:acme/a"), "BF16")


@pytest.mark.parametrize("answer", [
    ["a", "list"], "text", {"id": "acme/odd", "sha": "0" * 40, "siblings": "config.json"},
    {"id": "acme/odd", "sha": "0" * 40, "siblings": [{"rfilename": 7}]},
    {"id": "acme/odd", "sha": "0" * 40, "siblings": [["config.json"]]},
    {"id": "acme/odd", "sha": "x", "siblings": []},
    {"id": "acme/odd", "sha": "0" * 40, "siblings": [], "safetensors": "many"},
    {"id": "acme/odd", "sha": "0" * 40, "siblings": [{"rfilename": "a", "size": "big"}]},
    {"id": "acme/odd", "sha": "0" * 40, "siblings": [{"rfilename": "a", "lfs": "x"}]},
])
def test_5_a_hub_answer_of_the_wrong_shape_is_one_model_error(
        answer: object, fake_hub: FakeHub, tmp_path: Path) -> None:
    fake_hub.answer_with("acme/odd", answer)
    hub = Hub(tmp_path / "cache", endpoint=fake_hub.url)
    with pytest.raises(ModelError, match="acme/odd"):
        hub.repo("acme/odd")


@pytest.mark.parametrize("kind", ["fifo", "zero", "dir", "huge", "list"])
def test_5_the_hub_cache_is_read_bounded(kind: str, fake_hub: FakeHub, tmp_path: Path) -> None:
    hub = Hub(tmp_path / "cache", endpoint=fake_hub.url)
    good = hub.repo("acme/odd")
    folder = tmp_path / "cache" / "acme--odd"
    for name in ("refs.json", f"{good.revision}/repo.json"):
        path = folder / name
        path.unlink()
        if kind == "fifo":
            os.mkfifo(path)
        elif kind == "zero":
            path.symlink_to("/dev/zero")
        elif kind == "dir":
            path.mkdir()
        elif kind == "huge":
            with path.open("wb") as fh:
                fh.truncate(1 << 34)  # 16 GB of holes
        else:
            path.write_text("[" * 100_000)
    started = time.monotonic()
    offline = Hub(tmp_path / "cache", endpoint=fake_hub.url, offline=True)
    assert offline.cached("acme/odd") is None
    assert time.monotonic() - started < 5


def test_5_a_hub_that_never_answers_is_one_error_within_bounds(tmp_path: Path,
                                                               online: None) -> None:
    silent = socket.create_server(("127.0.0.1", 0))
    try:
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        hub = Hub(tmp_path / "cache", endpoint=url)
        started = time.monotonic()
        for repo in ("acme/one", "acme/two", "acme/three"):  # later calls fail at once
            with pytest.raises(ModelError, match="cannot reach"):
                hub.repo(repo)
        with pytest.raises(ModelError, match="cannot reach"):
            hub.search("acme", "one")
        assert time.monotonic() - started < 25
    finally:
        silent.close()


# --- 6. one sanitiser for outside text ------------------------------------------------------

EVIL = "evil\x1b]0;pwned\x07\x1b[2J\nmachine    forged line\r\u202etxt"


def test_6_no_escape_or_forged_line_from_a_model_name_path_or_description(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str], isolated_dirs: Dirs) -> None:
    folder = tmp_path / "m\x1b[31m"
    folder.mkdir()
    target = write_gguf(folder / "t\x1b[2J.gguf", name=EVIL, block_count=4)
    isolated_dirs.profiles.mkdir(parents=True)
    (isolated_dirs.profiles / "evil.toml").write_text(
        f'description = "{EVIL.encode("unicode_escape").decode()}"\n'
        f'target = "{str(target).encode("unicode_escape").decode()}"\ndraft = "none"\n')
    for args in (("plan", "-p", "evil", "--hardware", str(HARDWARE / "linux_cpu_2c_24g.json")),
                 ("profiles",), ("drafts", "--target", str(target), "--backend", "llamacpp"),
                 ("plan", "-p", str(tmp_path / "x\x1b[2J\n.toml"))):
        _code, out, err = run_main(monkeypatch, capsys, *args)
        for text in (out, err):
            assert "\x1b" not in text and "\x07" not in text and "\u202e" not in text, args
            assert not any(ln.startswith("machine    forged") for ln in text.splitlines())
        assert "Traceback" not in err


def test_6_logs_escape_server_output(isolated_dirs: Dirs, monkeypatch: pytest.MonkeyPatch,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    isolated_dirs.logs.mkdir(parents=True)
    (isolated_dirs.logs / "demo.log").write_text("ok\nbad \x1b]0;title\x07 \x1b[2J line\n")
    code, out, _err = run_main(monkeypatch, capsys, "logs", "demo")
    assert code == 0 and "\x1b" not in out and "\x07" not in out
    assert out.splitlines() == ["ok", "bad \\x1b]0;title\\x07 \\x1b[2J line"]


def test_6_sanitise_line_is_one_printable_line() -> None:
    out = sanitise.line(EVIL)
    assert "\n" not in out and not sanitise.CONTROL.search(out)
    assert "\\x1b" in out and "\\n" in out
    assert len(sanitise.line("x" * 10**6)) <= sanitise.LINE_LIMIT + 1


# --- 8. logs -n counts ----------------------------------------------------------------------

@pytest.mark.parametrize(("count", "expect"), [("0", []), ("2", ["b", "c"]), ("-5", None)])
def test_8_logs_line_counts(count: str, expect: list[str] | None, isolated_dirs: Dirs,
                            monkeypatch: pytest.MonkeyPatch,
                            capsys: pytest.CaptureFixture[str]) -> None:
    isolated_dirs.logs.mkdir(parents=True)
    (isolated_dirs.logs / "demo.log").write_text("a\nb\nc\n")
    code, out, err = run_main(monkeypatch, capsys, "logs", "demo", "-n", count)
    if expect is None:
        assert code != 0 and "Traceback" not in err and out == ""
    else:
        assert code == 0 and out.splitlines() == expect


# --- 7. deep, long, odd: one line each -------------------------------------------------------

def test_7_toml_nested_100000_deep_is_one_line_and_breaks_only_itself(
        isolated_dirs: Dirs, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    isolated_dirs.profiles.mkdir(parents=True)
    (isolated_dirs.profiles / "deep.toml").write_text("a = " + "[" * 100_000 + "]" * 100_000)
    code, _out, err = run_main(monkeypatch, capsys, "plan", "-p", "deep")
    one_line(code, err, "deep.toml")
    code, out, err = run_main(monkeypatch, capsys, "profiles")
    assert code == 0 and "Traceback" not in err
    assert any(ln.startswith("deep") and "invalid" in ln for ln in out.splitlines()), out
    assert any(ln.startswith("cpu-demo") for ln in out.splitlines())


@pytest.mark.parametrize("body", ['target = "a\\u0000b"\ndraft = "none"\n',
                                  'target = "x"\ndraft = "none"\n[llamacpp]\ndraft = "\\u0000"\n',
                                  f'target = "{"a/" * 3000}x.gguf"\ndraft = "none"\n'])
def test_7_nul_and_very_long_paths_are_one_line(body: str, tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    path = profile_file(tmp_path, body)
    code, _out, err = run_main(monkeypatch, capsys, "plan", "-p", str(path), "--hardware",
                               str(HARDWARE / "linux_cpu_2c_24g.json"))
    one_line(code, err)


def test_7_a_very_long_argument_is_one_line(monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    code, _out, err = run_main(monkeypatch, capsys, "plan", "-p", "x" * 100_000 + ".toml")
    one_line(code, err)
    code, _out, err = run_main(monkeypatch, capsys, "plan", "-p", "cpu-demo", "--hardware",
                               "/x" * 5000)
    one_line(code, err)


@pytest.mark.parametrize("kind", ["dir", "fifo"])
def test_7_doctor_record_into_a_dir_or_fifo_is_one_line(
        kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "rec.json"
    if kind == "dir":
        target.mkdir()
    else:
        os.mkfifo(target)
    code, _out, err = run_main(monkeypatch, capsys, "doctor", "--record", str(target),
                               "--hardware", str(HARDWARE / "linux_cpu_2c_24g.json"))
    one_line(code, err, "rec.json")
    assert target.is_dir() if kind == "dir" else stat.S_ISFIFO(os.stat(target).st_mode)


@pytest.mark.parametrize("where", ["file", "proc"])
def test_7_a_state_dir_that_cannot_be_one_is_one_line(
        where: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    state_dir = tmp_path / "a-file" if where == "file" else Path("/proc/self/specctl-state")
    if where == "file":
        state_dir.write_text("x")
    monkeypatch.setenv("SPECCTL_STATE_DIR", str(state_dir))
    for args in (("status",), ("down", "cpu-demo"), ("up", "-p", "cpu-demo", "--no-provision")):
        code, _out, err = run_main(monkeypatch, capsys, *args)
        assert "Traceback" not in err, (args, err)
        if code:
            one_line(code, err)


def _chain(top: Path, levels: int) -> None:
    """`top`/deep/deep/... `levels` deep, made through folder descriptors (no path that long
    could be named at once)."""
    fd = os.open(top, os.O_RDONLY)
    try:
        os.mkdir("deep", dir_fd=fd)
        for _ in range(levels):
            child = os.open("deep", os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd = child
            os.mkdir("deep", dir_fd=fd)
    finally:
        os.close(fd)


def _unchain(top: Path) -> None:
    """Remove what `_chain` made, deepest first (shutil.rmtree would recurse past Python's
    limit, and pytest's own clean-up of old temp folders with it)."""
    fds = [os.open(top, os.O_RDONLY)]
    try:
        while "deep" in os.listdir(fds[-1]):
            fds.append(os.open("deep", os.O_RDONLY, dir_fd=fds[-1]))
        while len(fds) > 1:
            os.close(fds.pop())
            os.rmdir("deep", dir_fd=fds[-1])
    finally:
        for fd in fds:
            os.close(fd)


@pytest.fixture
def deep_dir(tmp_path: Path) -> Iterator[Path]:
    _chain(tmp_path, 1500)  # deeper than any path a syscall takes (PATH_MAX)
    yield tmp_path / "deep"
    _unchain(tmp_path)


def test_7_a_models_dir_1500_levels_deep(deep_dir: Path, tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    deep = deep_dir
    target = write_gguf(tmp_path / "target.gguf", name="target model")
    started = time.monotonic()
    code, _out, err = run_main(monkeypatch, capsys, "drafts", "--target", str(target),
                               "--backend", "llamacpp", "--models-dir", str(deep))
    assert code == 0 and "Traceback" not in err, err
    assert time.monotonic() - started < 30


# --- 8. workers, clusters, metrics, permissions, IPv6 -----------------------------------------

@pytest.mark.parametrize("workers", ['["a:1,b:2"]', '["a:1 b:2"]', '["-x:1"]', '[":1"]',
                                     '["a:1;b:2"]'])
def test_8_one_rpc_worker_per_string(workers: str, tmp_path: Path, isolated_dirs: Dirs) -> None:
    path = profile_file(tmp_path, f'target = "x"\ndraft = "none"\n[llamacpp]\n'
                                  f"rpc_workers = {workers}\n")
    with pytest.raises(ProfileError, match="rpc_workers"):
        profiles.load(str(path), isolated_dirs)


def test_8_a_cluster_is_bounded(tmp_path: Path, isolated_dirs: Dirs,
                                monkeypatch: pytest.MonkeyPatch,
                                capsys: pytest.CaptureFixture[str]) -> None:
    nodes = '[[cluster.nodes]]\ncount = 1024\ngpus = 64\ngpu_memory_gb = 80\n' * 1024
    path = profile_file(tmp_path, f'target = "x"\ndraft = "none"\n{nodes}')
    started = time.monotonic()
    code, _out, err = run_main(monkeypatch, capsys, "plan", "-p", str(path))
    one_line(code, err, "cluster")
    assert time.monotonic() - started < 30


@pytest.mark.parametrize("page", [
    "llamacpp:n_drafted_total +Inf\nllamacpp:n_accepted_total NaN\n",
    'vllm:spec_decode_num_accepted_tokens_per_pos_total{position="1000000000"} 5\n',
    'vllm:spec_decode_num_draft_tokens_total 1e308\nvllm:spec_decode_num_accepted_tokens_total'
    ' +Inf\n'])
def test_8_hostile_metrics_neither_break_nor_hang(page: str) -> None:
    from specctl.adapters import prometheus
    from specctl.adapters.tgi import stats_from_metrics

    started = time.monotonic()
    for prefix in ("llamacpp:", "vllm:"):
        stats = prometheus.spec_stats(page, prefix, "test")
        assert len(stats.per_position) <= prometheus.MAX_POSITIONS
    stats_from_metrics("tgi_request_skipped_tokens_sum +Inf\n")
    assert time.monotonic() - started < 5


def test_8_loose_logs_and_runs_dirs_are_tightened_and_logs_are_0600(
        isolated_dirs: Dirs) -> None:
    from specctl.orchestrator.files import private_dir
    from specctl.orchestrator.runtime.server import Server

    for folder, mode in ((isolated_dirs.logs, 0o755), (isolated_dirs.runs, 0o777)):
        folder.mkdir(parents=True)
        folder.chmod(mode)
        private_dir(folder)
        assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700
    log = isolated_dirs.logs / "x.log"
    Server.spawn(["true"], {}, str(log), "test").proc.wait()
    assert stat.S_IMODE(os.stat(log).st_mode) == 0o600
    state.check_writable(isolated_dirs.runs)  # the runs dir through the same door


@pytest.mark.parametrize("backend", ["llamacpp", "vllm", "mlx", "tgi", "ollama"])
def test_8_an_ipv6_host_gives_bracketed_urls(backend: str) -> None:
    from specctl.orchestrator.contract.launch import url_host
    from tests import plans

    assert url_host("::1") == "[::1]" and url_host("::") == "[::1]"
    assert url_host("0.0.0.0") == "127.0.0.1" and url_host("127.0.0.1") == "127.0.0.1"
    adapter = registry.adapter_classes()[backend]()
    changes: dict[str, Any] = {}
    if backend == "ollama":
        changes = {"target": plans.target(ref="ollama:qwen2.5-coder:1.5b"), "draft": None,
                   "method": "none", "k": 0}
    elif backend in ("vllm", "tgi"):
        changes = {"hardware": "linux_1x_h100_80g", "method": "none", "draft": None, "k": 0}
    hw = changes.pop("hardware", "linux_cpu_2c_24g")
    plan = plans.plan(backend=backend, hardware=str(hw), host="::1", port=8080, **changes)
    launch = adapter.launch(plan, adapter.assumed())
    for url in (launch.base_url, launch.health_url, launch.metrics_url or ""):
        assert url == "" or "[::1]:8080" in url, url


def test_8_health_answers_on_ipv6_loopback() -> None:
    from specctl.orchestrator.runtime import procs

    class V6(http.server.ThreadingHTTPServer):
        address_family = socket.AF_INET6

    try:
        server = V6(("::1", 0), _Capture)
    except OSError:
        pytest.skip("no IPv6 loopback on this machine")
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        assert procs.healthy(f"http://[::1]:{server.server_address[1]}/health")
        assert procs.healthy(f"tcp://[::1]:{server.server_address[1]}")
    finally:
        server.shutdown()


def test_7_a_deep_or_broken_hf_cache_is_no_traceback(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    snapshot = tmp_path / "hf-home" / "hub" / "models--acme--deep-GGUF" / "snapshots" / "r1"
    snapshot.mkdir(parents=True)
    _chain(snapshot, 1500)
    model = tmp_path / "hf-home" / "hub" / "models--acme--broken" / "snapshots" / "r1"
    model.mkdir(parents=True)
    (model / "config.json").write_text(json.dumps(GOOD_CONFIG))
    (model / "model.safetensors").symlink_to(tmp_path / "gone")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    target = write_gguf(tmp_path / "target.gguf", name="target model")
    try:
        code, _out, err = run_main(monkeypatch, capsys, "drafts", "--target", str(target),
                                   "--backend", "llamacpp")
        assert code == 0 and "Traceback" not in err, err
        code, _out, err = run_main(monkeypatch, capsys, "plan", "-p", str(profile_file(
            tmp_path, 'target = "hf:acme/deep-GGUF:Q4_K_M"\ndraft = "none"\n')))
        assert "Traceback" not in err and "Recursion" not in err, err
    finally:
        _unchain(snapshot)
