"""The kept traffic (measure/traffic/store.py): opt-in per profile, one 0600 file per model, bounded
in count and bytes, an allow-list of what a request leaves (never a key or header), safe under
concurrent writers, read back as untrusted input, and deleted whole by `forget`."""

from __future__ import annotations

import json
import multiprocessing
import os
import stat
import threading
from pathlib import Path
from typing import Any

import pytest

from specctl.orchestrator.config import profiles
from specctl.orchestrator.contract.dirs import Dirs
from specctl.orchestrator.errors import NameRefusedError, ProfileError, StateError
from specctl.orchestrator.measure.traffic import kept as store
from specctl.orchestrator.measure.traffic import store as traffic

SECRET = "sk-live-0123456789abcdefSECRET"


def _body(text: str = "Write a haiku about TCP.", **more: Any) -> dict[str, Any]:
    return {"model": "m", "messages": [{"role": "user", "content": text}], **more}


def _record(dirs: Dirs, body: dict[str, Any] | None = None, keep: int = 100, model: str = "m",
            kind: str = "chat", tokens_in: int = 12, tokens_out: int = 30
            ) -> traffic.Recorded:
    return traffic.record(dirs, model, body or _body(), kind, tokens_in, tokens_out, keep=keep)


def test_keep_traffic_is_a_validated_gateway_field() -> None:
    base = 'target = "x.gguf"\n[gateway]\n'
    assert profiles.parse(base, "p", "p.toml").gateway.keep_traffic == 0  # off by default
    assert profiles.parse(base + "keep_traffic = 500\n", "p", "p.toml").gateway.keep_traffic \
        == 500
    for bad in ("-1", '"5"', "true", "100001", "2.5"):
        with pytest.raises(ProfileError, match=r"gateway\.keep_traffic"):
            profiles.parse(base + f"keep_traffic = {bad}\n", "p", "p.toml")


def test_off_keeps_nothing(isolated_dirs: Dirs) -> None:
    assert _record(isolated_dirs, keep=0) == traffic.Recorded(False)
    assert not traffic.folder(isolated_dirs).exists()


def test_only_the_allow_list_is_kept(isolated_dirs: Dirs) -> None:
    body = {
        "model": "m", "api_key": SECRET, "authorization": f"Bearer {SECRET}", "user": SECRET,
        "extra_headers": {"Authorization": f"Bearer {SECRET}"}, "metadata": {"k": SECRET},
        "messages": [
            {"role": "system", "content": "Be terse.", "name": SECRET},
            {"role": "user", "content": [{"type": "text", "text": "Describe this."},
                                         {"type": "image_url", "image_url": {"url": SECRET}}]},
            {"role": "assistant", "content": "A cat.", "tool_calls": [{"id": SECRET}]},
            {"role": "tool", "content": SECRET, "tool_call_id": SECRET},
            {"role": "developer", "content": "No emoji."},
            {"role": "user", "content": "Shorter."}],
        "temperature": 1, "top_p": 0.9, "max_completion_tokens": 64, "seed": 7,
        "stop": ["\n\n"], "n": 1, "logit_bias": {"1": 5}, "stream": True,
        "frequency_penalty": SECRET}
    assert _record(isolated_dirs, body, kind="chat", tokens_in=40, tokens_out=9).kept
    raw = traffic.path_of(isolated_dirs, "m").read_text()
    assert SECRET not in raw and "Bearer" not in raw and "logit_bias" not in raw
    (kept,) = traffic.load(isolated_dirs, "m").requests  # type: ignore[union-attr]
    assert [(m.role, m.content) for m in kept.messages] == [
        ("system", "Be terse."), ("user", "Describe this."), ("assistant", "A cat."),
        ("system", "No emoji."), ("user", "Shorter.")]
    assert kept.params.model_dump(exclude_none=True) == {
        "temperature": 1.0, "top_p": 0.9, "max_tokens": 64, "seed": 7, "stop": ["\n\n"],
        "n": 1}
    assert (kept.kind, kept.tokens_in, kept.tokens_out) == ("chat", 40, 9)
    head, line = raw.splitlines()
    assert json.loads(head) == {"version": 2, "model": "m", "keep": 100, "skipped": 0}
    fields = set(json.loads(line))
    assert fields == {"at", "kind", "tokens_in", "tokens_out", "messages", "params"}


def test_invalid_parameters_are_dropped_not_kept(isolated_dirs: Dirs) -> None:
    body = _body(temperature=SECRET, top_p=True, max_tokens=-1, seed=1.5, stop=[SECRET * 20],
                 n=10_000)
    assert _record(isolated_dirs, body).kept
    raw = traffic.path_of(isolated_dirs, "m").read_text()
    assert SECRET not in raw
    (kept,) = traffic.load(isolated_dirs, "m").requests  # type: ignore[union-attr]
    assert kept.params.model_dump(exclude_none=True) == {}


def test_a_completion_prompt_and_a_request_without_text(isolated_dirs: Dirs) -> None:
    assert _record(isolated_dirs, {"model": "m", "prompt": "def add(a, b):"}).kept
    assert _record(isolated_dirs, {"model": "m", "messages": [{"role": "assistant",
                                                              "content": "x"}]}) == \
        traffic.Recorded(False, "no user message with text")
    (kept,) = traffic.load(isolated_dirs, "m").requests  # type: ignore[union-attr]
    assert [(m.role, m.content) for m in kept.messages] == [("user", "def add(a, b):")]


def test_the_file_is_private(isolated_dirs: Dirs) -> None:
    _record(isolated_dirs)
    path = traffic.path_of(isolated_dirs, "m")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    os.chmod(path, 0o644)
    os.chmod(path.parent, 0o755)
    _record(isolated_dirs)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600  # kept 0600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700


def test_bounded_in_count_newest_kept(isolated_dirs: Dirs) -> None:
    for i in range(7):
        _record(isolated_dirs, _body(f"request {i}"), keep=3)
    kept = traffic.load(isolated_dirs, "m")
    assert kept is not None
    assert [r.messages[0].content for r in kept.requests] == [f"request {i}" for i in (4, 5, 6)]
    _record(isolated_dirs, _body("request 7"), keep=1)  # the profile now keeps fewer
    kept = traffic.load(isolated_dirs, "m")
    assert kept is not None and [r.messages[0].content for r in kept.requests] == ["request 7"]


def test_bounded_in_bytes_oldest_dropped(isolated_dirs: Dirs,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(store, "MAX_FILE", 32 << 10)
    for i in range(40):
        _record(isolated_dirs, _body(f"{i:03} " + "x" * 3000), keep=1000)
        assert traffic.path_of(isolated_dirs, "m").stat().st_size <= 32 << 10
    kept = traffic.load(isolated_dirs, "m")
    assert kept is not None and 5 < len(kept.requests) < 11
    assert kept.requests[-1].messages[0].content.startswith("039")
    firsts = [int(r.messages[0].content[:3]) for r in kept.requests]
    assert firsts == list(range(40 - len(firsts), 40))


def test_a_request_over_the_bound_is_skipped_and_counted(isolated_dirs: Dirs) -> None:
    _record(isolated_dirs, _body("small"))
    done = _record(isolated_dirs, _body("y" * (traffic.MAX_REQUEST + 1)))
    assert not done.kept and done.note and "256 KiB" in done.note
    kept = traffic.load(isolated_dirs, "m")
    assert kept is not None and kept.skipped == 1
    assert [r.messages[0].content for r in kept.requests] == ["small"]


def test_concurrent_writers_lose_nothing(isolated_dirs: Dirs) -> None:
    def work(t: int) -> None:
        for i in range(15):
            _record(isolated_dirs, _body(f"thread {t} request {i}"), keep=1000)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    kept = traffic.load(isolated_dirs, "m")
    assert kept is not None
    assert sorted(r.messages[0].content for r in kept.requests) == sorted(
        f"thread {t} request {i}" for t in range(8) for i in range(15))


def _in_process(state: str, tag: str) -> None:
    dirs = Dirs(config=Path(state), state=Path(state), cache=Path(state))
    for i in range(15):
        _record(dirs, _body(f"{tag} {i}"), keep=1000)


def test_concurrent_processes_lose_nothing(isolated_dirs: Dirs) -> None:
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_in_process, args=(str(isolated_dirs.state), f"p{n}"))
             for n in range(3)]
    for p in procs:
        p.start()
    _in_process(str(isolated_dirs.state), "parent")
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    kept = traffic.load(isolated_dirs, "m")
    assert kept is not None and len(kept.requests) == 60


HEAD = '{"version": 2, "model": "m", "keep": 100, "skipped": 0}\n'
LINE = json.dumps({"at": 1.0, "kind": "chat", "tokens_in": 1, "tokens_out": 1,
                   "messages": [{"role": "user", "content": "x"}], "params": {}}) + "\n"


@pytest.mark.parametrize("content", [
    "not json at all\n",
    HEAD.replace('"m"', '"other"') + LINE,
    json.dumps({"version": 1, "model": "m", "skipped": 0, "requests": []}) + "\n",  # no head
    HEAD + LINE.replace('"params"', f'"authorization": "{SECRET}", "params"'),
    HEAD + LINE.replace('"tokens_in": 1', '"tokens_in": "1"'),
    HEAD + LINE + "garbage\n" + LINE,  # a bad line among good ones
    HEAD.replace("100", "2") + LINE * 4,  # more lines than its keep and margin
    HEAD + '{"skipped":2}\n',
])
def test_a_corrupt_file_is_set_aside_in_one_line(isolated_dirs: Dirs, content: str) -> None:
    path = traffic.path_of(isolated_dirs, "m")
    path.parent.mkdir(parents=True, mode=0o700)
    path.write_text(content)
    with pytest.raises(StateError) as caught:
        traffic.load(isolated_dirs, "m")
    assert "\n" not in str(caught.value) and "m.jsonl.corrupt" in str(caught.value)
    assert not path.exists() and path.with_name("m.jsonl.corrupt").exists()
    path.write_text(content)  # record: set aside too, and a new file begun
    done = _record(isolated_dirs)
    assert done.kept and done.note and "corrupt" in done.note
    assert len(traffic.load(isolated_dirs, "m").requests) == 1  # type: ignore[union-attr]


def test_a_request_is_a_line_added_and_the_file_compacted_past_its_margin(
        isolated_dirs: Dirs) -> None:
    """`record` adds a line (the file is not rewritten: the same inode, only longer) until the
    file would pass its keep by its margin; then it is compacted to the newest `keep`. A reader
    sees the newest `keep` whenever it reads."""
    path = traffic.path_of(isolated_dirs, "m")
    keep, extra = 16, store.margin(16)
    assert extra == 2
    _record(isolated_dirs, _body("request 0"), keep=keep)
    inode = path.stat().st_ino
    for i in range(1, keep + extra):
        size = path.stat().st_size
        _record(isolated_dirs, _body(f"request {i}"), keep=keep)
        assert path.stat().st_ino == inode and path.stat().st_size > size  # appended
    assert len(path.read_text().splitlines()) == 1 + keep + extra
    kept = traffic.load(isolated_dirs, "m")
    assert kept is not None and [r.messages[0].content for r in kept.requests] == [
        f"request {i}" for i in range(extra, keep + extra)]
    _record(isolated_dirs, _body(f"request {keep + extra}"), keep=keep)  # past the margin
    assert path.stat().st_ino != inode  # compacted: rewritten whole, atomically
    assert len(path.read_text().splitlines()) == 1 + keep
    kept = traffic.load(isolated_dirs, "m")
    assert kept is not None and kept.requests[0].messages[0].content == f"request {extra + 1}"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_a_torn_last_line_is_left_out_and_compacted_away(isolated_dirs: Dirs) -> None:
    """A crash while a line was added leaves it torn: readers leave it out, and the next
    request compacts the file before adding its own line."""
    for i in range(3):
        _record(isolated_dirs, _body(f"request {i}"))
    path = traffic.path_of(isolated_dirs, "m")
    with open(path, "a") as fh:
        fh.write('{"at": 1.0, "kind": "chat", "tokens_in": 1, "tok')
    kept = traffic.load(isolated_dirs, "m")
    assert kept is not None and len(kept.requests) == 3
    _record(isolated_dirs, _body("request 3"))
    assert path.read_text().endswith("}\n") and '"tok\n' not in path.read_text()
    kept = traffic.load(isolated_dirs, "m")
    assert kept is not None and [r.messages[0].content for r in kept.requests] == [
        f"request {i}" for i in range(4)]


def test_another_processs_changes_are_read_before_a_line_is_added(isolated_dirs: Dirs) -> None:
    """A writer that finds the file changed since it last wrote (another gateway, a hand)
    validates it before adding to it: a corrupt one is set aside then, not added to."""
    _record(isolated_dirs, _body("request 0"))
    path = traffic.path_of(isolated_dirs, "m")
    with open(path, "a") as fh:
        fh.write('{"at": 1.0, "kind": "chat", "what": "else"}\n')
    done = _record(isolated_dirs, _body("request 1"))
    assert done.kept and done.note and "m.jsonl.corrupt" in done.note
    kept = traffic.load(isolated_dirs, "m")
    assert kept is not None and [r.messages[0].content for r in kept.requests] == ["request 1"]


def test_forget_leaves_nothing(isolated_dirs: Dirs) -> None:
    for model in ("alpha", "beta"):
        _record(isolated_dirs, model=model)
    base = traffic.folder(isolated_dirs)
    (base / "alpha.jsonl.corrupt").write_text("old")
    (base / ".alpha.jsonl.abc123").write_text("a temp file a crash left")
    gone = traffic.forget(isolated_dirs, "alpha")
    assert sorted(p.name for p in gone) == [".alpha.jsonl.abc123", "alpha.jsonl",
                                             "alpha.jsonl.corrupt"]
    assert [p.name for p in base.iterdir()] == ["beta.jsonl"]
    assert traffic.load(isolated_dirs, "alpha") is None
    assert traffic.forget(isolated_dirs, "alpha") == []
    assert [p.name for p in traffic.forget(isolated_dirs, None)] == ["beta.jsonl"]
    assert not base.exists()
    assert traffic.forget(isolated_dirs, None) == []


def test_names_never_leave_the_folder(isolated_dirs: Dirs) -> None:
    for bad in ("../m", "a/b", "", ".hidden"):
        with pytest.raises(NameRefusedError):
            _record(isolated_dirs, model=bad)
        with pytest.raises(NameRefusedError):
            traffic.forget(isolated_dirs, bad)


def test_unknown_model_says_which_were_meant(isolated_dirs: Dirs) -> None:
    assert "keep_traffic = N" in str(traffic.unknown(isolated_dirs, "cpu-demo"))
    _record(isolated_dirs, model="cpu-demo")
    assert "did you mean cpu-demo?" in str(traffic.unknown(isolated_dirs, "cpu-dmeo"))
    assert "(kept: cpu-demo)" in str(traffic.unknown(isolated_dirs, "zzz"))


def test_forget_while_recording(isolated_dirs: Dirs) -> None:
    """A writer that waited for the folder `forget` removed makes it anew: no error, no half
    file; a last forget leaves nothing."""
    errors: list[BaseException] = []

    def work() -> None:
        try:
            for i in range(40):
                _record(isolated_dirs, _body(f"r{i}"), keep=1000)
        except BaseException as exc:
            errors.append(exc)

    writer = threading.Thread(target=work)
    writer.start()
    while writer.is_alive():
        traffic.forget(isolated_dirs, None)
    writer.join()
    assert errors == []
    kept = traffic.load(isolated_dirs, "m")  # valid, or deleted whole
    assert kept is None or kept.requests[-1].messages[0].content == "r39"
    traffic.forget(isolated_dirs, None)
    assert not traffic.folder(isolated_dirs).exists()
