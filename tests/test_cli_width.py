"""80 columns: every line the command line writes fits (tables excepted where they cannot wrap;
error lines stay one line). `plan` for the shipped profiles on recorded machines and every
`--help` of every command, at COLUMNS=80; argv printed as shell lines that a real shell reads
back as the same arguments.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
from collections.abc import Iterator
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from specctl.orchestrator.cli import main, wrap
from specctl.orchestrator.cli.base import cli
from tests.cli import specctl
from tests.conftest import HARDWARE
from tests.ggufs import write_gguf

WIDTH = 80
SHIPPED = [("cpu-demo", "linux_cpu_2c_24g"), ("cpu-demo-q4", "linux_cpu_2c_24g"),
           ("cuda-h100-llama70b", "linux_1x_h100_80g"),
           ("cuda-h100-tgi-medusa", "linux_1x_h100_80g"),
           ("cuda-rtx4090-qwen-coder", "linux_1x_rtx4090_24g"),
           ("dgx2-deepseek-r1", "linux_8x_h200_141g"),
           ("m3-ultra-70b", "macos_m3_ultra_96g"), ("m3-ultra-70b-mlx", "macos_m3_ultra_96g")]


def too_wide(text: str, width: int = WIDTH) -> list[str]:
    return [line for line in text.splitlines() if len(line) > width]


def env80() -> dict[str, str]:
    return {**os.environ, "COLUMNS": str(WIDTH), "NO_COLOR": "1"}


@pytest.mark.parametrize(("profile", "machine"), SHIPPED)
def test_plan_of_a_shipped_profile_fits_80_columns(profile: str, machine: str) -> None:
    done = specctl("plan", "-p", profile, "--hardware", str(HARDWARE / f"{machine}.json"),
                   env=env80())
    assert done.returncode == 0, done.stderr
    assert "why" in done.stdout and "argv" in done.stdout
    assert too_wide(done.stdout + done.stderr) == []


def _argv_block(text: str) -> str:
    return text.split("\nargv\n", 1)[1].split("\n\nwhy\n", 1)[0]


def test_plan_with_long_paths_fits_and_its_argv_pastes_back(tmp_path: Path) -> None:
    """A model file deep in folders: the paths break at '/' in prose, and the argv lines (cut
    inside the path) are read by sh as exactly the plan's argv."""
    deep = tmp_path.joinpath(*(["a-rather-long-folder-name"] * 4))
    deep.mkdir(parents=True)
    target = write_gguf(deep / ("target-model-with-a-long-name-" + "x" * 40 + ".gguf"))
    args = ("plan", str(target), "--draft", "ngram", "--ctx", "4096", "--hardware",
            str(HARDWARE / "linux_cpu_2c_24g.json"))
    done = specctl(*args, env=env80())
    assert done.returncode == 0, done.stderr
    assert too_wide(done.stdout) == []
    argv = json.loads(specctl(*args, "--json", env=env80()).stdout)["argv"]
    assert str(target) in argv and len(str(target)) > WIDTH
    block = _argv_block(done.stdout)
    assert len(block.splitlines()) > 1
    read = subprocess.run(["sh", "-c", "printf '%s\\n' " + block], capture_output=True,
                          text=True, check=True).stdout.splitlines()
    assert read == argv


def _commands(cmd: click.Command, path: list[str]) -> Iterator[list[str]]:
    yield path
    if isinstance(cmd, click.Group):
        for name, sub in cmd.commands.items():
            yield from _commands(sub, [*path, name])


def test_every_help_fits_80_columns() -> None:
    main.load(None)  # every command registered (the command line loads one as it runs)
    paths = list(_commands(cli, []))
    assert len(paths) > 20  # the whole tree: groups and their subcommands
    runner = CliRunner()
    for path in paths:
        done = runner.invoke(cli, [*path, "--help"], env={"COLUMNS": str(WIDTH)})
        assert done.exit_code == 0, (path, done.output)
        assert too_wide(done.output) == [], path


def test_help_wraps_a_preformatted_line_under_its_own_column() -> None:
    line = "  specctl plan -p cpu-demo        the resolved plan: backend, draft, k, memory, argv"
    out = wrap.preformatted(line, 60)
    assert all(len(o) <= 60 for o in out) and len(out) > 1
    assert out[0].startswith("  specctl plan -p cpu-demo        the resolved plan")
    assert all(o.startswith(" " * 34) for o in out[1:])  # under the description's column
    long = "  specctl profiles new coder hf:Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF:Q4_K_M --port 9"
    assert all(len(o) <= 60 for o in wrap.preformatted(long, 60))
    assert wrap.preformatted("  short  line", 60) == ["  short  line"]


def test_prose_breaks_a_path_longer_than_the_line_after_a_slash() -> None:
    path = "/root/.cache/specctl/backends/llama.cpp/0.3.36-cpu-x86_64-de624145/bin/llama-server"
    lines = wrap.prose(f"llamacpp 0.5.0 (spec-type dialect; {path})", 50, "backend ", " " * 8)
    assert all(len(line) <= 50 for line in lines)
    assert lines[0] == "backend llamacpp 0.5.0 (spec-type dialect;"
    assert lines[1].endswith("/")  # cut after a '/', not in a name
    assert "".join(line.strip() for line in lines[1:]) == path + ")"


@pytest.mark.parametrize("width", [30, 50, 80])
def test_shell_lines_fit_and_read_back_as_the_same_arguments(width: int) -> None:
    rng = random.Random(width)
    alphabet = "abcXYZ019/._-=:,+ '\"$`\\!*?[]{}()&;|<>#~%@^"
    for _ in range(60):
        argv = ["".join(rng.choice(alphabet) for _ in range(rng.choice([0, 1, 5, 20, 90])))
                for _ in range(rng.randint(1, 8))]
        lines = wrap.shell(argv, width)
        assert all(len(line) <= width for line in lines), lines
        script = "set -- " + "\n".join(lines) + '\nfor a in "$@"; do printf "%s\\0" "$a"; done'
        out = subprocess.run(["sh", "-c", script], capture_output=True, text=True, check=True)
        assert out.stdout.split("\0")[:-1] == argv, lines
