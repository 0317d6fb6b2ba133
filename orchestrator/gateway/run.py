"""`specctl gateway`: gather the models (each resolved here, once), check the address and the
keys, reap what a gateway that is gone left running, serve with uvicorn until stopped.

SIGTERM/SIGINT: every request waiting for its server gets 503 and every open stream an error
event and `data: [DONE]` (gateway/bounds.py), then every server the gateway started stops."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from types import FrameType
from typing import Any

from specctl.orchestrator.app import App, Routable
from specctl.orchestrator.config import profiles as profiles_mod
from specctl.orchestrator.config.profiles import Profile
from specctl.orchestrator.contract.launch import is_loopback, url_host
from specctl.orchestrator.errors import BadInputError, ProfileError, SettingsError, SpecctlError
from specctl.orchestrator.gateway import owned
from specctl.orchestrator.gateway.asgi import Gateway
from specctl.orchestrator.gateway.bounds import Bounds, Timeouts
from specctl.orchestrator.gateway.idle import IdleTuner
from specctl.orchestrator.gateway.metrics import Metrics
from specctl.orchestrator.gateway.plans import Plans, servable
from specctl.orchestrator.gateway.pool import Pool, PoolSettings
from specctl.orchestrator.humanize import Say
from specctl.orchestrator.runtime import procs

PORT = 8070  # llama-server and the profiles use 8080, Ollama 11434, LM Studio 1234
KEY_VAR = "SPECCTL_GATEWAY_API_KEY"


@dataclass(frozen=True)
class GatewaySetup:
    refs: tuple[str, ...] = ()  # none: every profile that plans and runs here
    host: str = "127.0.0.1"
    port: int = PORT
    options: PoolSettings = field(default_factory=PoolSettings)
    idle_tune_after: float | None = 120.0  # None: never tune in the background
    key_var: str = KEY_VAR
    timeouts: Timeouts = field(default_factory=Timeouts)
    warm: bool = False  # start every server at once; /health answers 200 once they are up


def keys_of(environ: Mapping[str, str], var: str) -> tuple[str, ...]:
    """The API keys in `var`, comma-separated (several clients, or a key being rotated). Set
    but holding no key (`''`, `' , '`) is refused: it would turn the keys off unnoticed."""
    if var not in environ:
        return ()
    keys = tuple(k.strip() for k in environ[var].split(",") if k.strip())
    if not keys:
        raise SettingsError(f"{var} is set but holds no key: put the key(s) in it, "
                            f"comma-separated, or unset it to serve loopback without keys")
    return keys


@dataclass(frozen=True)
class Models:
    """The models to serve, by the name clients send (the profile's name): each profile, the
    ref it came from, and its resolution here (App.routable: the plan served, and the plan as
    written and the saved tune its route is made of)."""

    profiles: dict[str, Profile]
    refs: dict[str, str]
    resolved: dict[str, Routable]


def gather(app: App, refs: tuple[str, ...], say: Say) -> Models:
    """The models to serve, each resolved once. Named ones must plan here (else one line saying
    why); with none named, every profile that plans and has what it needs is served, and the
    others are said with the reason."""
    named = bool(refs)
    refs = refs or tuple(profiles_mod.available(app.dirs))
    found = Models({}, {}, {})
    for ref in refs:
        try:
            profile = app.load(ref)
            resolved = app.routable(profile)
            servable(resolved.resolved)  # refused now, not at its first request
        except SpecctlError as exc:
            if named:
                raise type(exc)(f"{ref}: {exc}") from None
            say(f"not served: {ref}: {exc}")
            continue
        if profile.name in found.profiles:
            raise ProfileError(f"two models are named {profile.name} ({found.refs[profile.name]}"
                               f" and {ref}); rename one profile")
        found.profiles[profile.name], found.refs[profile.name] = profile, ref
        found.resolved[profile.name] = resolved
    if not found.profiles:
        raise ProfileError("no model to serve: name profiles or models "
                           "(`specctl gateway cpu-demo hf:ORG/REPO`)")
    return found


def serve(app: App, request: GatewaySetup, say: Say) -> int:
    import uvicorn

    keys = keys_of(os.environ, request.key_var)
    if not keys and not is_loopback(request.host):
        raise BadInputError(f"the gateway on {request.host} would take requests from other "
                            f"machines without a key: export {request.key_var}=<key> first, or "
                            "keep the default --host 127.0.0.1")
    procs.ensure_port_free(request.host, request.port, "pick another with `specctl gateway "
                           "--port PORT`")
    grace = app.settings.stop_grace  # as `up` stops
    owned.reap(app.dirs.state, grace, say)
    models = gather(app, request.refs, say)
    options = replace(request.options, grace=grace)
    base = f"http://{url_host(request.host)}:{request.port}/v1"
    ledger = owned.Ledger(owned.path_for(app.dirs.state, request.port), base)
    ledger.write()
    try:
        plans = Plans(app, models.profiles, models.resolved, options.budget, say)
        pool = Pool(plans, options, Metrics(), say,
                    owned.Engines(ledger, app.settings.health_timeout, grace))
        tuner = (IdleTuner(pool, models.refs, request.idle_tune_after, app.dirs.logs)
                 if request.idle_tune_after is not None else None)
        bounds = Bounds(request.timeouts)
        gateway = Gateway(pool, tuner, keys, base, ledger, bounds, warm=request.warm)
        say(f"gateway at {base} for {', '.join(sorted(models.profiles))}"
            f"{' (API key required)' if keys else ''}")
        config = uvicorn.Config(gateway.app(), host=request.host, port=request.port,
                                log_level="warning", access_log=False, lifespan="on",
                                timeout_graceful_shutdown=int(grace))
        _server_class(bounds)(config).run()
    finally:
        ledger.close()
    return 0


def _server_class(bounds: Bounds) -> type[Any]:
    import uvicorn

    class Server(uvicorn.Server):
        """uvicorn's server, but a stop signal is a clean stop (exit 0, as a service manager
        expects), not raised again once the servers are down; and it first tells the requests
        in flight (`Bounds.stop`: 503 to those waiting for a server, an error event and
        `data: [DONE]` to open streams), before uvicorn waits for their connections."""

        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            stops = (signal.SIGINT, signal.SIGTERM)
            previous = {sig: signal.signal(sig, self.handle_exit) for sig in stops}
            try:
                yield
            finally:
                for sig, handler in previous.items():
                    signal.signal(sig, handler)

        def handle_exit(self, sig: int, frame: FrameType | None) -> None:
            with contextlib.suppress(RuntimeError):  # no loop running: nothing in flight
                asyncio.get_running_loop().call_soon_threadsafe(bounds.stop)
            super().handle_exit(sig, frame)

    return Server
