"""Which backend a plan uses: probe what is installed, pick by the profile's preference or the
hardware's default. Nothing here names a backend (contract.registry lists them)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from specctl.orchestrator.contract.adapter import Adapter
from specctl.orchestrator.contract.hardware import Hardware
from specctl.orchestrator.contract.launch import Installed
from specctl.orchestrator.contract.registry import default_order
from specctl.orchestrator.errors import BackendError


def probe_all(backends: Mapping[str, Adapter]) -> dict[str, Installed | None]:
    return {name: b.probe() for name, b in backends.items()}


@dataclass(frozen=True)
class Choice:
    name: str
    installed: Installed
    reasons: tuple[str, ...]


def choose(prefer: list[str], hw: Hardware, backends: Mapping[str, Adapter],
           probed: Mapping[str, Installed | None] | None,
           measured: tuple[str, str] | None = None) -> Choice:
    """Pick a backend. `probed` is None when planning for a recorded (other) machine.
    `measured` is (the fastest backend here, why) when `bench --backends` measured it: it wins
    among the profile's backends (a profile that names one backend keeps it)."""
    order = list(prefer) or [n for n in default_order(hw.kind) if n in backends]
    why_order = ("the profile's preference " if prefer else f"the default for {hw.kind.upper()} "
                 "machines ") + f"({' > '.join(order)})"
    usable = [n for n in order if hw.kind in backends[n].runs_on or (probed and probed.get(n))]
    if not usable:
        raise BackendError(f"none of {', '.join(order)} runs on a {hw.kind} machine; change the "
                           "profile's backend list")
    fastest = probed.get(measured[0]) if measured and probed else None
    if measured and fastest is not None and len(prefer) != 1 and measured[0] in usable:
        return Choice(measured[0], fastest, (f"Backend {measured[0]}: {measured[1]}; "
                                             f"{fastest.describe()}.",))
    if probed is None:
        name = usable[0]
        return Choice(name, backends[name].assumed(), (
            f"Backend {name}: first of {why_order} that runs on {hw.describe()}; planning for a "
            f"recorded machine, so argv uses the newest known {name} dialect.",))
    for name in usable:
        found = probed.get(name)
        if found is not None:
            skipped = usable[: usable.index(name)]
            note = f" ({', '.join(skipped)} not installed)" if skipped else ""
            others = [n for n in usable if n != name and probed.get(n)]
            default = (f" This is a default: `specctl bench --backends {name},{others[0]}` "
                       "measures which is faster here." if others and len(prefer) != 1 else "")
            return Choice(name, found, (
                f"Backend {name}: first installed of {why_order}{note}; "
                f"{found.describe()}.{default}",))
    name = usable[0]
    return Choice(name, backends[name].assumed(), (
        f"Backend {name}: first of {why_order}; it is not installed here yet "
        f"({backends[name].install_hint}), so argv uses its newest known dialect.",))
