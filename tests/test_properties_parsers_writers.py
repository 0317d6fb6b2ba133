"""Property-based tests (hypothesis) over specctl's parsers and writers (issue 14).

Every boundary where outside bytes come in, or where specctl writes a file others parse, gets
generated input: profiles (TOML and SPECCTL_* overrides), recorded machines, run-state and tuned
files, Ollama manifests, GGUF headers, settings variables, names to paths, systemd units and
launchd plists. The properties: a clear one-line SpecctlError or a valid value, never another
exception; nothing written or renamed outside its dir; and a unit contains exactly the
directives specctl wrote, each reading back as the value it was given (checked by systemd
itself, `systemd-analyze verify`, for a few dozen examples: those tests carry the `systemd`
mark).
"""

from __future__ import annotations

import json
import math
import os
import plistlib
import re
import shutil
import string
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from specctl.adapters.ollama_store import OllamaStore
from specctl.orchestrator.config import overrides, profiles
from specctl.orchestrator.config.settings import Settings
from specctl.orchestrator.contract.dirs import Dirs
from specctl.orchestrator.errors import (
    HardwareError,
    ModelError,
    NameRefusedError,
    ProfileError,
    SettingsError,
    StateError,
)
from specctl.orchestrator.files import NAME_PATTERN, check_name, inside, read_back
from specctl.orchestrator.machine import hardware
from specctl.orchestrator.measure.results import tuned
from specctl.orchestrator.models import gguf_meta
from specctl.orchestrator.runtime import state
from specctl.orchestrator.service import quote, units
from tests.conftest import HARDWARE

FAST = settings(max_examples=1000, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow])
SOME = settings(max_examples=300, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow])
SYSTEMD = settings(max_examples=40, deadline=None, database=None,
                   suppress_health_check=[HealthCheck.too_slow])
needs_systemd = pytest.mark.skipif(shutil.which("systemd-analyze") is None,
                                   reason="systemd-analyze is not installed")

# --- strategies -------------------------------------------------------------------------------

names = st.from_regex(NAME_PATTERN, fullmatch=True)
hostile_text = st.one_of(
    st.text(),
    st.text(alphabet=st.sampled_from(list("\n\r\t\\\"'%$;#[]= /.-\x00\x0b\x1b\x7f\x85\u2028é"
                                          "\ufdd0\ufffe\U0001ffff")), max_size=20),
    st.sampled_from(["", ".", "..", "../x", "/abs", "a/../../b", "x\nExecStartPre=/bin/sh",
                     "\\", "a\\", " a", "a ", "%h", "$HOME", "${X}", ";", "\ud800"]))
json_scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(),
                         st.text(max_size=30))
json_values = st.recursive(json_scalars, lambda kids: st.one_of(
    st.lists(kids, max_size=4), st.dictionaries(st.text(max_size=12), kids, max_size=4)),
    max_leaves=20)


@contextmanager
def box() -> Iterator[Path]:
    """A fresh folder per example; everything outside it is checked untouched."""
    with tempfile.TemporaryDirectory(prefix="specctl-prop-") as tmp:
        yield Path(tmp)


def tree(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


# --- names to paths ---------------------------------------------------------------------------

@FAST
@given(hostile_text, st.sampled_from(["", ".json", ".lock", ".log", ".json.corrupt"]))
def test_names_become_paths_inside_their_folder_or_are_refused(name: str, suffix: str) -> None:
    with box() as root:
        folder = root / "runs"
        try:
            path = inside(folder, name, suffix)
        except NameRefusedError as exc:
            assert "\n" not in str(exc).replace("\\n", "")
            return
        assert path.parent == folder and path.name == name + suffix
        assert re.fullmatch(NAME_PATTERN, name) and check_name(name) == name
        assert not {"/", "\\", "\x00", "\n"} & set(name) and name not in (".", "..")


@FAST
@given(names)
def test_every_valid_name_is_accepted_and_escapes_to_itself(name: str) -> None:
    assert check_name(name) == name
    assert quote.unit_escape(name) == name


# --- profiles ---------------------------------------------------------------------------------

FIELDS = {"": ["name", "description", "target", "draft", "draft_method", "k", "backend"],
          "server": ["host", "port", "context", "threads", "parallel", "api_key_env"],
          "memory": ["budget_gb", "gpu_utilization", "ram_reserve_gb", "cache_type",
                     "min_context"],
          "speculative": ["p_min", "ngram_min", "ngram_max"],
          "llamacpp": ["n_min", "rpc_workers", "worker_memory_gb", "draft_local"],
          "vllm": ["tensor_parallel", "pipeline_parallel", "ray_address"]}
toml_scalars = st.one_of(st.booleans(), st.integers(-(2**63), 2**63 - 1),
                         st.floats(), st.text(max_size=20),
                         st.sampled_from([8080, 0, 99999, 2, 32, 33, "auto", "ngram", "none",
                                          "127.0.0.1", "hf:org/m", 0.5, -1.0]))
toml_values = st.one_of(toml_scalars, st.lists(toml_scalars, max_size=3))


def toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf") if math.isinf(v) \
            else repr(v)
    if isinstance(v, int):
        return str(v)
    if isinstance(v, list):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    return json.dumps(v)  # a TOML basic string (or invalid TOML: a clear error all the same)


@st.composite
def profile_texts(draw: st.DrawFn) -> str:
    lines = ['target = "hf:org/model"'] if draw(st.booleans()) else []
    for section, keys in FIELDS.items():
        chosen = draw(st.lists(st.sampled_from([*keys, "bogus"]), max_size=3, unique=True))
        if not chosen:
            continue
        if section:
            lines.append(f"[{section}]")
        lines += [f"{k} = {toml_value(draw(toml_values))}" for k in chosen]
    if draw(st.booleans()):
        lines += ["[[cluster.nodes]]", f"gpus = {toml_value(draw(toml_scalars))}",
                  f"gpu_memory_gb = {toml_value(draw(toml_scalars))}"]
    return "\n".join(lines) + "\n"


def _profile_invariants(p: profiles.Profile) -> None:
    assert re.fullmatch(NAME_PATTERN, p.name)
    assert p.k == "auto" or (type(p.k) is int and 1 <= p.k <= 32)
    assert type(p.server.port) is int and 1 <= p.server.port <= 65535
    assert p.speculative.ngram_min <= p.speculative.ngram_max
    assert p.speculative.p_min is None or 0 <= p.speculative.p_min <= 1
    assert all(0 <= n.gpus <= 64 and n.gpu_memory_gb >= 0 for n in p.cluster.nodes)
    for value in (p.memory.gpu_utilization, p.memory.ram_reserve_gb):
        assert math.isfinite(value) and value >= 0


@SOME
@given(profile_texts())
def test_a_generated_profile_is_valid_or_one_clear_error(text: str) -> None:
    try:
        found = profiles.parse(text, name="gen", source="gen.toml")
    except ProfileError as exc:
        assert str(exc).startswith(("gen.toml", "$SPECCTL_")) and "\n" not in str(exc)
        return
    _profile_invariants(found)


@SOME
@given(st.binary(max_size=300))
def test_profile_bytes_never_raise_anything_else(data: bytes) -> None:
    with box() as root:
        path = root / "p.toml"
        path.write_bytes(data)
        with suppress(ProfileError):
            _profile_invariants(profiles.load(str(path), Dirs(root, root, root)))


env_names = st.builds(lambda parts: "SPECCTL_" + "__".join(parts).upper(), st.lists(
    st.sampled_from(["k", "draft", "server", "port", "host", "memory", "speculative", "p_min",
                     "llamacpp", "n_min", "rpc_workers", "cluster", "nodes", "prot", "name",
                     "max_restarts"]), min_size=1, max_size=3))


@SOME
@given(st.dictionaries(env_names, st.text(max_size=12), max_size=3))
def test_overrides_are_applied_strictly_or_name_their_variable(env: dict[str, str]) -> None:
    try:
        over = overrides.read(profiles.profile_model(), env)
        data = profiles._merge({"target": "hf:org/m", "name": "gen"}, over.data)
        found = profiles.profile_model().model_validate(data)
    except ProfileError as exc:
        assert str(exc).startswith("$SPECCTL_") and "\n" not in str(exc)
        return
    except ValidationError as exc:  # the message itself is checked through profiles.parse
        assert over.blame(tuple(str(p) for p in exc.errors()[0]["loc"])) is not None
        return
    _profile_invariants(found)


# --- recorded machines ------------------------------------------------------------------------

def _machine() -> dict[str, Any]:
    data: dict[str, Any] = json.loads((HARDWARE / "linux_1x_h100_80g.json").read_text())
    return data


@st.composite
def mutated_machines(draw: st.DrawFn) -> Any:
    data = _machine()
    target = draw(st.sampled_from([data, data["cpu"], *data["gpus"]]))
    key = draw(st.sampled_from([*target, "extra"]))
    target[key] = draw(json_values)
    return data


@SOME
@given(st.one_of(json_values, mutated_machines()))
def test_a_recorded_machine_is_valid_or_one_clear_error(data: Any) -> None:
    with box() as root:
        path = root / "hw.json"
        path.write_text(json.dumps(data))
        try:
            hw = hardware.load(path)
        except HardwareError as exc:
            assert str(path) in str(exc) and "\n" not in str(exc)
            return
    assert len(hw.gpus) <= 64 and all(0 <= g.used_bytes <= g.memory_bytes for g in hw.gpus)
    assert all(type(g.memory_bytes) is int and g.memory_bytes > 0 for g in hw.gpus)
    assert type(hw.cpu.cores) is int and hw.cpu.cores >= 1 and hw.cpu.ram_bytes > 0


@SOME
@given(st.binary(max_size=200))
def test_machine_bytes_never_raise_anything_else(data: bytes) -> None:
    with box() as root:
        path = root / "hw.json"
        path.write_bytes(data)
        with pytest.raises(HardwareError):
            hardware.load(path)


# --- files read back: run state and tuned results ---------------------------------------------

def _state() -> dict[str, Any]:
    return {"profile": "smol", "supervisor_pid": 10, "supervisor_started": 1.5,
            "url": "http://127.0.0.1:1/v1", "port": 1, "host": "127.0.0.1", "log": "x.log",
            "status": "running", "server_pid": 11, "server_pgid": 11, "server_started": 2.0,
            "supervisor_cmdline": ["python"], "server_cmdline": ["llama-server"]}


def _result() -> dict[str, Any]:
    return {"profile": "smol", "method": "draft", "k": 4, "p_min": 0.5, "speedup": 1.4,
            "summary": "s", "alpha": 0.7, "cost": 0.1, "verify": {"4": 1.1},
            "baseline_tps": 10.0, "measured": [{"label": "draft k=4", "method": "draft", "k": 4,
                                                 "p_min": None, "speedup": 1.4, "tps": 14.0}],
            "key": "key"}


@st.composite
def mutated(draw: st.DrawFn, base: dict[str, Any]) -> Any:
    data = json.loads(json.dumps(base))
    for _ in range(draw(st.integers(1, 3))):
        key = draw(st.sampled_from([*data, "extra"]))
        data[key] = draw(json_values)
    return data


def _read_back_property(root: Path, path: Path, load: Any) -> Any:
    before = tree(root)
    try:
        found = load()
    except StateError as exc:
        assert "\n" not in str(exc) and path.name in str(exc)
        assert not path.exists() and path.with_name(f"{path.name}.corrupt").exists()
        assert tree(root) == (before - {str(path.relative_to(root))}) | {
            str(path.with_name(f"{path.name}.corrupt").relative_to(root))}
        return None
    assert tree(root) == before  # a valid file stays where it is
    return found


@SOME
@given(st.one_of(json_values, mutated(_state())), st.booleans())
def test_a_run_state_is_valid_or_set_aside(data: Any, as_bytes: bool) -> None:
    with box() as root:
        runs = root / "state" / "runs"
        runs.mkdir(parents=True)
        path = runs / "smol.json"
        path.write_bytes(json.dumps(data).encode() + (b"\xff" if as_bytes else b""))
        run = _read_back_property(root, path, lambda: state.load(runs, "smol"))
        if run is not None:
            assert run.profile == "smol" and run.supervisor_pid > 0 and 1 <= run.port <= 65535
            assert run.status in ("starting", "running", "restarting", "failed", "stopped")
            assert isinstance(run.plan, dict)


@SOME
@given(st.one_of(json_values, mutated(_result())))
def test_a_tuned_result_is_valid_or_set_aside(data: Any) -> None:
    with box() as root:
        path = root / "key.json"
        path.write_text(json.dumps(data))
        result = _read_back_property(root, path, lambda: tuned.load(root, "key"))
        if result is not None:
            assert (result.method == "none" and result.k == 0) or 1 <= result.k <= 32
            assert result.p_min is None or 0 <= result.p_min <= 1
            assert math.isfinite(result.speedup)


@SOME
@given(st.text(alphabet=string.ascii_letters + string.digits, min_size=1, max_size=8),
       st.floats(0, 1), st.integers(1, 32))
def test_a_saved_tuned_result_reads_back_the_same(summary: str, p_min: float, k: int) -> None:
    result = tuned.Result.from_json({**_result(), "summary": summary, "p_min": p_min, "k": k})
    with box() as root:
        tuned.save(root, result)
        again = tuned.load(root, "key")
    assert again is not None and again.to_json() == result.to_json()


@SOME
@given(hostile_text)
def test_read_back_never_leaves_its_dir(name: str) -> None:
    with box() as root:
        folder = root / "runs"
        folder.mkdir()
        (root / "victim.json").write_text("{}")
        with suppress(NameRefusedError, StateError):
            read_back(inside(folder, name, ".json"), json.loads, "file", "")
        assert (root / "victim.json").read_text() == "{}"


# --- another tool's files: Ollama manifests, GGUF headers -------------------------------------

@SOME
@given(st.one_of(json_values, st.fixed_dictionaries({"layers": st.lists(
    st.fixed_dictionaries({"mediaType": st.sampled_from(
        ["application/vnd.ollama.image.model", "x"]), "digest": hostile_text}), max_size=3)})))
def test_an_ollama_manifest_gives_a_blob_inside_the_store_or_one_error(manifest: Any) -> None:
    with box() as root:
        path = root / "manifests/registry.ollama.ai/library/m/latest"
        path.parent.mkdir(parents=True)
        path.write_text(json.dumps(manifest))
        try:
            blob = OllamaStore(root).locate("m:latest")
        except ModelError as exc:
            assert "\n" not in str(exc)
            return
        assert blob is None or blob.parent == root / "blobs"


GGUF_HEAD = (0x46554747).to_bytes(4, "little") + (3).to_bytes(4, "little")


@SOME
@given(st.binary(max_size=400), st.booleans())
def test_a_gguf_header_is_read_or_one_model_error(data: bytes, with_magic: bool) -> None:
    with box() as root:
        path = root / "m.gguf"
        path.write_bytes((GGUF_HEAD if with_magic else b"") + data)
        try:
            gguf_meta.read_metadata(path, keep=frozenset({gguf_meta.TOKENS_KEY}))
        except ModelError as exc:
            assert "\n" not in str(exc)


# --- settings variables -----------------------------------------------------------------------

@SOME
@given(st.dictionaries(st.sampled_from(["SPECCTL_MAX_RESTARTS", "SPECCTL_RESTART_BACKOFF",
                                        "SPECCTL_HEALTH_TIMEOUT", "SPECCTL_STOP_GRACE"]),
                       st.one_of(st.text(max_size=8), st.sampled_from(
                           ["nan", "inf", "-1", "1e309", "true", "5", "0.5"])), max_size=4))
def test_settings_variables_are_valid_or_name_the_variable(env: dict[str, str]) -> None:
    mp = pytest.MonkeyPatch()
    try:
        for key, value in env.items():
            mp.setenv(key, value.replace("\x00", ""))
        try:
            s = Settings.from_env()
        except SettingsError as exc:
            assert str(exc).startswith("$SPECCTL_") and "\n" not in str(exc)
            return
        assert s.max_restarts >= 0 and math.isfinite(s.health_timeout) and s.health_timeout > 0
    finally:
        mp.undo()


# --- writers: systemd units and launchd plists ------------------------------------------------

@st.composite
def specs(draw: st.DrawFn, text: st.SearchStrategy[str] = hostile_text) -> units.ServiceSpec:
    # under /tmp or /var/tmp: bound into the unit's private /tmp (BindPaths=, BindReadOnlyPaths=)
    folder = draw(st.sampled_from(["/", "/tmp/", "/var/tmp/"])) + draw(text).lstrip("/")
    program = draw(st.sampled_from(["/opt/", "/tmp/"])) + draw(text).lstrip("/")
    return units.ServiceSpec(
        profile=draw(st.one_of(names, text)),
        argv=("/usr/bin/python3", "-m", "specctl", "up", "--profile", draw(text),
              "--foreground"),
        env={"SPECCTL_STATE_DIR": folder, "HF_HOME": draw(text), "PYTHONUNBUFFERED": "1"},
        writable=(Path(folder),), log_dir=Path(folder) / "logs", readable=(Path(program),),
        env_file=Path(folder) / "service.env", system=draw(st.booleans()),
        user=draw(st.sampled_from([None, "daemon"])))


_CESCAPE = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v",
            "\\": "\\", '"': '"', "'": "'", "s": " "}


def split_words(raw: str, unescape: bool) -> list[str]:
    """systemd's extract_first_word(UNQUOTE [| CUNESCAPE]) for the values specctl writes."""
    out, i = [], 0
    while i < len(raw):
        while i < len(raw) and raw[i] in " \t\n":
            i += 1
        if i == len(raw):
            break
        word, quoted = [], False
        while i < len(raw) and (quoted or raw[i] not in " \t\n"):
            ch = raw[i]
            if ch == '"':
                quoted, i = not quoted, i + 1
            elif ch == "\\" and unescape:
                nxt = raw[i + 1]
                if nxt == "x":
                    word.append(chr(int(raw[i + 2:i + 4], 16)))
                    i += 4
                elif nxt == "u":
                    word.append(chr(int(raw[i + 2:i + 6], 16)))
                    i += 6
                else:
                    word.append(_CESCAPE[nxt])
                    i += 2
            else:
                word.append(ch)
                i += 1
        out.append("".join(word))
    return out


def lines_of(text: str) -> list[tuple[str, str, str]]:
    """(section, key, raw value) as systemd's line parser sees them."""
    found, section = [], ""
    for line in text.replace("\\\n", " ").replace("\r", "\n").split("\n"):
        line = line.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("["):
            section = line.strip("[]")
        else:
            key, _, value = line.partition("=")
            found.append((section, key.strip(), value.strip()))
    return found


def read_back_unit(text: str, unit: units.SystemdUnit) -> None:
    """Exactly the directives written, in order, each value reading back as given."""
    wrote = [(s, k, v) for s, entries in unit.sections for k, v in entries]
    found = lines_of(text)
    assert [(s, k) for s, k, _ in found] == [(s, k) for s, k, _ in wrote], text
    for (_, key, raw), (_, _, value) in zip(found, wrote, strict=True):
        printed = raw.replace("%%", "%")  # specifiers are expanded before unquoting
        if isinstance(value, quote.Words):
            got = split_words(printed, value.kind not in ("paths", "binds"))
            if value.kind == "command":
                got = [w.replace("$$", "$") for w in got]
            assert got == list(value.items), (key, raw)
        else:
            assert printed == value, (key, raw)


@SOME
@given(specs())
def test_a_unit_holds_exactly_the_directives_written(spec: units.ServiceSpec) -> None:
    unit = units.systemd_unit(spec)
    try:
        text = unit.render()
    except quote.UnitValueError as exc:
        assert "\n" not in str(exc)
        return
    read_back_unit(text, unit)
    assert text.count("\n[") == 2  # [Service] and [Install] after [Unit], nothing more


@SOME
@given(specs())
def test_a_plist_reads_back_as_written(spec: units.ServiceSpec) -> None:
    try:
        plist = units.launchd_plist(spec)
        text = units.render_plist(plist)
    except (quote.UnitValueError, NameRefusedError) as exc:
        assert "\n" not in str(exc)
        return
    assert plistlib.loads(text.encode()) == json.loads(json.dumps(plist))
    assert re.fullmatch(r"dev\.specctl\.[A-Za-z0-9._\\-]+", str(plist["Label"]))


def _verify(text: str, folder: Path) -> subprocess.CompletedProcess[str]:
    path = folder / "specctl-x.service"
    path.write_text(text)
    return subprocess.run(["systemd-analyze", "verify", str(path)], capture_output=True,
                          text=True, check=False, timeout=60)


printable = st.text(st.characters(blacklist_categories=("Cc", "Cs", "Zl", "Zp")), max_size=12)


@pytest.mark.systemd
@needs_systemd
@SYSTEMD
@given(specs(printable))
def test_systemd_accepts_every_unit_and_reads_it_as_written(spec: units.ServiceSpec) -> None:
    unit = units.systemd_unit(spec)
    try:
        text = unit.render()
    except quote.UnitValueError:
        return
    read_back_unit(text, unit)
    with box() as root:
        done = _verify(text.replace("/usr/bin/python3", shutil.which("python3") or ""), root)
    assert done.returncode == 0, (done.stderr, text)
    unexpected = [ln for ln in done.stderr.splitlines() if "Special user" not in ln]
    assert unexpected == [], (unexpected, text)


@pytest.mark.systemd
@needs_systemd
@SYSTEMD
@given(st.text(st.characters(blacklist_categories=("Cc", "Cs", "Cn", "Zl", "Zp"),
                             blacklist_characters="/\"'\\$"), min_size=1, max_size=16))
def test_systemd_unquotes_a_command_word_as_written(word: str) -> None:
    """The program path is the one value systemd prints back: it must be the word itself.
    (Unassigned code points, "Cn", are left out: the noncharacters among them are refused, by
    design, before anything is written; "." and ".." are path steps systemd resolves.)"""
    assume(word not in (".", ".."))
    program = f"/nonexistent-specctl/{word}"
    text = f"[Service]\nExecStart={quote.systemd_value(quote.Words((program,), 'command'))}\n"
    with box() as root:
        done = _verify(text, root)
    assert f"Command {program} is not executable" in done.stderr, (done.stderr, text)


@pytest.mark.systemd
@SYSTEMD
@given(st.text(st.characters(codec="utf-8", blacklist_characters="-/\x00"), min_size=1,
               max_size=12))
def test_unit_names_escape_as_systemd_escape_does(name: str) -> None:
    tool = shutil.which("systemd-escape")
    if tool is None:
        pytest.skip("systemd-escape is not installed")
    done = subprocess.run([tool, "--", name], capture_output=True, text=True, check=False,
                          env={**os.environ, "LC_ALL": "C.UTF-8"})
    if done.returncode != 0:
        return  # systemd-escape refuses some strings (e.g. invalid UTF-8 in surrogates)
    assert quote.unit_escape(name) == done.stdout.strip()
