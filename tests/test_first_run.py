"""The first five minutes: run a model without a profile, flags over any profile, `profiles new`,
and `up` checking everything before it builds or downloads anything.

The Hub is tests/fake_hf_hub.py (the real `huggingface_hub` client against a stand-in server);
llama.cpp is "not installed" for the preflight tests (an empty cache dir, no llama-server on
PATH), so a build that started would be a build of the real thing: tripwires on the install,
the test-model fetch and the Hub download prove that none began.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from specctl.orchestrator.models.resolve import Resolver
from specctl.orchestrator.runtime import provision
from tests.cli import run_main, specctl
from tests.conftest import HARDWARE
from tests.fake_hf_hub import FakeHub
from tests.hub_repos import build

M3_ULTRA = str(HARDWARE / "macos_m3_ultra_96g.json")
QWEN7 = "hf:bartowski/Qwen2.5-7B-Instruct-GGUF:Q4_K_M"
QWEN72 = "hf:bartowski/Qwen2.5-72B-Instruct-GGUF:Q4_K_M"


@pytest.fixture(scope="module")
def hub_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build(tmp_path_factory.mktemp("hub") / "root")


@pytest.fixture
def hub(hub_root: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[FakeHub]:
    with FakeHub(hub_root) as running:
        monkeypatch.setenv("HF_ENDPOINT", running.url)
        monkeypatch.setenv("HF_HUB_OFFLINE", "0")
        monkeypatch.setenv("SPECCTL_CACHE_DIR", str(tmp_path / "cache"))  # nothing built here
        monkeypatch.setenv("COLUMNS", "200")
        yield running


def plan_of(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
            *args: str) -> dict[str, Any]:
    code, out, err = run_main(monkeypatch, capsys, "plan", *args, "--json")
    assert code == 0, err
    data: dict[str, Any] = json.loads(out)
    return data


def same_but_name(a: dict[str, Any], b: dict[str, Any]) -> None:
    """Two plans alike but for the profile's name (which `-a` also carries)."""
    for plan in (a, b):
        name = plan.pop("profile")
        plan["argv"] = [w if w != name else "NAME" for w in plan["argv"]]
        plan["model"] = None
    assert a == b


def test_a_hub_model_plans_without_a_profile_and_profiles_new_writes_the_same_plan(
        hub: FakeHub, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        tmp_path: Path) -> None:
    flags = ["--port", "9123", "--ctx", "4096", "--backend", "llamacpp"]
    direct = plan_of(monkeypatch, capsys, QWEN7, "--hardware", M3_ULTRA, *flags)
    assert direct["profile"] == "qwen2.5-7b-instruct-q4_k_m"
    argv = direct["argv"]
    slots = int(argv[argv.index("-np") + 1])  # each holds --ctx's 4096 tokens
    assert argv[argv.index("--port") + 1] == "9123" and direct["context"] == 4096
    assert argv[argv.index("-c") + 1] == str(4096 * slots)
    assert direct["draft"] is not None and direct["method"] == "draft"  # draft = auto found one
    assert any(r.startswith('Draft "auto"') for r in direct["reasons"])
    code, out, err = run_main(monkeypatch, capsys, "profiles", "new", "my-qwen", QWEN7, *flags)
    assert code == 0, err
    written = Path(out.strip())
    text = written.read_text()
    assert text.startswith("# written by `specctl profiles new my-qwen") and "port = 9123" in text
    kept = plan_of(monkeypatch, capsys, "-p", "my-qwen", "--hardware", M3_ULTRA)
    same_but_name(direct, kept)
    again, _, err = run_main(monkeypatch, capsys, "profiles", "new", "my-qwen", QWEN7)
    assert again != 0 and "--force" in err and written.read_text() == text


def test_flags_override_a_profile_and_its_environment(monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("SPECCTL_SERVER__PORT", "9555")  # the command line is more specific
    got = plan_of(monkeypatch, capsys, "-p", "cpu-demo", "--port", "9444", "--ctx", "2048",
                  "--draft", "ngram", "--hardware", str(HARDWARE / "linux_cpu_2c_24g.json"))
    argv = got["argv"]
    slots = int(argv[argv.index("-np") + 1])  # each holds --ctx's 2048 tokens
    assert argv[argv.index("--port") + 1] == "9444"
    assert argv[argv.index("-c") + 1] == str(2048 * slots)
    assert got["method"] == "ngram" and got["draft"] is None
    code, out, err = run_main(monkeypatch, capsys, "plan", "-p", "cpu-demo", "--backend", "nope")
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert err.startswith("specctl: error: --backend: ") and "nope" in err


def test_a_bare_org_repo_suggests_hf_in_one_line(monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    for args in (["plan", "bartowski/Qwen2.5-7B-Instruct-GGUF"],
                 ["up", "bartowski/Qwen2.5-7B-Instruct-GGUF"],
                 ["drafts", "--target", "bartowski/Qwen2.5-7B-Instruct-GGUF"]):
        code, out, err = run_main(monkeypatch, capsys, *args)
        assert code != 0 and out == ""
        assert len(err.strip().splitlines()) == 1, err
        assert "did you mean hf:bartowski/Qwen2.5-7B-Instruct-GGUF" in err
        assert "testbed" not in err


def test_model_and_profile_are_one_or_the_other(monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_main(monkeypatch, capsys, "plan")
    assert code == 2 and "hf:ORG/REPO" in err
    code, _, err = run_main(monkeypatch, capsys, "plan", QWEN7, "-p", "cpu-demo")
    assert code == 2 and "not both" in err


def test_the_first_help_example_plans_on_a_fresh_install(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        tmp_path: Path) -> None:
    """`specctl plan -p cpu-demo` with nothing fetched: it plans and says what `up` fetches."""
    monkeypatch.setenv("SPECCTL_CACHE_DIR", str(tmp_path / "empty-cache"))
    code, out, err = run_main(monkeypatch, capsys, "plan", "-p", "cpu-demo")
    assert code == 0, err
    assert "is not fetched yet" in out and "specctl up" in out


# --- up checks before it builds or downloads ---------------------------------------------------


class Tripwire(Exception):
    pass


@pytest.fixture
def tripwires(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Install, test-model fetch and Hub download record that they were reached, and stop."""
    began: list[str] = []

    def tripped(what: str) -> Any:
        def hit(*_a: object, **_k: object) -> None:
            began.append(what)
            raise Tripwire(what)
        return hit

    monkeypatch.setattr(provision, "install", tripped("build"))
    monkeypatch.setattr(provision, "testbed_models", tripped("test models"))
    monkeypatch.setattr(Resolver, "fetch", tripped("download"))
    monkeypatch.setenv("PATH", "/usr/bin:/bin")  # no llama-server: a build would be next
    return began


@pytest.mark.parametrize(("args", "words"), [
    (["hf:bartowski/No-Such-Model-GGUF:Q4_K_M"], ["no Hugging Face repo"]),
    ([QWEN72], ["needs", "GiB", "budget"]),
    (["testbed:qwen-1.5b-q4", "--host", "0.0.0.0", "-p", ""], []),
])
def test_up_fails_in_one_line_before_any_build_or_download(
        hub: FakeHub, tripwires: list[str], monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str], tmp_path: Path, args: list[str],
        words: list[str]) -> None:
    if "-p" in args:  # a missing API key: the profile names a variable that is not set
        monkeypatch.delenv("I27_KEY", raising=False)
        profile = tmp_path / "shared.toml"
        profile.write_text('target = "testbed:qwen-1.5b-q4"\ndraft = "ngram"\n'
                           '[server]\nhost = "0.0.0.0"\napi_key_env = "I27_KEY"\n')
        args, words = ["-p", str(profile)], ["$I27_KEY", "not set", "export"]
    code, out, err = run_main(monkeypatch, capsys, "up", *args, "--yes")
    assert code != 0 and out == "", err
    assert len(err.strip().splitlines()) == 1, err
    assert "Traceback" not in err and all(w in err for w in words), err
    assert tripwires == []
    assert not (tmp_path / "cache" / "backends").exists()
    downloads = [r for r in hub.log if r.method == "GET" and "/resolve/" in r.path
                 and "range" not in r.headers]
    assert downloads == []  # only metadata (ranged header reads) was asked


def test_up_says_what_it_will_build_and_fetch_first(
        hub: FakeHub, tripwires: list[str], monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(Tripwire):
        run_main(monkeypatch, capsys, "up", "-p", "cpu-demo", "--draft", "none")
    assert tripwires == ["build"]  # the first piece of work, after the checks
    said = capsys.readouterr().err
    assert "up will build llama.cpp" in said and "min" in said
    assert "up will fetch the test model qwen-1.5b-f16" in said and "GiB" in said


def test_a_gpu_plan_is_refused_when_the_build_would_be_cpu_only(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from specctl.adapters.llamacpp import LlamaCpp
    from tests.conftest import recorded

    monkeypatch.setenv("PATH", "/usr/bin:/bin")  # no nvcc
    what, problem = LlamaCpp().install_check(recorded("linux_1x_h100_80g"))
    assert "build llama.cpp" in what
    assert problem is not None and "nvcc" in problem and "CUDA toolkit" in problem
    assert LlamaCpp().install_check(recorded("linux_cpu_2c_24g"))[1] is None


def test_subprocess_plan_of_a_model_reference(hub: FakeHub, tmp_path: Path) -> None:
    env = {**os.environ, "NO_COLOR": "1"}
    done = specctl("plan", QWEN7, "--hardware", M3_ULTRA, "--draft", "ngram", "--json", env=env)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["method"] == "ngram"


# --- the acceptance run: a Hub model, no profile, real llama-server ---------------------------


@pytest.mark.server
def test_up_a_hub_model_without_a_profile_serves_with_an_auto_draft(
        hub_root: Path, tmp_path: Path) -> None:
    """Fresh state, cache and Hugging Face cache; the Hub (stand-in) serves the real testbed
    target; a folder of the user's GGUFs (SPECCTL_MODELS_DIRS) holds the 0.5B of its family,
    which draft = "auto" finds. `up` pulls the target, serves with the draft, `down` stops it."""
    import httpx

    from specctl.adapters.llamacpp import LlamaCpp
    from specctl.orchestrator.contract.dirs import Dirs
    from specctl.orchestrator.models import testbed
    from specctl.orchestrator.runtime.servers import free_port
    from tests.cli import run_state
    from tests.hub_repos import add_file

    shared = Dirs.from_env()
    server = LlamaCpp.create(shared).locate()
    target = testbed.path_of("qwen-1.5b-q4", shared.models)
    if server is None or not target.is_file():
        pytest.fail("needs the llama.cpp build and the testbed models (specctl backend install "
                    "llama.cpp; specctl models testbed)")
    add_file(hub_root, "Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF", target, target.name)
    port = free_port()
    with FakeHub(hub_root) as running:
        env = {**os.environ, **running.env(), "HF_HUB_OFFLINE": "0",
               "HF_HOME": str(tmp_path / "hf-home"), "SPECCTL_CACHE_DIR": str(tmp_path / "cache"),
               "SPECCTL_STATE_DIR": str(tmp_path / "state"),
               "SPECCTL_CONFIG_DIR": str(tmp_path / "config"), "SPECCTL_LLAMA_SERVER": str(server),
               "SPECCTL_MODELS_DIRS": str(testbed.testbed_dir(shared.models)), "NO_COLOR": "1"}
        ref = "hf:Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF"
        try:
            done = specctl("up", ref, "--port", str(port), "--ctx", "1024", env=env)
            assert done.returncode == 0, done.stderr
            url = done.stdout.strip()
            assert url == f"http://127.0.0.1:{port}/v1"  # stdout: the URL alone
            assert "pulling hf:Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF" in done.stderr
            plan = run_state(env, "qwen2.5-coder-1.5b-instruct")["plan"]
            draft = testbed.path_of("qwen-0.5b-q4", shared.models)
            assert plan["draft"]["path"] == str(draft)  # the 0.5B of its family, found by auto
            assert any(r.startswith('Draft "auto"') for r in plan["reasons"])
            reply = httpx.post(f"{url}/chat/completions", timeout=600, json={
                "messages": [{"role": "user", "content": "Count from 1 to 20."}],
                "max_tokens": 12, "temperature": 0}).json()
            assert reply.get("timings", {}).get("draft_n", 0) > 0, reply  # the auto draft's
        finally:
            down = specctl("down", "--all", env=env)
        assert down.returncode == 0 and "stopped" in down.stdout


# --- every shipped profile plans on its recorded machine, offline, with an empty cache ----------

RECORDED = {"cpu-demo": "linux_cpu_2c_24g", "cpu-demo-q4": "linux_cpu_2c_24g",
            "cuda-h100-llama70b": "linux_1x_h100_80g", "cuda-h100-tgi-medusa": "linux_1x_h100_80g",
            "cuda-rtx4090-qwen-coder": "linux_1x_rtx4090_24g",
            "dgx2-deepseek-r1": "linux_8x_h200_141g", "m3-ultra-70b": "macos_m3_ultra_96g",
            "m3-ultra-70b-mlx": "macos_m3_ultra_96g"}


def test_every_shipped_profile_has_a_recorded_machine() -> None:
    from specctl.orchestrator.config.profiles import shipped_dir

    assert set(RECORDED) == {p.stem for p in shipped_dir().glob("*.toml")}


@pytest.mark.parametrize("name", sorted(RECORDED))
def test_a_shipped_profile_plans_with_no_network_and_an_empty_cache(name: str,
                                                                    tmp_path: Path) -> None:
    from specctl.orchestrator.runtime.servers import free_port

    base = {**os.environ, "SPECCTL_CACHE_DIR": str(tmp_path / "cache"),
            "HF_HOME": str(tmp_path / "hf"), "NO_COLOR": "1"}
    hardware = str(HARDWARE / f"{RECORDED[name]}.json")
    for env in ({**base, "HF_HUB_OFFLINE": "1"},  # offline mode, and a network that is down
                {**base, "HF_HUB_OFFLINE": "0", "HF_ENDPOINT": f"http://127.0.0.1:{free_port()}"}):
        done = specctl("plan", "-p", name, "--hardware", hardware, "--json", env=env)
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["argv"]
        assert "Retry" not in done.stderr


# --- every command's --help has an example that works on a fresh install ------------------------

# examples that build, download, serve or need a run first: checked by their own tests
NOT_RUN_HERE = {"up", "gateway", "bench", "logs", "worker up", "worker down", "service uninstall",
                "service status", "backend install", "models pull", "models rm",
                "models testbed"}


def _commands() -> list[tuple[str, Any]]:
    import click

    from specctl.orchestrator.cli.base import cli
    from specctl.orchestrator.cli.main import load

    load(None)  # every command registered (the command line loads one as it runs)

    def walk(cmd: Any, path: list[str]) -> Any:
        if isinstance(cmd, click.Group):
            for name, sub in cmd.commands.items():
                yield from walk(sub, [*path, name])
        else:
            yield " ".join(path), cmd

    return list(walk(cli, []))


@pytest.mark.parametrize(("name", "cmd"), _commands(), ids=lambda v: v if isinstance(v, str)
                         else "")
def test_every_help_has_an_example_that_works_on_a_fresh_install(
        name: str, cmd: Any, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    import shlex

    import click

    text = cmd.get_help(click.Context(cmd, info_name=name))
    examples = [line.strip() for line in text.splitlines() if line.strip().startswith("specctl ")]
    assert examples, f"`specctl {name} --help` has no example"
    if name in NOT_RUN_HERE:
        return
    monkeypatch.setenv("SPECCTL_CACHE_DIR", str(tmp_path / "fresh-cache"))
    words = shlex.split(examples[0].split("  (")[0].split("   ")[0])[1:]
    code, _, err = run_main(monkeypatch, capsys, *words)
    assert code == 0, f"{examples[0]}: {err}"


# --- README's "Use it with": the openai client snippet against a real `up` ---------------------


def readme_snippet() -> str:
    text = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    section = text[text.index("## Use it with"):]
    return section[section.index("```python\n") + 10:section.index("\n```", section.index(
        "```python\n"))]


def test_the_readme_snippet_is_the_documented_one() -> None:
    code = readme_snippet()
    assert 'base_url="http://127.0.0.1:8090/v1"' in code and 'model="cpu-demo"' in code
    compile(code, "README.md", "exec")


@pytest.mark.server
def test_the_readme_openai_snippet_works_against_a_real_up(tmp_path: Path) -> None:
    """The snippet as README prints it, pointed at a real `up` (its port and model name)."""
    import subprocess
    import sys

    from specctl.orchestrator.runtime.servers import free_port

    port = free_port()
    profile = tmp_path / "snippet.toml"
    profile.write_text('target = "testbed:smollm2-135m"\ndraft = "testbed:smollm2-135m"\n'
                       f'k = 3\n[server]\ncontext = 1024\nport = {port}\n')
    env = {**os.environ, "NO_COLOR": "1"}
    try:
        done = specctl("up", "-p", str(profile), "--no-provision", env=env)
        assert done.returncode == 0, done.stderr
        code = readme_snippet().replace("127.0.0.1:8090", f"127.0.0.1:{port}").replace(
            'model="cpu-demo"', 'model="snippet"')
        ran = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             timeout=300, check=False)
        assert ran.returncode == 0, ran.stderr
        assert ran.stdout.strip()
    finally:
        specctl("down", "snippet", env=env)


def test_up_asks_in_a_terminal_and_no_stops_before_any_work(tmp_path: Path) -> None:
    """In a terminal `up` says what it will build and fetch and asks; "n" stops it (exit 130)
    with nothing built or fetched."""
    import pty
    import select
    import signal
    import subprocess
    import sys
    import time

    env = {**os.environ, "SPECCTL_CACHE_DIR": str(tmp_path / "cache"), "PATH": "/usr/bin:/bin",
           "NO_COLOR": "1", "TERM": "dumb", "COLUMNS": "200"}
    leader, follower = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "specctl", "up", "-p", "cpu-demo"],
                            stdin=follower, stdout=follower, stderr=follower, env=env,
                            start_new_session=True)
    os.close(follower)
    seen, deadline = b"", time.monotonic() + 60
    try:
        while b"go ahead?" not in seen and time.monotonic() < deadline:
            if select.select([leader], [], [], 1)[0]:
                try:
                    seen += os.read(leader, 4096)
                except OSError:
                    break
        assert b"go ahead?" in seen, seen.decode(errors="replace")
        os.write(leader, b"n\n")
        assert proc.wait(timeout=30) == 130
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        os.close(leader)
    text = seen.decode(errors="replace")
    assert "up will build llama.cpp" in text and "up will fetch the test model" in text
    assert not (tmp_path / "cache" / "backends").exists()
    assert not (tmp_path / "cache" / "models").exists()


@pytest.mark.server  # needs the llama.cpp build (`specctl backend install llamacpp`)
def test_a_llama_server_on_path_is_used_instead_of_a_build(tmp_path: Path) -> None:
    """A distro's or Homebrew's llama-server on PATH (here: a link to the real build) is the
    engine: `backend list` finds it, `plan` reads its dialect and names it, and `up` lists no
    build. Without it (and an empty cache), the same plan is made on the recorded dialect and
    `up --no-provision` refuses, saying to install."""
    from specctl.adapters.llamacpp import LlamaCpp
    from specctl.orchestrator.contract.dirs import Dirs

    real = LlamaCpp.create(Dirs.from_env()).locate()
    if real is None:
        pytest.fail("needs the llama.cpp build (specctl backend install llamacpp)")
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "llama-server").symlink_to(real)
    base = {**os.environ, "NO_COLOR": "1", "SPECCTL_CACHE_DIR": str(tmp_path / "empty-cache"),
            "SPECCTL_STATE_DIR": str(tmp_path / "state")}
    base.pop("SPECCTL_LLAMA_SERVER", None)
    bare_path = os.pathsep.join(p for p in base.get("PATH", "").split(os.pathsep)
                                if not (Path(p) / "llama-server").exists())
    with_it = {**base, "PATH": f"{bindir}{os.pathsep}{bare_path}"}
    without = {**base, "PATH": bare_path}

    listed = specctl("backend", "list", "--json", env=with_it)
    assert listed.returncode == 0, listed.stderr
    row = next(r for r in json.loads(listed.stdout) if r["name"] == "llamacpp")
    assert row["installed"] and row["path"] == str(bindir / "llama-server")

    planned = {}
    for name, env in (("with", with_it), ("without", without)):
        done = specctl("plan", "-p", "cpu-demo", "--json", env=env)
        assert done.returncode == 0, done.stderr
        planned[name] = json.loads(done.stdout)
    assert planned["with"]["engine"] == str(bindir / "llama-server")
    assert planned["without"]["engine"] is None  # the recorded dialect, nothing installed

    refused = specctl("up", "-p", "cpu-demo", "--no-provision", env=without)
    assert refused.returncode != 0 and "install" in refused.stderr
