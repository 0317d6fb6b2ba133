"""The backends specctl knows: every adapter module in this package, found by scanning it.

An adapter module is `adapters/<name>.py` exposing `ADAPTER`; helper modules of an adapter are
named `<name>_<part>.py`, and shared helpers are listed in _NOT_ADAPTERS; neither is scanned.
Nothing here names a backend.
"""

from __future__ import annotations

import difflib
import functools
import importlib
import pkgutil
from typing import TYPE_CHECKING

from specctl.adapters.base import Adapter
from specctl.orchestrator.errors import UnknownBackendError

if TYPE_CHECKING:
    from specctl.orchestrator.config.paths import Dirs

_NOT_ADAPTERS = frozenset({"base", "prometheus", "registry"})


@functools.cache
def adapter_classes() -> dict[str, type[Adapter]]:
    """name -> adapter class, for every adapter module in the package."""
    import specctl.adapters as package

    found: dict[str, type[Adapter]] = {}
    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda m: m.name):
        if info.ispkg or "_" in info.name or info.name in _NOT_ADAPTERS:
            continue
        module = importlib.import_module(f"{package.__name__}.{info.name}")
        cls = getattr(module, "ADAPTER", None)
        if isinstance(cls, type) and issubclass(cls, Adapter):
            found[cls.name] = cls
    return found


def names() -> list[str]:
    return list(adapter_classes())


def canonical(name: str) -> str:
    """The adapter's name for `name` or one of its aliases; a clear error otherwise."""
    spellings: dict[str, str] = {}
    for cls in adapter_classes().values():
        spellings.update({alias: cls.name for alias in (cls.name, *cls.aliases)})
    if name in spellings:
        return spellings[name]
    close = difflib.get_close_matches(name.lower(), list(spellings), n=1, cutoff=0.6)
    hint = f"did you mean {spellings[close[0]]}? " if close else ""
    raise UnknownBackendError(f"no backend named '{name}'; {hint}known: {', '.join(names())}")


def registry(dirs: Dirs) -> dict[str, Adapter]:
    return {name: cls.create(dirs) for name, cls in adapter_classes().items()}


def default_order(kind: str) -> tuple[str, ...]:
    """Preference when the profile names none, by each adapter's rank for this hardware kind."""
    ranked = [(cls.preference[kind], name) for name, cls in adapter_classes().items()
              if kind in cls.preference]
    return tuple(name for _, name in sorted(ranked))
