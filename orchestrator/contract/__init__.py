"""The contract, on the ground floor: the adapter protocol (`adapter.Adapter`, the hooks every
backend implements), the registry that finds the backends (`registry`, through the
`specctl.adapters` entry points) and the values the core and the adapters exchange (a backend's
options, what is installed, a launch, an endpoint, draft counters, a model store, the memory
budget and breakdown a plan carries, the SPECCTL_* settings loader). At run time it imports only
the leaves (errors, files, sizes, humanize, sanitise, http) and pydantic, so every layer above,
the adapters included, can use it without an import circle; the types the hooks take (a plan,
hardware, a model) are named for the type checker only."""
