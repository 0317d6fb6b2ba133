"""GGUF headers remembered across commands (models/headers.py): a second reading of an unchanged
file parses nothing, a changed file is read afresh, and an entry read back is untrusted: one
that fails its checks is set aside and the header is read again, with the same answer."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from specctl.orchestrator.models import gguf_meta
from specctl.orchestrator.models.gguf_meta import ArrayInfo, read_metadata
from specctl.orchestrator.models.headers import MAX_ENTRIES, Headers
from tests.ggufs import write_gguf


@pytest.fixture
def parses(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Each header parse counted; the per-process memo emptied (as in a new command)."""
    monkeypatch.setattr(gguf_meta, "_PARSED", {})
    seen: list[int] = []
    real = gguf_meta.parse

    def counted(buf: Any, keep: frozenset[str] = frozenset()) -> Any:
        seen.append(1)
        return real(buf, keep)

    monkeypatch.setattr(gguf_meta, "parse", counted)
    return seen


def fresh(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gguf_meta, "_PARSED", {})  # another command


def test_an_unchanged_file_is_parsed_once(tmp_path: Path, parses: list[int],
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    model = write_gguf(tmp_path / "m.gguf", block_count=6)
    headers = Headers(tmp_path / "headers")
    first = read_metadata(model, remembered=headers)
    fresh(monkeypatch)
    again = read_metadata(model, remembered=headers)
    assert again == first and len(parses) == 1
    tokens = again["tokenizer.ggml.tokens"]
    assert isinstance(tokens, ArrayInfo) and tokens.end > tokens.start  # its span in the file


def test_a_changed_file_is_read_afresh(tmp_path: Path, parses: list[int],
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    model = write_gguf(tmp_path / "m.gguf", block_count=6)
    headers = Headers(tmp_path / "headers")
    read_metadata(model, remembered=headers)
    write_gguf(model, block_count=9)
    os.utime(model, ns=(1, 1))  # a new mtime whatever the clock's resolution
    fresh(monkeypatch)
    assert read_metadata(model, remembered=headers)["qwen2.block_count"] == 9
    assert len(parses) == 2


@pytest.mark.parametrize("tamper", [
    lambda d: d["meta"].update({"qwen2.block_count": [1, 2]}),  # a list: never remembered
    lambda d: d["meta"].update({"tokenizer.ggml.tokens": {"array": [8, 16, 0, 1 << 40]}}),
    lambda d: d["meta"].update({"tokenizer.ggml.tokens": {"array": [9, 16, 0, 10]}}),  # nested
    lambda d: d.update({"stamp": "another file"}),
    lambda d: d.update({"version": 99}),
])
def test_a_tampered_entry_is_set_aside_and_the_header_read_again(
        tmp_path: Path, parses: list[int], monkeypatch: pytest.MonkeyPatch,
        tamper: Any) -> None:
    model = write_gguf(tmp_path / "m.gguf", block_count=6)
    headers = Headers(tmp_path / "headers")
    first = read_metadata(model, remembered=headers)
    (entry,) = (tmp_path / "headers").glob("*.json")
    data = json.loads(entry.read_text())
    tamper(data)
    entry.write_text(json.dumps(data))
    fresh(monkeypatch)
    assert read_metadata(model, remembered=headers) == first
    assert len(parses) == 2
    assert any(p.name.startswith(entry.name) and p != entry
               for p in (tmp_path / "headers").iterdir())  # moved aside, not trusted


def test_what_is_not_json_is_not_remembered(tmp_path: Path, parses: list[int],
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    model = write_gguf(tmp_path / "m.gguf")
    headers = Headers(tmp_path / "headers")
    read_metadata(model, keep=frozenset({gguf_meta.TOKENS_KEY}), remembered=headers)
    assert not (tmp_path / "headers").exists()  # a kept vocabulary is never written


def test_the_folder_is_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("specctl.orchestrator.models.headers.MAX_ENTRIES", 3)
    headers = Headers(tmp_path / "headers")
    for n in range(5):
        read_metadata(write_gguf(tmp_path / f"m{n}.gguf"), remembered=headers)
    assert len(list((tmp_path / "headers").glob("*.json"))) == 3
    assert MAX_ENTRIES >= 64
