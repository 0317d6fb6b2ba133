"""Property-based tests (hypothesis) for the field round (issue 39): generated command-line
values, output paths, profile fields and SPECCTL_* values through the real command line (in this
process, `tests/cli.run_main`), and GGUF headers under a time bound. The property everywhere:
a value is used as given, or refused in one line with exit 1 or 2 and no traceback; nothing
that a command says it wrote is missing, and nothing it did not say it wrote is made or changed.
Each class of failure the held-out probe found has its own example test, failing before its fix.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specctl.orchestrator.errors import StateError
from specctl.orchestrator.files import write_output
from tests.cli import run_main

# derandomized: the same examples on every run, so CI is stable; small counts keep each test
# to a few seconds (every example of the CLI tests runs a whole command in this process)
FEW = settings(max_examples=40, deadline=None, database=None, derandomize=True,
               suppress_health_check=[HealthCheck.too_slow,
                                      HealthCheck.function_scoped_fixture])
SOME = settings(max_examples=150, deadline=None, database=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow,
                                       HealthCheck.function_scoped_fixture])


def one_line_error(code: int, err: str) -> None:
    assert code in (1, 2), err
    assert "Traceback" not in err
    problem = [ln for ln in err.splitlines() if ln.startswith(("specctl: error:", "Error:"))]
    assert len(problem) == 1, err


def snapshot(root: Path) -> dict[str, tuple[int, int]]:
    """Every path under root with its mode and size (folders: size 0)."""
    out = {}
    for p in [root, *root.rglob("*")]:
        st_ = os.lstat(p)
        out[str(p.relative_to(root))] = (st_.st_mode, 0 if stat.S_ISDIR(st_.st_mode)
                                         else st_.st_size)
    return out


# --- files the user names for specctl to write --------------------------------------------------

path_parts = st.sampled_from(["x.json", "missing", "pub", "file.txt", "fifo", ".", "..", "",
                              "a b.json", "new.png", "link", "dangling"])


def _layout(root: Path) -> None:
    (root / "pub").mkdir(mode=0o755)
    os.chmod(root / "pub", 0o755)
    (root / "file.txt").write_text("keep")
    os.mkfifo(root / "fifo")
    (root / "link").symlink_to(root / "pub")
    (root / "dangling").symlink_to(root / "nowhere")


@SOME
@given(st.lists(path_parts, min_size=1, max_size=3), st.booleans())
def test_an_output_path_is_written_as_named_or_refused_in_one_line(
        parts: list[str], slash: bool) -> None:
    with tempfile.TemporaryDirectory(prefix="specctl-prop3-") as tmp:
        root = Path(tmp)
        _layout(root)
        raw = os.path.join(tmp, *parts) + ("/" if slash else "")
        before = snapshot(root)
        try:
            written = write_output(raw, "{}\n")
        except StateError as exc:
            assert "\n" not in str(exc)
            assert snapshot(root) == before  # refused: nothing made, nothing changed
            return
        assert not slash and Path(raw).parent.is_dir()
        assert written == Path(raw) and written.read_text() == "{}\n"
        after = snapshot(root)
        changed = {k for k in after if after[k] != before.get(k)}
        # only the file itself (or what a link there pointed at) is new or changed: no folder
        # was made and no folder's mode was touched
        assert all(not stat.S_ISDIR(after[k][0]) for k in changed), changed


def test_doctor_record_in_a_missing_folder_is_refused_not_made(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Before: `doctor --record DIR/missing/x.json` made the folder and said "recorded to"."""
    code, _, err = run_main(monkeypatch, capsys, "doctor", "--record",
                            str(tmp_path / "missing" / "x.json"))
    one_line_error(code, err)
    assert "does not exist" in err and not (tmp_path / "missing").exists()


def test_doctor_record_leaves_the_users_folder_mode_alone(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Before: `doctor --record ./x.json` turned the user's folder (755) into 700."""
    folder = tmp_path / "shared"
    folder.mkdir()
    os.chmod(folder, 0o755)
    code, _, err = run_main(monkeypatch, capsys, "doctor", "--record", str(folder / "x.json"))
    assert code == 0, err
    assert (folder / "x.json").is_file() and stat.S_IMODE(os.stat(folder).st_mode) == 0o755


@pytest.mark.parametrize("raw", ["", "pub/x.json/"])
def test_doctor_record_of_a_folder_name_is_refused(
        raw: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Before: `--record ""` recorded nothing and said nothing; `--record pub/x.json/` wrote
    pub/x.json."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pub").mkdir()
    code, _, err = run_main(monkeypatch, capsys, "doctor", "--record", raw)
    one_line_error(code, err)
    assert not (tmp_path / "pub" / "x.json").exists()


@pytest.mark.parametrize("option,name", [("--output", "missing/r.json"),
                                         ("--output", "fifo"),
                                         ("--plot", "r.json")])
def test_bench_output_paths_are_checked_before_anything_runs(
        option: str, name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Before: bench measured for minutes, then failed on the missing folder (or hung on a FIFO,
    or raised matplotlib's ValueError with a traceback); the profile here names a model that is
    not there, so the old order failed on the model instead."""
    monkeypatch.chdir(tmp_path)
    os.mkfifo(tmp_path / "fifo")
    profile = tmp_path / "p.toml"
    profile.write_text('target = "/nonexistent/m.gguf"\ndraft = "none"\n')
    code, _, err = run_main(monkeypatch, capsys, "bench", "-p", str(profile), option, name)
    one_line_error(code, err)
    assert "m.gguf" not in err and ("cannot write" in err or "--plot" in err), err


# --- command-line values --------------------------------------------------------------------------

CPU = str(Path(__file__).parent / "fixtures" / "hardware" / "linux_cpu_2c_24g.json")
flag_values = {
    "--port": st.one_of(st.integers(-2, 70000).map(str), st.sampled_from(
        ["", " ", "080", "8080.0", "1e3", "0x50", "nan", "８０８０", "-0"])),
    "--ctx": st.one_of(st.integers(-1, 1 << 25).map(str), st.sampled_from(["", "4k", "inf"])),
    "--host": st.sampled_from(["", "127.0.0.1", "::1", "localhost", "0.0.0.0", "a b", "[::1]",
                               "\x1b[31m", "host\n"]),
    "--backend": st.sampled_from(["", ",", " , ", "llamacpp", "llama.cpp", "nope", "vllm,",
                                  "LLAMACPP"]),
    "--draft": st.sampled_from(["", "none", "ngram", "auto", "ngram-mod", "testbed:nope",
                                "/nonexistent.gguf", "hf:", "hf:a/b/c"]),
}


@FEW
@given(flags=st.dictionaries(st.sampled_from(sorted(flag_values)), st.none(), min_size=1,
                             max_size=3).flatmap(lambda chosen: st.fixed_dictionaries(
                           {k: flag_values[k] for k in chosen})))
def test_plan_flags_are_used_as_given_or_refused_in_one_line(
        flags: dict[str, str], monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    args = [w for k, v in flags.items() for w in (k, v)]
    code, out, err = run_main(monkeypatch, capsys, "plan", "testbed:smollm2-135m",
                              "--hardware", CPU, "--json", *args)
    if code != 0:
        one_line_error(code, err)
        return
    import json

    plan = json.loads(out)
    argv = plan["argv"]
    given = {"--port": "--port", "--host": "--host", "--ctx": "-c"}
    for flag, engine_flag in given.items():
        if flag in flags and plan["backend"] == "llamacpp":
            value = argv[argv.index(engine_flag) + 1]
            if flag == "--ctx":  # shrunk to fit memory, never grown
                assert int(value) <= int(flags[flag])
            else:
                assert value == str(int(flags[flag])) if flag == "--port" else flags[flag]
    if "--backend" in flags:  # a value that names no backend is never the default
        assert plan["backend"] in flags["--backend"].lower().replace(".", "")


def test_an_empty_backend_flag_is_refused(monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    """Before: `--backend ""` (or ",") planned with the default backend and exit 0."""
    for value in ("", " , "):
        code, _, err = run_main(monkeypatch, capsys, "plan", "testbed:smollm2-135m",
                                "--hardware", CPU, "--backend", value)
        one_line_error(code, err)
        assert code == 2 and "--backend" in err


@pytest.mark.parametrize("kind", ["missing", "file", "device"])
def test_drafts_models_dir_that_is_no_folder_is_refused(
        kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Before: `drafts --models-dir` of a missing folder, a file or /dev/null searched nothing,
    said nothing and exited 0."""
    folder = {"missing": tmp_path / "nope", "file": tmp_path / "f.gguf",
              "device": Path("/dev/null")}[kind]
    (tmp_path / "f.gguf").write_bytes(b"GGUF")
    code, _, err = run_main(monkeypatch, capsys, "drafts", "--target", "testbed:smollm2-135m",
                            "--models-dir", str(folder))
    one_line_error(code, err)
    assert code == 2 and "not a folder" in err


# --- profile fields -----------------------------------------------------------------------------

def _plan_json(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
               profile: Path) -> tuple[int, dict[str, object], str]:
    import json

    code, out, err = run_main(monkeypatch, capsys, "plan", "-p", str(profile), "--hardware",
                              CPU, "--json")
    return code, (json.loads(out) if code == 0 else {}), err


@pytest.mark.parametrize("top,section,method", [
    ("auto", "none", "none"), ("testbed:qwen-0.5b-q4", "none", "none"),
    ("none", "ngram", "ngram"), ("auto", "ngram-mod", "ngram-mod")])
def test_a_backend_sections_draftless_draft_is_used(
        top: str, section: str, method: str, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Before: `[llamacpp] draft = "none"` was refused as "model file none not found" (a valid
    value refused), and `[llamacpp] draft = "ngram"` under `draft = "none"` planned no
    speculation (the section's draft was read for the model, never for the method)."""
    profile = tmp_path / "p.toml"
    profile.write_text(f'target = "testbed:qwen-1.5b-f16"\ndraft = "{top}"\n'
                       f'[llamacpp]\ndraft = "{section}"\n')
    code, plan, err = _plan_json(monkeypatch, capsys, profile)
    assert code == 0, err
    assert plan["method"] == method and plan["draft"] is None


def test_auto_with_a_head_method_is_a_pick_or_one_clear_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Before: `draft_method = "eagle3"` with `draft = "auto"` looked for a model file named
    'auto' ("model file auto not found; fix the path")."""
    profile = tmp_path / "p.toml"
    profile.write_text('target = "testbed:qwen-1.5b-f16"\ndraft_method = "eagle3"\n')
    code, _, err = _plan_json(monkeypatch, capsys, profile)
    one_line_error(code, err)
    assert "model file auto" not in err and "eagle3" in err


# --- GGUF headers: bounded in time, numbers are no vocabulary ---------------------------------

def _numbers(item: int, n: int) -> bytes:
    """An array header of n items of a numeric type (their bytes: zeros, holes in the file)."""
    import struct

    return struct.pack("<IIQ", 9, item, n) + bytes(n * {0: 1, 4: 4, 6: 4, 12: 8}[item])


@FEW
@given(st.sampled_from([0, 4, 6, 12]), st.sampled_from([16, 1 << 16, 1 << 22]),
       st.booleans())
def test_a_numeric_or_repeated_vocabulary_is_rejected_within_a_bound(
        item: int, n: int, twice: bool) -> None:
    """Before: a `tokenizer.ggml.tokens` array of numbers was read item by item in Python (4M
    items each, and again for every repeat of the key: `drafts` spent minutes on a loaded machine)
    and then judged a "compatible" vocabulary."""
    import time

    from specctl.orchestrator.errors import ModelError
    from specctl.orchestrator.models import compat
    from specctl.orchestrator.models.gguf_meta import _PARSED
    from specctl.orchestrator.models.info import from_gguf
    from tests import hostile_gguf

    body = _numbers(item, n)
    with tempfile.TemporaryDirectory(prefix="specctl-prop3-") as tmp:
        kvs = [("tokenizer.ggml.model", hostile_gguf.scalar(8, "gpt2")),
               ("tokenizer.ggml.tokens", body)] + ([("tokenizer.ggml.tokens", body)]
                                                   if twice else [])
        paths = [hostile_gguf.write(Path(tmp) / f"{name}.gguf", kvs) for name in ("t", "d")]
        started = time.monotonic()
        try:
            target, draft = (from_gguf(p, str(p)) for p in paths)
            why = compat.near(target, draft)
        except ModelError as exc:  # refused: twice, or numbers where the texts belong
            said = "appears twice" if twice else "no tokenizer vocabulary"
            assert said in str(exc) and "\n" not in str(exc)
            return
        finally:
            _PARSED.clear()
            assert time.monotonic() - started < 5
        pytest.fail(f"a vocabulary of numbers judged: {why!r}")


def test_drafts_on_a_crafted_vocabulary_finishes_and_rejects_it(tmp_path: Path) -> None:
    """The probe's case through the real command: the target and a draft whose vocabulary is
    4M numbers, given twice. Before: 14 s on this 2-core machine under load (scaling with the
    items), the draft listed as compatible."""
    import subprocess

    from tests import hostile_gguf
    from tests.cli import specctl

    body = _numbers(0, 1 << 22)
    kvs = [("tokenizer.ggml.model", hostile_gguf.scalar(8, "gpt2")),
           ("tokenizer.ggml.tokens", body), ("tokenizer.ggml.tokens", body)]
    (tmp_path / "d").mkdir()
    target = hostile_gguf.write(tmp_path / "t.gguf", kvs[:2])
    hostile_gguf.write(tmp_path / "d" / "x.gguf", kvs)
    env = {**os.environ, "SPECCTL_STATE_DIR": str(tmp_path / "state"),
           "SPECCTL_CONFIG_DIR": str(tmp_path / "config")}
    try:
        done = specctl("drafts", "--target", str(target), "--models-dir", str(tmp_path / "d"),
                       "--json", env=env, timeout=30)
    except subprocess.TimeoutExpired:
        pytest.fail("drafts did not finish within 30 s")
    assert done.returncode == 0, done.stderr
    import json

    rows = {c["path"]: c for c in json.loads(done.stdout)["candidates"] if c["path"]}
    crafted = rows[str(tmp_path / "d" / "x.gguf")]
    assert not crafted["compatible"] and "appears twice" in crafted["reason"]


@pytest.mark.parametrize("host", ["LOCALHOST", "LocalHost", "::ffff:127.0.0.1"])
def test_a_loopback_host_in_any_spelling_is_used(
        host: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Before: `--host LOCALHOST` (host names are case-blind) and the IPv4 loopback mapped into
    IPv6 were refused as "exposes the server beyond this machine" (a valid value refused)."""
    import json

    code, out, err = run_main(monkeypatch, capsys, "plan", "testbed:smollm2-135m",
                              "--hardware", CPU, "--json", "--host", host)
    assert code == 0, err
    argv = json.loads(out)["argv"]
    assert argv[argv.index("--host") + 1] == host


@FEW
@given(st.ip_addresses())
def test_is_loopback_agrees_with_the_address(address: object) -> None:
    import ipaddress

    from specctl.orchestrator.contract.launch import is_loopback

    ip = ipaddress.ip_address(str(address))
    mapped = getattr(ip, "ipv4_mapped", None)
    assert is_loopback(str(ip)) == (ip.is_loopback or bool(mapped and mapped.is_loopback))


# --- SPECCTL_* values -----------------------------------------------------------------------

@pytest.mark.parametrize("value", ["/nonexistent/llama-server", "{tmp}"])
def test_a_llama_server_variable_naming_no_file_is_refused(
        value: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Before: SPECCTL_LLAMA_SERVER naming a missing file (or a folder) was passed over for the
    build in the cache or the one on PATH, and `plan` said exit 0 for a program the user did not
    name (a wrong success)."""
    monkeypatch.setenv("SPECCTL_LLAMA_SERVER", value.format(tmp=tmp_path))
    # this machine (a recorded one is planned with the recorded dialect, nothing probed)
    code, _, err = run_main(monkeypatch, capsys, "plan", "testbed:smollm2-135m",
                            "--backend", "llamacpp")
    one_line_error(code, err)
    assert "SPECCTL_LLAMA_SERVER" in err


# --- paths with ~ ------------------------------------------------------------------------------

@pytest.mark.parametrize("where", ["target", "draft", "llamacpp.target", "--profile"])
def test_a_tilde_of_no_user_is_a_path_not_a_traceback(
        where: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Before: `target = "~nosuchuser/x.gguf"` in a profile (or as a draft, a section's target,
    `--profile ~nosuchuser/p.toml`) ended in pathlib's RuntimeError ("Could not determine home
    directory.") with a traceback. Now it is a path as written, not found, in one line."""
    ghost = "~specctl-no-such-user-39"
    profile = tmp_path / "p.toml"
    body = {"target": f'target = "{ghost}/x.gguf"\n',
            "draft": f'target = "testbed:smollm2-135m"\ndraft = "{ghost}/d.gguf"\n',
            "llamacpp.target": f'target = "testbed:smollm2-135m"\n[llamacpp]\n'
                               f'target = "{ghost}/x.gguf"\n'}.get(where, "")
    profile.write_text(body)
    ref = f"{ghost}/p.toml" if where == "--profile" else str(profile)
    code, _, err = run_main(monkeypatch, capsys, "plan", "-p", ref, "--hardware", CPU)
    one_line_error(code, err)
    assert ghost in err


@SOME
@given(st.text(alphabet=st.sampled_from(list("~/ab.-_$")), max_size=12))
def test_expand_user_never_raises(text: str) -> None:
    from specctl.orchestrator.files import expand_user

    got = expand_user(text)
    assert str(got) == str(Path(text)) or not text.startswith("~") or str(got) == str(
        Path(text).expanduser())
