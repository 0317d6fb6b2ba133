"""The backends specctl knows: the adapters registered in the `specctl.adapters` entry point
group (pyproject.toml lists specctl's own; an installed package may add one), loaded by name.

An adapter is `adapters/<name>.py` exposing `ADAPTER`, registered as `<name> =
"specctl.adapters.<name>:ADAPTER"`; its helper modules are named `<name>_<part>.py`.
Nothing here names a backend, and the contract imports no adapter: the entry points are the one
link, read when the first adapter is asked for.
"""

from __future__ import annotations

import difflib
import functools
from importlib.metadata import entry_points

from specctl.orchestrator.contract.adapter import Adapter
from specctl.orchestrator.contract.dirs import Dirs
from specctl.orchestrator.errors import BackendError, UnknownBackendError

GROUP = "specctl.adapters"


@functools.cache
def adapter_classes() -> dict[str, type[Adapter]]:
    """name -> adapter class, for every adapter registered in the entry point group."""
    found: dict[str, type[Adapter]] = {}
    for point in sorted(entry_points(group=GROUP), key=lambda p: p.name):
        try:
            cls = point.load()
        except Exception as exc:  # a broken plugin is named, not a traceback
            raise BackendError(f"the backend {point.name} ({point.value}) does not load: "
                               f"{type(exc).__name__}: {exc}; reinstall the package that "
                               "provides it, or uninstall it") from exc
        if not (isinstance(cls, type) and issubclass(cls, Adapter)):
            raise BackendError(f"the backend {point.name} ({point.value}) is not an Adapter; "
                               "fix or uninstall the package that provides it")
        found[cls.name] = cls
    if not found:
        raise BackendError(f"no backends are registered ({GROUP} entry points); reinstall "
                           "specctl (pip install -e . in a checkout)")
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
