"""The gateway's recorder of kept traffic (gateway/keep.py), on the real store in a temp state
dir: requests written by one worker thread, never on the caller's; a failing disk or a full
queue is one line per model, never an error to the request. The gateway end to end (a real
llama-server, keys and headers that must not be kept) is tests/test_gateway.py's."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from specctl.orchestrator.contract.dirs import Dirs
from specctl.orchestrator.gateway.keep import Keeper
from specctl.orchestrator.measure.traffic import store as traffic


def _body(text: str) -> dict[str, Any]:
    return {"model": "m", "messages": [{"role": "user", "content": text}], "stream": True}


class Writes:
    """Records which thread the store's writes ran on (the real `traffic.record`, wrapped)."""

    def __init__(self) -> None:
        self.threads: set[str] = set()
        self.real = traffic.record

    def __call__(self, *args: Any, **kw: Any) -> traffic.Recorded:
        self.threads.add(threading.current_thread().name)
        return self.real(*args, **kw)


def test_requests_are_written_in_order_by_a_worker_thread(isolated_dirs: Dirs,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    writes = Writes()
    monkeypatch.setattr(traffic, "record", writes)
    said: list[str] = []
    keeper = Keeper(isolated_dirs, said.append)
    for i in range(5):
        keeper.keep("m", 100, _body(f"request {i}"), "chat", 10 + i, 20 + i)
    keeper.keep("other", 0, _body("not kept: keep_traffic 0"), "chat", 1, 1)
    keeper.close()
    assert writes.threads == {"specctl-traffic"}  # never the caller's (the event loop's)
    kept = traffic.load(isolated_dirs, "m")
    assert kept is not None
    assert [(r.messages[0].content, r.tokens_in, r.tokens_out) for r in kept.requests] == [
        (f"request {i}", 10 + i, 20 + i) for i in range(5)]
    assert traffic.load(isolated_dirs, "other") is None and said == []


def test_a_failing_store_is_one_line_per_model_and_never_raises(isolated_dirs: Dirs) -> None:
    """The traffic folder's place is taken by a file: every write fails (OSError)."""
    isolated_dirs.state.mkdir(parents=True, exist_ok=True)
    traffic.folder(isolated_dirs).write_text("not a folder")
    said: list[str] = []
    keeper = Keeper(isolated_dirs, said.append)
    for i in range(4):
        keeper.keep("alpha", 100, _body(f"a{i}"), "chat", 1, 1)
        keeper.keep("beta", 100, _body(f"b{i}"), "chat", 1, 1)
    keeper.close()
    assert keeper.written == 8
    assert len(said) == 2 and all("\n" not in line for line in said), said
    assert said[0].startswith("traffic of alpha is not being kept:") and "said once" in said[0]
    assert said[1].startswith("traffic of beta is not being kept:")


def test_a_request_over_the_bound_is_said_once_and_a_corrupt_file_each_time(
        isolated_dirs: Dirs) -> None:
    said: list[str] = []
    keeper = Keeper(isolated_dirs, said.append)
    for _ in range(3):
        keeper.keep("m", 100, _body("y" * (traffic.MAX_REQUEST + 1)), "chat", 1, 1)
    keeper.keep("m", 100, _body("fine"), "chat", 1, 1)
    keeper.close()
    assert len(said) == 1 and "256 KiB was not kept" in said[0]
    kept = traffic.load(isolated_dirs, "m")
    assert kept is not None and kept.skipped == 3 and len(kept.requests) == 1
    traffic.path_of(isolated_dirs, "m").write_text("not json at all\n")
    again = Keeper(isolated_dirs, said.append)
    again.keep("m", 100, _body("after"), "chat", 1, 1)
    again.close()
    assert len(said) == 2 and "m.jsonl.corrupt" in said[1]


def test_a_full_queue_leaves_requests_unkept_and_says_so_once(isolated_dirs: Dirs) -> None:
    """The worker waits (here: for the store's lock, held by the test) while requests keep
    coming: the queue's few wait, the rest are not kept, and the caller never waits."""
    said: list[str] = []
    keeper = Keeper(isolated_dirs, said.append, depth=2)
    with traffic.locked(isolated_dirs):
        for i in range(10):
            keeper.keep("m", 100, _body(f"r{i}"), "chat", 1, 1)
    keeper.close()
    kept = traffic.load(isolated_dirs, "m")
    assert kept is not None and 2 <= len(kept.requests) <= 3
    assert len(said) == 1 and "faster than they are written (2 waiting)" in said[0]


def test_close_without_requests_starts_nothing(tmp_path: Path) -> None:
    keeper = Keeper(Dirs(config=tmp_path, state=tmp_path, cache=tmp_path), print)
    keeper.close()
    assert keeper._thread is None
