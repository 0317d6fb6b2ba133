"""The core of specctl. It names no backend: adapters/ owns everything engine-specific.

The flow, one way (each layer imports only those before it; tests/test_layers.py checks it):

    errors, files       leaves: the one error family; atomic writes, names to paths, reads back
    contract            the values the core and the adapters exchange (the ground floor)
    config              profiles, settings, the standard dirs
    machine, models     what this machine (or a recorded one) has; model references + metadata
    planning            backend choice, draft selection, memory, cost model -> a frozen Plan
    runtime             processes, state files, supervision, short-lived servers, HTTP client
    measure             bench and tune on top of runtime; saved tuned results and reports
    service             systemd units and launchd plists
    app, runs           the composition root (one per command); the running profiles
    cli                 the thin command line
"""

if __name__ != "specctl.orchestrator":  # the folder imported by its bare name, from the repo root
    raise ImportError(f"import specctl.orchestrator, not {__name__}: pyproject.toml maps "
                      "the folder under specctl (`pip install -e .` once)")
