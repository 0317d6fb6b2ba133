"""The generated unit lets the service write where it writes, and only there.

The service's commands run under the unit's own read-only/writable split, applied by bubblewrap
(`bwrap`, Debian's bubblewrap package) from the unit's directives: ProtectSystem=strict and
ProtectHome=read-only (everything read-only), PrivateTmp=yes (a private /tmp), ReadWritePaths=
(bound writable), and BindReadOnlyPaths= and BindPaths= (the host's folders under /tmp the
service uses, bound into its private /tmp: an install in a checkout under /tmp). A Hub lookup
and a pull through the real huggingface_hub client, and writes into vLLM's and Triton's compile
caches, succeed; a write outside gives the exact EROFS line.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from specctl.orchestrator.errors import ReadOnlyError
from tests.cli import ROOT, specctl
from tests.conftest import HARDWARE
from tests.fake_hf_hub import FakeHub
from tests.hub_repos import add_file, build

BWRAP = shutil.which("bwrap")
pytestmark = pytest.mark.skipif(BWRAP is None, reason="bubblewrap is not installed "
                                "(apt-get install bubblewrap; .ci/run does)")
PROFILE = "either"  # vLLM where it runs, llama.cpp here: vLLM's compile caches are declared too
EITHER = ('target = "hf:bartowski/Qwen2.5-7B-Instruct-GGUF:Q4_K_M"\n'
          'draft = "hf:bartowski/Qwen2.5-0.5B-Instruct-GGUF:Q8_0"\nk = 4\n'
          'backend = ["vllm", "llamacpp"]\n')
SEED = ('target = "hf:bartowski/Qwen2.5-72B-Instruct-GGUF:Q4_K_M"\n'
        'draft = "hf:bartowski/Qwen2.5-7B-Instruct-GGUF:Q4_K_M"\nk = 4\n')
REPO = "bartowski/Qwen2.5-7B-Instruct-GGUF"


def sandbox(unit: str) -> list[str]:
    """bwrap arguments giving a command the unit's file-system view."""
    service = dict(ln.split("=", 1) for ln in unit.split("[Service]")[1].split("[Install]")[0]
                   .splitlines() if "=" in ln)
    assert service["ProtectSystem"] == "strict" and service["ProtectHome"] == "read-only"
    argv = [str(BWRAP), "--die-with-parent", "--ro-bind", "/", "/", "--dev", "/dev",
            "--proc", "/proc"]
    if service.get("PrivateTmp") == "yes":
        argv += ["--tmpfs", "/tmp", "--tmpfs", "/var/tmp"]
    mounts = [(word, writable) for key, writable in (("ReadWritePaths", True),
                                                     ("BindReadOnlyPaths", False),
                                                     ("BindPaths", True))
              for word in service.get(key, "").split()]
    # systemd mounts in path order (a folder before what lies in it), each bind from the host
    for word, writable in sorted(mounts, key=lambda m: len(Path(m[0].lstrip("-")).parts)):
        path = word.removeprefix("-")  # "-": a missing path is no error (bind-try)
        kind = ("--bind" if writable else "--ro-bind") + ("-try" if word.startswith("-") else "")
        argv += [kind, path, path]
    return [*argv, "--"]


@pytest.fixture
def home() -> Iterator[Path]:
    """A user's home under /home (not /tmp: PrivateTmp would hide it from the service)."""
    path = Path(tempfile.mkdtemp(prefix="specctl-sandbox-", dir="/home"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def hub(tmp_path: Path) -> Iterator[FakeHub]:
    root = build(tmp_path / "hub")
    readme = tmp_path / "README.md"
    readme.write_text("a small file the service pulls\n")
    add_file(root, REPO, readme, "README.md")
    with FakeHub(root) as running:
        yield running


def service_env(home: Path, hub: FakeHub) -> dict[str, str]:
    keep = {k: v for k, v in os.environ.items()
            if not k.startswith(("SPECCTL_", "HF_", "XDG_", "VLLM_", "TRITON_"))}
    return {**keep, "HOME": str(home), "HF_ENDPOINT": hub.url, "HF_HUB_OFFLINE": "0",
            "HF_HUB_DISABLE_TELEMETRY": "1", "NO_COLOR": "1", "COLUMNS": "300",
            "SPECCTL_CONFIG_DIR": str(home / ".config/specctl")}


def installed(env: dict[str, str]) -> str:
    """The unit of a profile that may run on vLLM (planned here, where it runs on llama.cpp:
    `service install` refuses what would not run on this machine)."""
    profile = Path(env["SPECCTL_CONFIG_DIR"]) / "profiles" / f"{PROFILE}.toml"
    profile.parent.mkdir(parents=True, exist_ok=True)
    profile.write_text(EITHER)
    done = specctl("service", "install", "--profile", PROFILE, "--manager", "systemd", env=env)
    assert done.returncode == 0, done.stderr
    return (Path(env["HOME"]) / f".config/systemd/user/specctl-{PROFILE}.service").read_text()


def hardware(home: Path) -> Path:
    """The machine file the commands plan for, in the user's home: the checkout's fixtures may
    lie under /tmp, which the unit's private /tmp hides (as it would a user's own file there)."""
    path = home / "macos_m3_ultra_96g.json"
    shutil.copyfile(HARDWARE / path.name, path)
    return path


def run(argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, env=env, cwd=ROOT, capture_output=True, text=True, timeout=300,
                          check=False)


def test_the_service_writes_its_caches_and_pulls_under_the_units_sandbox(
        home: Path, hub: FakeHub) -> None:
    env = service_env(home, hub)
    box = sandbox(installed(env))
    profile = home / ".config/specctl/profiles/seed.toml"
    profile.parent.mkdir(parents=True, exist_ok=True)
    profile.write_text(SEED)
    done = run([*box, sys.executable, "-m", "specctl", "plan", "--profile", "seed",
                "--hardware", str(hardware(home))], env)
    assert done.returncode == 0, done.stderr
    assert list((home / ".cache/specctl/hub").rglob("repo.json"))  # Hub metadata cached
    pull = ("from huggingface_hub import hf_hub_download as get; "
            f"print(get({REPO!r}, 'README.md'))")
    done = run([*box, sys.executable, "-c", pull], env)
    assert done.returncode == 0, done.stderr
    pulled = Path(done.stdout.strip())
    assert pulled.is_relative_to(home / ".cache/huggingface") and pulled.read_text()
    caches = [home / ".cache/vllm/torch_compile_cache/x", home / ".triton/cache/x",
              home / ".config/vllm/usage_stats.json"]
    write = ("import sys, pathlib\nfor p in map(pathlib.Path, sys.argv[1:]):\n"
             "    p.parent.mkdir(parents=True, exist_ok=True)\n    p.write_text('ok')")
    done = run([*box, sys.executable, "-c", write, *map(str, caches)], env)
    assert done.returncode == 0, done.stderr
    assert all(p.read_text() == "ok" for p in caches)


def test_a_write_outside_the_writable_paths_says_which_setting(home: Path,
                                                                hub: FakeHub) -> None:
    env = service_env(home, hub)
    box = sandbox(installed(env))
    elsewhere = home / "elsewhere"  # exists, but not in ReadWritePaths=
    elsewhere.mkdir()
    profile = home / ".config/specctl/profiles/seed.toml"
    profile.parent.mkdir(parents=True, exist_ok=True)
    profile.write_text(SEED)
    done = run([*box, sys.executable, "-m", "specctl", "plan", "--profile", "seed",
                "--hardware", str(hardware(home))],
               {**env, "SPECCTL_CACHE_DIR": str(elsewhere)})
    assert done.returncode == 1
    assert done.stderr.strip() == f"specctl: error: {ReadOnlyError(elsewhere / 'hub')}"
    assert "ReadWritePaths=" in done.stderr and "free some space" not in done.stderr
    assert not list(elsewhere.iterdir())
