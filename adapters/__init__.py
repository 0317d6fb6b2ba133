"""One module per serving backend (llamacpp.py, vllm.py, ...), each exposing ADAPTER, a subclass
of orchestrator/contract/adapter.Adapter, registered in pyproject.toml's `specctl.adapters` entry
points (the contract's registry loads them by name). An adapter imports the contract, other
adapter modules, the core's leaves (errors, files, http, humanize) and its pure helpers
(models.compat, machine.hardware); the core's other types only for type checking. A new backend
is one module here, its entry point, its tests and a profile."""

if __name__ != "specctl.adapters":  # the folder imported by its bare name, from the repo root
    raise ImportError(f"import specctl.adapters, not {__name__}: pyproject.toml maps "
                      "the folder under specctl (`pip install -e .` once)")
