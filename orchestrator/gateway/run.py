"""`specctl gateway`: gather the models, check the address and the keys, serve with uvicorn
until stopped (SIGTERM/SIGINT stop every server the gateway started)."""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from specctl.orchestrator.app import App
from specctl.orchestrator.config import profiles as profiles_mod
from specctl.orchestrator.config.profiles import Profile
from specctl.orchestrator.contract.launch import is_loopback, url_host
from specctl.orchestrator.errors import BadInputError, ProfileError, SettingsError, SpecctlError
from specctl.orchestrator.gateway.asgi import Gateway
from specctl.orchestrator.gateway.idle import IdleTuner
from specctl.orchestrator.gateway.metrics import Metrics
from specctl.orchestrator.gateway.pool import Options, Pool, servable
from specctl.orchestrator.runtime import procs

Say = Callable[[str], None]
PORT = 8070  # llama-server and the profiles use 8080, Ollama 11434, LM Studio 1234
KEY_VAR = "SPECCTL_GATEWAY_API_KEY"


@dataclass(frozen=True)
class Request:
    refs: tuple[str, ...] = ()  # none: every profile that plans and runs here
    host: str = "127.0.0.1"
    port: int = PORT
    options: Options = field(default_factory=Options)
    idle_tune_after: float | None = 120.0  # None: never tune in the background
    key_var: str = KEY_VAR


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


def gather(app: App, refs: tuple[str, ...], say: Say) -> tuple[dict[str, Profile],
                                                               dict[str, str]]:
    """The models by the name clients send (the profile's name) and the ref each came from.
    Named ones must plan here (else one line saying why); with none named, every profile that
    plans and has what it needs is served, and the others are said with the reason."""
    named = bool(refs)
    refs = refs or tuple(profiles_mod.available(app.dirs))
    found: dict[str, Profile] = {}
    given: dict[str, str] = {}
    for ref in refs:
        try:
            profile = app.load(ref)
            servable(app.resolve(profile))  # refused now, not at its first request
        except SpecctlError as exc:
            if named:
                raise type(exc)(f"{ref}: {exc}") from None
            say(f"not served: {ref}: {exc}")
            continue
        if profile.name in found:
            raise ProfileError(f"two models are named {profile.name} ({given[profile.name]} and "
                               f"{ref}); rename one profile")
        found[profile.name], given[profile.name] = profile, ref
    if not found:
        raise ProfileError("no model to serve: name profiles or models "
                           "(`specctl gateway cpu-demo hf:ORG/REPO`)")
    return found, given


def serve(app: App, request: Request, say: Say) -> int:
    import uvicorn

    _Server = _server_class()
    keys = keys_of(os.environ, request.key_var)
    if not keys and not is_loopback(request.host):
        raise BadInputError(f"the gateway on {request.host} would take requests from other "
                            f"machines without a key: export {request.key_var}=<key> first, or "
                            "keep the default --host 127.0.0.1")
    procs.ensure_port_free(request.host, request.port)
    profiles, refs = gather(app, request.refs, say)
    options = replace(request.options, health_timeout=app.settings.health_timeout,
                      grace=app.settings.stop_grace)  # as `up` waits and stops
    pool = Pool(app, profiles, options, Metrics(), say)
    tuner = (IdleTuner(pool, refs, request.idle_tune_after, app.dirs.logs)
             if request.idle_tune_after is not None else None)
    base = f"http://{url_host(request.host)}:{request.port}/v1"
    gateway = Gateway(pool, tuner, keys, base, app.dirs.state / "gateway.json")
    say(f"gateway at {base} for {', '.join(sorted(profiles))}"
        f"{' (API key required)' if keys else ''}")
    config = uvicorn.Config(gateway.app(), host=request.host, port=request.port,
                            log_level="warning", access_log=False, lifespan="on",
                            timeout_graceful_shutdown=int(options.grace))
    _Server(config).run()
    return 0


def _server_class() -> type[Any]:
    import uvicorn

    class Server(uvicorn.Server):
        """uvicorn's server, but a stop signal is a clean stop (exit 0, as a service manager
        expects), not raised again once the servers are down."""

        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            stops = (signal.SIGINT, signal.SIGTERM)
            previous = {sig: signal.signal(sig, self.handle_exit) for sig in stops}
            try:
                yield
            finally:
                for sig, handler in previous.items():
                    signal.signal(sig, handler)

    return Server
