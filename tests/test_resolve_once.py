"""Each command resolves its plan once: one backend choice, one read of the measured winners,
one memory budget; and what `up` hands to the supervisor is that plan, unamended.

The real functions are wrapped (monkeypatch) to count their calls; they still do their work.
In-process through click's CliRunner. No server starts: `up`'s supervisor is replaced by a
recorder (as in tests/test_up_once.py), and `bench` and `tune` stop where they would start their
first server process (`Server.spawn`), after resolving."""

from __future__ import annotations

import inspect
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from huggingface_hub import constants as hf_constants

import specctl.orchestrator.cli.main  # noqa: F401 (importing it registers the commands)
from specctl.orchestrator import runs
from specctl.orchestrator.app import App
from specctl.orchestrator.cli.base import cli
from specctl.orchestrator.contract import registry
from specctl.orchestrator.contract.launch import Installed
from specctl.orchestrator.contract.plan import Plan, plan_json
from specctl.orchestrator.measure.results import tuned, winners
from specctl.orchestrator.planning import backends, memory, planner
from specctl.orchestrator.runtime import handoff
from specctl.orchestrator.runtime.server import Server
from specctl.orchestrator.runtime.servers import free_port
from tests.fake_hf_hub import FakeHub
from tests.ggufs import write_gguf
from tests.hub_repos import add_file


class Launched(BaseException):
    """Raised where a server process would start: the command got past resolving."""


class Counts:
    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls: Counter[str] = Counter()
        self.plans: list[tuple[Plan, Installed]] = []
        self.served: list[handoff.Ready] = []
        self.spawned: list[list[str]] = []
        self.planning = 0  # > 0 while one of the planner's stages runs
        self._count(monkeypatch, backends, "choose")
        self._count(monkeypatch, winners, "load")
        self._count(monkeypatch, memory, "budget_for")
        self._count(monkeypatch, tuned, "load", "saved tune")
        for stage in ("choose", "build", "finish"):
            self._stage(monkeypatch, stage)
        self._watch_app(monkeypatch)

        def serve(_app: Any, ready: handoff.Ready, _say: Any, **_k: Any) -> int:
            self.served.append(ready)
            return 0

        def spawn(_cls: Any, argv: list[str], *_a: Any, **_k: Any) -> None:
            self.spawned.append(list(argv))
            raise Launched

        monkeypatch.setattr(runs, "serve_foreground", serve)
        monkeypatch.setattr(Server, "spawn", classmethod(spawn))

    def _count(self, monkeypatch: pytest.MonkeyPatch, module: object, name: str,
               label: str = "") -> None:
        real = getattr(module, name)

        def counted(*args: Any, **kw: Any) -> Any:
            self.calls[label or name] += 1
            return real(*args, **kw)

        monkeypatch.setattr(module, name, counted)

    def _stage(self, monkeypatch: pytest.MonkeyPatch, name: str) -> None:
        """A planner stage, counted; the plan it finishes recorded with its build."""
        real = getattr(planner, name)

        def staged(*args: Any, **kw: Any) -> Any:
            self.calls[f"planner.{name}"] += 1
            self.planning += 1
            try:
                found = real(*args, **kw)
            finally:
                self.planning -= 1
            if name == "finish":
                self.plans.append((found, args[0].installed))
            return found

        monkeypatch.setattr(planner, name, staged)

    def _watch_app(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Every App method, counted when a planner stage calls it (back up into App)."""
        for name, member in list(vars(App).items()):
            if name.startswith("__") or not inspect.isfunction(member):
                continue

            def watched(*args: Any, _name: str = name, _real: Any = member, **kw: Any) -> Any:
                if self.planning:
                    self.calls[f"App.{_name} from the planner"] += 1
                return _real(*args, **kw)

            monkeypatch.setattr(App, name, watched)

    def once(self) -> None:
        assert self.calls == Counter({"choose": 1, "load": 1, "budget_for": 1,
                                      "planner.choose": 1, "planner.build": 1,
                                      "planner.finish": 1}), self.calls
        assert len(self.plans) == 1


@pytest.fixture
def counts(monkeypatch: pytest.MonkeyPatch) -> Counts:
    """llama.cpp installed (as its recorded dialect says, no binary run), Ollama not: the
    profile names both, so the measured winners are read; llama.cpp is chosen."""
    classes = registry.adapter_classes()
    monkeypatch.setattr(classes["llamacpp"], "probe", lambda self: replace(
        self.assumed(), assumed=False, path="/opt/llama/llama-server"))
    monkeypatch.setattr(classes["ollama"], "probe", lambda self: None)
    return Counts(monkeypatch)


@pytest.fixture
def profile(tmp_path: Path) -> Path:
    target = write_gguf(tmp_path / "target.gguf", name="tiny target", block_count=8)
    draft = write_gguf(tmp_path / "draft.gguf", name="tiny draft", block_count=2)
    path = tmp_path / "pair.toml"
    path.write_text(f'target = "{target}"\ndraft = "{draft}"\n'
                    'backend = ["llamacpp", "ollama"]\n'
                    f'[server]\ncontext = 1024\nport = {free_port()}\n'
                    '[gateway]\nroute = false\n')  # one server: `up` hands over its launch
    return path


def test_plan_resolves_once(counts: Counts, profile: Path) -> None:
    done = CliRunner().invoke(cli, ["plan", "-p", str(profile), "--json"],
                              catch_exceptions=False)
    assert done.exit_code == 0, done.output
    counts.once()
    assert counts.plans[0][0].backend == "llamacpp"


def test_up_resolves_once_and_serves_that_plan_unamended(counts: Counts, profile: Path) -> None:
    done = CliRunner().invoke(cli, ["up", "-p", str(profile), "--foreground", "--no-provision"],
                              catch_exceptions=False)
    assert done.exit_code == 0, done.output
    counts.once()
    (plan, installed), (ready,) = counts.plans[0], counts.served
    launch = App.from_env().backends()[plan.backend].launch(plan, installed)
    assert ready.plan == plan_json(plan, installed, launch)  # the plan as resolved, no overlay
    assert ready.launch().argv == launch.argv


@pytest.mark.parametrize("command", [["bench", "--prompts", "1"], ["tune", "--prompts", "1"]])
def test_bench_and_tune_resolve_once(counts: Counts, profile: Path, command: list[str]) -> None:
    """tune also looks up the saved tune once, itself: its pick is the incumbent that leads
    the race (issue 59); bench reads none."""
    with pytest.raises(Launched):
        CliRunner().invoke(cli, [*command, "-p", str(profile)], catch_exceptions=False)
    assert counts.calls.pop("saved tune", 0) == (command[0] == "tune")
    counts.once()
    assert counts.spawned  # it got as far as starting a server of the resolved plan


@pytest.mark.parametrize(("k", "reads", "source"), [('"auto"', 1, "cost model"),
                                                   ("3", 0, "profile")])
def test_a_saved_tune_is_read_once_and_only_for_k_auto(counts: Counts, profile: Path, k: str,
                                                        reads: int, source: str) -> None:
    """The saved tune is looked up once, by the command, for the plan built (a fixed k is
    never replaced, so none is read); the planner is given what was found."""
    profile.write_text(f"k = {k}\n" + profile.read_text())
    App.from_env().dirs.tuned.mkdir(parents=True)
    (App.from_env().dirs.tuned / "another-plan.json").write_text("{}")  # something is tuned
    done = CliRunner().invoke(cli, ["plan", "-p", str(profile), "--json"],
                              catch_exceptions=False)
    assert done.exit_code == 0, done.output
    assert counts.calls.pop("saved tune", 0) == reads
    counts.once()
    assert counts.plans[0][0].k_source == source


def test_up_resolves_anew_after_a_pull_instead_of_amending_the_plan(
        counts: Counts, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A target only on the Hub: the first plan lists it to pull (Resolved.needs); after the
    pull the plan is resolved again from the file now in the Hugging Face cache."""
    root = tmp_path / "hub"
    add_file(root, "tiny/Tiny-GGUF", write_gguf(tmp_path / "t.gguf", name="tiny hub target",
                                                 block_count=8), "tiny-Q4_K_M.gguf")
    with FakeHub(root) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        monkeypatch.setenv("HF_HUB_OFFLINE", "0")
        # huggingface_hub reads HF_HUB_OFFLINE once, when first imported: by an earlier test
        # in this process, offline (conftest), its download would still refuse
        monkeypatch.setattr(hf_constants, "HF_HUB_OFFLINE", False)
        done = CliRunner().invoke(cli, ["up", "hf:tiny/Tiny-GGUF", "--draft", "none",
                                        "--port", str(free_port()), "--foreground", "--yes"],
                                  catch_exceptions=False)
    assert done.exit_code == 0, done.output
    assert "download hf:tiny/Tiny-GGUF" in done.output  # said first, as work to do
    first, second = (plan for plan, _ in counts.plans)
    assert first.target.path is None and first.target.remote is not None
    assert second.target.path is not None and second.target.path.is_file()
    (ready,) = counts.served
    assert list(ready.files) == [str(second.target.path)]
    assert ready.plan["target"]["path"] == str(second.target.path)


@pytest.mark.server
def test_a_gateway_resolves_each_model_at_its_start_and_never_per_request(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The gateway in this process (Starlette's TestClient, the real pool and runner, a real
    llama-server on SmolLM2): one resolution per model at the start (`run.gather`; no saved
    tune, so no route's plan as written), none for the cold request that starts the engine
    and none for the warm one after it."""
    from starlette.testclient import TestClient

    from specctl.orchestrator.gateway import run
    from specctl.orchestrator.gateway.asgi import Gateway
    from specctl.orchestrator.gateway.metrics import Metrics
    from specctl.orchestrator.gateway.owned import Engines
    from specctl.orchestrator.gateway.plans import Plans
    from specctl.orchestrator.gateway.pool import Pool, PoolSettings

    path = tmp_path / "smol.toml"
    path.write_text('target = "testbed:smollm2-135m"\ndraft = "testbed:smollm2-135m"\n'
                    "k = 3\n[server]\ncontext = 1024\n")
    choose, seen = planner.choose, []

    def counted(*args: Any, **kw: Any) -> planner.Chosen:
        seen.append(1)
        return choose(*args, **kw)

    monkeypatch.setattr(planner, "choose", counted)  # each resolution's first stage
    app = App.from_env()
    models = run.gather(app, (str(path),), lambda _line: None)
    pool = Pool(Plans(app, models.profiles, models.resolved, None), PoolSettings(), Metrics(),
                lambda _line: None, Engines(None, 60, 3))
    assert len(seen) == 1  # at the start, once
    body = {"model": "smol", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    with TestClient(Gateway(pool, None, ()).app()) as client:
        cold = client.post("/v1/chat/completions", json=body)
        assert cold.status_code == 200, cold.text
        assert len(seen) == 1  # the cold request (it started the engine): none
        warm = client.post("/v1/chat/completions", json=body)
        assert warm.status_code == 200, warm.text
        assert len(seen) == 1  # the warm one: none
    assert pool.engines == []  # the lifespan's end stopped it


def test_a_gateway_resolves_a_tuned_model_once_at_its_start_and_per_refresh(
        counts: Counts, profile: Path) -> None:
    """With a saved tune to route by: at the start (`run.gather`, then `Plans`) one resolution
    (one backend choice, one memory budget, the planner's first stages once; `finish` twice,
    the plan served and the plan as written, from that one built plan) and one read of the
    saved tune; and the same again at each refresh. No server starts."""
    from specctl.orchestrator.gateway import run
    from specctl.orchestrator.gateway.plans import Plans
    from tests.test_plan_golden import save_tune

    profile.write_text(profile.read_text().replace("route = false", "route = true"))
    save_tune(profile)
    counts.calls.clear()
    once = Counter({"choose": 1, "load": 1, "budget_for": 1, "planner.choose": 1,
                    "planner.build": 1, "planner.finish": 2, "saved tune": 1})
    app = App.from_env()
    models = run.gather(app, (str(profile),), lambda _line: None)
    plans = Plans(app, models.profiles, models.resolved, None)
    assert counts.calls == once, counts.calls
    served = plans.served["pair"]
    assert served.resolved.plan.k == 3  # the saved tune's, served
    assert served.routing.route is not None, served.routing.why  # made of the saved tune
    assert served.routing.route.main == "draft k=3 p-min 0.4 + ngram-mod k=16"
    counts.calls.clear()
    plans.refresh("pair")
    assert counts.calls == once, counts.calls
