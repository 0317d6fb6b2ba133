"""The load a routed request is decided at (gateway/busy.py): a request arriving in a moment's
quiet between several users' turns counts as loaded as the burst was, for RECENT_S seconds; a
clock of its own, no server."""

from __future__ import annotations

from specctl.orchestrator.gateway.busy import KEPT, RECENT_S, Recent


def test_a_gap_between_users_turns_is_still_their_load_and_a_quiet_spell_is_not() -> None:
    now = [0.0]
    recent = Recent(lambda: now[0])
    assert recent.load("m", 1) == 1  # alone from the start
    for n in (2, 3, 4):  # four users' requests in a burst
        now[0] += 0.2
        assert recent.load("m", n) == n
    now[0] += 1.0
    assert recent.load("m", 1) == 4  # a gap between their turns: still four
    assert recent.load("other", 1) == 1  # per model
    now[0] += RECENT_S + 0.1
    assert recent.load("m", 1) == 1  # quiet since: alone
    for _ in range(KEPT + 10):
        recent.load("m", 1)
    assert len(recent._seen["m"]) == KEPT  # bounded
