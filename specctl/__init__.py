"""specctl: speculative decoding for local and self-hosted LLM serving.

The code lives in the top-level folders of the design card (adapters/, orchestrator/,
profiles/); this package links them under the one import name `specctl`. The version is the
installed distribution's (pyproject.toml), read with importlib.metadata when asked.
"""
