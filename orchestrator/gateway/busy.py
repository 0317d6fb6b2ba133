"""The load a routed request is decided at: the model's requests at once with it, or the most
there were in the last RECENT_S seconds. Several users' requests come in turns, a second or
less between one's answer and their next question: one that arrives in such a gap sees load 1,
is served the draft, and runs beside the ones that come right after it, its server and theirs
sharing the cores (four users on cpu-demo: a request so served decoded at 0.38 s a token; no
draft beside three others, 0.20 s)."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

RECENT_S = 10.0  # seconds a burst of requests is remembered
KEPT = 4096  # arrivals remembered per model at the most


class Recent:
    """Per model, the loads its requests arrived at in the last RECENT_S seconds."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self._seen: dict[str, deque[tuple[float, int]]] = {}

    def load(self, model: str, now: int) -> int:
        """The load to decide a request arriving at load `now` by (and to file its figures
        under): `now`, or the most of the last RECENT_S seconds."""
        t = self.clock()
        seen = self._seen.setdefault(model, deque(maxlen=KEPT))
        while seen and seen[0][0] < t - RECENT_S:
            seen.popleft()
        seen.append((t, now))
        return max(n for _, n in seen)
