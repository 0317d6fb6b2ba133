"""specctl: speculative decoding for local and self-hosted LLM serving.

The code lives in the top-level folders of the design card (adapters/, orchestrator/,
profiles/); this package links them under the one import name `specctl`.
"""

__version__ = "0.1.0"
