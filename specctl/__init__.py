"""specctl: speculative decoding for local and self-hosted LLM serving.

The code lives in the top-level folders of the design card (adapters/, orchestrator/,
profiles/); setuptools maps them under the one import name `specctl` (pyproject.toml's
package-dir), so `specctl.orchestrator` is orchestrator/ in the repository and in tracebacks.
The version is the installed distribution's (pyproject.toml), read with importlib.metadata
when asked.
"""
