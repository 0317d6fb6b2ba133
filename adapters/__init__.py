"""One module per serving backend (llamacpp.py, vllm.py, ...), each exposing ADAPTER; `registry`
finds them, `base` holds `Adapter`. An adapter imports the contract (orchestrator/contract/ and
`base`), other adapter modules, the core's leaves (errors, files) and its pure helpers
(models.compat, machine.hardware); the core's other types only for type checking. A new backend
is one module here, its tests and a profile."""
