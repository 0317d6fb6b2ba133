"""`specctl gateway`: one endpoint for every model and each API it serves."""

from __future__ import annotations

import click

from specctl.orchestrator.cli.base import address, cli, err_console, seconds


@cli.command()
@click.argument("refs", nargs=-1, metavar="[PROFILE|MODEL]...")
@click.option("--host", default="127.0.0.1", show_default=True, callback=address,
              help="Address to listen on; any other than loopback needs an API key.")
@click.option("--port", default=8070, show_default=True, type=click.IntRange(1, 65535),
              help="Port to listen on: the one endpoint every client uses.")
@click.option("--memory", "memory_gib", type=click.FloatRange(min=0.01, max=1 << 26),
              metavar="GIB", help="Memory the resident servers may hold together (default: the "
              "planner's budget for this machine).")
@click.option("--start-wait", default="2m", show_default=True, metavar="DURATION",
              help="How long a request waits for its model's server to start before it gets "
                   "503 with Retry-After (0: at once).")
@click.option("--first-byte-timeout", default="10m", show_default=True, metavar="DURATION",
              help="A server that sends no reply within this (a stream: no first chunk) is "
                   "hung: the request gets 504 and the server is restarted. A reply that is "
                   "not streamed comes whole at its end: this bounds all of it.")
@click.option("--chunk-timeout", default="60s", show_default=True, metavar="DURATION",
              help="A stream whose server sends nothing for this long is hung: it ends with an "
                   "error event (504) and the server is restarted.")
@click.option("--idle-tune", default="2m", show_default=True, metavar="DURATION|off",
              help='Tune an untuned k = "auto" profile in the background after this long '
                   "without requests (on its kept traffic once it holds 40 requests, else the "
                   "suites; a request stops the tune); off: never.")
@click.option("--api-key-env", default="SPECCTL_GATEWAY_API_KEY", show_default=True,
              metavar="VAR", help="Variable holding the API key(s), comma-separated; when it "
              "is set, every request needs `Authorization: Bearer KEY` (or `x-api-key: KEY`).")
@click.option("--warm", is_flag=True, help="Start every model's servers now, not on a first "
              "request; /health answers 200 once they are up (how `up` serves a profile "
              "through the router).")
def gateway(refs: tuple[str, ...], host: str, port: int, memory_gib: float | None,
            start_wait: str, first_byte_timeout: str, chunk_timeout: str, idle_tune: str,
            api_key_env: str, warm: bool) -> None:
    """Serve every profile and model behind one endpoint, for each API they have.

    \b
    specctl gateway                       every profile that runs here
    specctl gateway cpu-demo ./m.gguf     these (the model name is the profile's)
    curl localhost:8070/v1/models

    OpenAI's chat, completions and Responses at /v1 (base_url .../v1), Anthropic's
    Messages (ANTHROPIC_BASE_URL: the root), fill-in-the-middle at /infill. The
    request's "model" picks the server; it starts on the first request (the
    request waits up to --start-wait), stops after the profile's [gateway]
    keep_alive (600 s by default) and leaves first, least recently used, when
    another would not fit in memory. Streams pass through chunk by chunk. When
    `specctl tune` saves a new setting, the gateway starts it beside the old one,
    sends new requests there and stops the old one once its requests finish. A
    server silent for 2 s that does not answer its health check in 3 s is hung:
    its requests get 504 and it is restarted.
    /metrics has requests, tokens/s, time to first token, queue wait and draft
    acceptance per model and setting. Stop it with Ctrl-C or SIGTERM: requests
    in flight are told (503, or an error event in a stream), then every server
    it started stops; its servers stop with it however it ends (kill -9
    too), and the next gateway on this state dir reaps any left behind."""
    from specctl.orchestrator.app import App
    from specctl.orchestrator.gateway import run
    from specctl.orchestrator.gateway.bounds import Timeouts
    from specctl.orchestrator.gateway.pool import PoolSettings
    from specctl.orchestrator.sizes import from_gib

    app = App.from_env()
    tune_after = None if idle_tune.strip().lower() == "off" else seconds(
        idle_tune, "--idle-tune", 1, 7 * 86400)
    options = PoolSettings(budget=from_gib(memory_gib) if memory_gib else None,
                      start_wait=seconds(start_wait, "--start-wait", 0, 3600))
    timeouts = Timeouts(seconds(first_byte_timeout, "--first-byte-timeout", 1, 86400),
                        seconds(chunk_timeout, "--chunk-timeout", 1, 86400))
    request = run.GatewaySetup(refs, host, port, options, tune_after, api_key_env, timeouts,
                               warm)

    def say(line: str) -> None:
        err_console.print(f"gateway: {line}", highlight=False, markup=False, soft_wrap=True)

    raise SystemExit(run.serve(app, request, say))
