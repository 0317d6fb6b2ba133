"""The contract's vocabulary, on the ground floor: the values the core and the adapters exchange
(a backend's options, what is installed, a launch, an endpoint, draft counters, a model store,
the memory budget and breakdown a plan carries, the SPECCTL_* settings loader). Imports only the
leaves (errors, files, sizes, humanize, sanitise) and pydantic, so every layer above, the
adapters included, can use it without an import circle. `adapters/base.py` holds `Adapter`."""
