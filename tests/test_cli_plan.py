"""The real CLI: `plan`, `profiles`, `doctor` in a subprocess; error mapping in-process too."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from specctl.orchestrator.config.profiles import shipped_dir
from specctl.orchestrator.contract.dirs import Dirs
from specctl.orchestrator.contract.registry import adapter_classes
from tests.cli import run_main
from tests.conftest import HARDWARE

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = sorted(p.stem for p in shipped_dir().glob("*.toml"))
OVERRIDES = ("K", "DRAFT", "TARGET", "BACKEND", "SERVER__PORT", "SERVER__HOST")


@pytest.fixture(scope="module", autouse=True)
def doctor(tmp_path_factory: pytest.TempPathFactory) -> Iterator[subprocess.Popen[str]]:
    """`specctl doctor` on this machine, started first and in the background: it plans every
    profile here and hashes the testbed models (seconds), while the other tests run."""
    home = tmp_path_factory.mktemp("doctor")
    env = {**os.environ, "SPECCTL_CONFIG_DIR": str(home / "config"),
           "SPECCTL_STATE_DIR": str(home / "state"), "COLUMNS": "200",
           "HF_HUB_CACHE": str(home / "hub"), "NO_COLOR": "1"}
    for key in [k for k in env if k.startswith("SPECCTL_") and k[8:] in OVERRIDES]:
        del env[key]
    proc = subprocess.Popen([sys.executable, "-m", "specctl", "doctor"], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    yield proc
    if proc.poll() is None:
        proc.kill()
        proc.communicate()


def specctl(*args: str, hub: Path) -> subprocess.CompletedProcess[str]:
    # os.environ carries the isolated SPECCTL_* dirs of the autouse fixture; a wide console keeps
    # rich from wrapping, and an empty HF cache keeps the user's downloads out of the plan.
    env = {**os.environ, "COLUMNS": "200", "HF_HUB_CACHE": str(hub), "NO_COLOR": "1"}
    return subprocess.run([sys.executable, "-m", "specctl", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60, check=False)


def plan_json(profile: str, machine: str, hub: Path) -> dict[str, Any]:
    done = specctl("plan", "--profile", profile, "--hardware",
                   f"tests/fixtures/hardware/{machine}.json", "--json", hub=hub)
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert isinstance(data, dict)
    return data


def one_line_error(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode != 0
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert done.stdout == ""
    return lines[0]


def test_plan_m3_ultra_70b(tmp_path: Path) -> None:
    data = plan_json("m3-ultra-70b", "macos_m3_ultra_96g", tmp_path)
    for key in ("backend", "target", "draft", "k", "argv", "memory", "reasons"):
        assert key in data
    assert data["backend"] == "llamacpp"
    argv = data["argv"]
    assert "-md" in argv or "-hfd" in argv
    assert argv[argv.index("--spec-type") + 1] == "draft-simple"
    assert argv[argv.index("--spec-draft-n-max") + 1] == str(data["k"])
    assert "--draft-max" not in argv
    assert 40 <= data["memory"]["total_gib"] <= 55
    assert data["memory"]["budget_gib"] == 72.0
    assert data["memory"]["budget_bytes"] == 72 << 30 and data["memory"]["fits"] is True
    assert not [k for k in data["memory"] if k.endswith("_gb")]  # every figure says its unit
    assert data["target"]["name"] == "Llama-3.1-70B-Instruct"
    assert data["draft"]["name"] == "Llama-3.2-1B-Instruct"
    assert isinstance(data["k"], int) and data["k"] >= 1
    assert len(data["reasons"]) >= 3


def test_plan_m3_ultra_70b_on_a_small_cpu_box_fails_in_one_line(tmp_path: Path) -> None:
    done = specctl("plan", "--profile", "m3-ultra-70b", "--hardware",
                   str(HARDWARE / "linux_cpu_2c_24g.json"), "--json", hub=tmp_path)
    line = one_line_error(done)
    assert line.startswith("specctl: error: ")
    assert len(re.findall(r"\d+(?:\.\d+)? GiB", line)) >= 2
    assert not re.findall(r"\d+(?:\.\d+)? GB", line)  # one unit
    numbers = re.search(r"needs ([\d.]+) GiB .* budget is ([\d.]+) GiB", line)
    assert numbers is not None, line
    assert float(numbers.group(1)) > float(numbers.group(2))


def test_plan_cuda_h100_llama70b(tmp_path: Path) -> None:
    data = plan_json("cuda-h100-llama70b", "linux_1x_h100_80g", tmp_path)
    assert data["backend"] == "vllm"
    argv = data["argv"]
    assert argv[:2] == ["vllm", "serve"]
    spec = json.loads(argv[argv.index("--speculative-config") + 1])
    assert spec["method"] == "draft_model"
    assert spec["num_speculative_tokens"] == data["k"]
    assert spec["model"] == "meta-llama/Llama-3.2-1B-Instruct"
    assert argv[argv.index("--gpu-memory-utilization") + 1] == "0.9"
    assert argv[argv.index("--max-model-len") + 1] == "16384"
    assert data["memory"]["device_bytes"] <= data["memory"]["budget_bytes"]


def test_profile_file_with_a_typo(tmp_path: Path) -> None:
    path = tmp_path / "typo.toml"
    path.write_text('target = "testbed:qwen-1.5b-q4"\nbackend = ["llamacpp"]\n'
                    "[server]\nprot = 8080\n")
    done = specctl("plan", "--profile", str(path), "--hardware",
                   str(HARDWARE / "linux_cpu_2c_24g.json"), hub=tmp_path)
    line = one_line_error(done)
    assert done.returncode == 2
    assert "server.prot" in line
    assert str(path) in line


def test_profiles_lists_all_shipped(tmp_path: Path) -> None:
    assert len(SHIPPED) >= 5
    done = specctl("profiles", hub=tmp_path)
    assert done.returncode == 0, done.stderr
    for name in SHIPPED:
        assert name in done.stdout
    assert "invalid" not in done.stdout


def test_profiles_show_cpu_demo(tmp_path: Path) -> None:
    done = specctl("profiles", "show", "cpu-demo", hub=tmp_path)
    assert done.returncode == 0, done.stderr
    assert str(shipped_dir() / "cpu-demo.toml") in done.stdout
    assert 'target = "testbed:qwen-1.5b-f16"' in done.stdout
    shown = specctl("profiles", "show", "cpu-demo", "--json", hub=tmp_path)
    resolved = json.loads(shown.stdout)["resolved"]
    assert resolved["name"] == "cpu-demo"
    assert resolved["server"]["port"] == 8090
    assert resolved["server"]["host"] == "127.0.0.1"


def test_doctor(doctor: subprocess.Popen[str]) -> None:
    out, err = doctor.communicate(timeout=120)
    assert doctor.returncode == 0, err
    assert "Traceback" not in err
    assert out.startswith("machine")
    lines = out.splitlines()
    for backend in ("llamacpp", "vllm", "ollama"):
        line = next(x for x in lines if x.startswith(backend))
        if "not found" in line:  # the install hint is printed verbatim, not eaten as markup
            assert adapter_classes()[backend].install_hint in line


# --- in process (same main(), no interpreter start-up) ----------------------------------------


def test_plan_human_readable(monkeypatch: pytest.MonkeyPatch,
                             capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    code, out, err = run_main(monkeypatch, capsys, "plan", "-p", "m3-ultra-70b", "--hardware",
                              str(HARDWARE / "macos_m3_ultra_96g.json"))
    assert code == 0, err
    for word in ("m3-ultra-70b", "llamacpp", "argv", "why", "--spec-type draft-simple",
                 "Metal working-set limit"):
        assert word in out


def test_unknown_profile_name(monkeypatch: pytest.MonkeyPatch,
                              capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_main(monkeypatch, capsys, "plan", "--profile", "no-such-profile")
    assert code == 2  # ProfileError
    assert out == ""
    assert err.strip() == ("specctl: error: no profile named 'no-such-profile' "
                           "(`specctl profiles` lists them)")


def test_missing_hardware_file(monkeypatch: pytest.MonkeyPatch,
                               capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    missing = tmp_path / "nowhere.json"
    code, _, err = run_main(monkeypatch, capsys, "plan", "-p", "m3-ultra-70b", "--hardware",
                            str(missing))
    assert code == 2  # a file named on the command line that is not there: bad input
    assert len(err.strip().splitlines()) == 1
    assert str(missing) in err


def test_profiles_marks_user_profiles(monkeypatch: pytest.MonkeyPatch,
                                      capsys: pytest.CaptureFixture[str],
                                      isolated_dirs: Dirs) -> None:
    isolated_dirs.profiles.mkdir(parents=True)
    (isolated_dirs.profiles / "my-box.toml").write_text('description = "my own box"\n'
                                                        'target = "hf:org/model"\n')
    code, out, err = run_main(monkeypatch, capsys, "profiles")
    assert code == 0, err
    row = next(line for line in out.splitlines() if "my-box" in line)
    assert "my own box" in row
    assert "user" in row
    assert all(name in out for name in SHIPPED)


def test_profiles_show_applies_env_overrides(monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("SPECCTL_SERVER__PORT", "9123")
    code, out, err = run_main(monkeypatch, capsys, "profiles", "show", "cpu-demo")
    assert code == 0, err
    assert "port = 8090" in out and "# port = 9123" in out  # the file as written, resolved
    code, out, err = run_main(monkeypatch, capsys, "profiles", "show", "cpu-demo", "--json")
    assert json.loads(out)["resolved"]["server"]["port"] == 9123


def test_doctor_records_a_recorded_machine(monkeypatch: pytest.MonkeyPatch,
                                           capsys: pytest.CaptureFixture[str],
                                           tmp_path: Path) -> None:
    out_file = tmp_path / "me.json"
    code, out, err = run_main(monkeypatch, capsys, "doctor", "--hardware",
                              str(HARDWARE / "linux_1x_h100_80g.json"), "--record",
                              str(out_file))
    assert code == 0, err
    assert "NVIDIA H100 80GB HBM3" in out
    assert json.loads(out_file.read_text()) == json.loads(
        (HARDWARE / "linux_1x_h100_80g.json").read_text())
