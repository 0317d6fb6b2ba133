"""A model's SHA-256 is taken where the file arrives, not by `plan` (issue 54: the first plan of
the testbed pair was silent for 6-7 s while it read 3.3 GiB). The testbed's markers and the
Hugging Face cache's blob names give it; a file known by neither is read once, said first."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from specctl.orchestrator.contract.dirs import Dirs
from specctl.orchestrator.models import testbed
from tests.cli import run_main


def test_a_marker_that_matches_the_file_gives_its_digest(tmp_path: Path) -> None:
    from specctl.orchestrator.models import digest

    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF" + b"\0" * 100)
    sha = digest.sha256_file(model)
    marker = tmp_path / "m.gguf.sha256"
    marker.write_text(digest.marker_stamp(sha, model.stat()))
    assert digest.known(model) == sha
    os.utime(model, ns=(1, 1))  # the file changed since: the marker no longer speaks for it
    assert digest.known(model) is None
    marker.write_text(digest.marker_stamp("0" * 64, model.stat()))
    assert digest.known(model) == "0" * 64  # the marker is the testbed's word, checked on fetch


def test_a_hugging_face_blob_is_named_by_its_digest(tmp_path: Path) -> None:
    from specctl.orchestrator.models import digest

    blobs, snap = tmp_path / "blobs", tmp_path / "snapshots" / "abc"
    blobs.mkdir()
    snap.mkdir(parents=True)
    data = b"GGUF" + b"\1" * 64
    sha = __import__("hashlib").sha256(data).hexdigest()
    (blobs / sha).write_bytes(data)
    (snap / "m.gguf").symlink_to(blobs / sha)
    assert digest.known(snap / "m.gguf") == sha
    (snap / "git.json").symlink_to(blobs / ("1" * 40))  # a git (sha1) blob says nothing
    (blobs / ("1" * 40)).write_bytes(b"{}")
    assert digest.known(snap / "git.json") is None


def test_an_unknown_file_is_read_once_and_said(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    from specctl.orchestrator.models import digest

    model = tmp_path / "mine.gguf"
    model.write_bytes(b"GGUF" + b"\2" * 1000)
    monkeypatch.setattr(digest, "LOUD_BYTES", 0)
    said: list[str] = []
    cache = tmp_path / "shas.json"
    first = digest.file_sha(model, cache, said.append)
    assert first == digest.sha256_file(model) and len(said) == 1 and "mine.gguf" in said[0]
    assert digest.file_sha(model, cache, said.append) == first and len(said) == 1  # remembered


@pytest.mark.server
def test_plan_of_the_testbed_pair_reads_neither_model(isolated_dirs: Dirs,
                                                      monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]
                                                      ) -> None:
    """With a tune and a certificate saved (so both are looked up), `plan -p cpu-demo` takes
    the models' digests from the testbed's markers: nothing is hashed into the state's cache."""
    for name in ("qwen-1.5b-f16", "qwen-0.5b-q4"):
        if not testbed.path_of(name, isolated_dirs.models).is_file():
            pytest.skip("the testbed is not provisioned (`specctl models testbed`)")
    for folder in ("tuned", "certificates"):
        (isolated_dirs.state / folder).mkdir(parents=True)
        (isolated_dirs.state / folder / "0123456789abcdef0123.json").write_text("{}")
    code, _, err = run_main(monkeypatch, capsys, "plan", "-p", "cpu-demo")
    assert code == 0, err
    cache = isolated_dirs.state / "model-sha256.json"
    hashed = json.loads(cache.read_text()) if cache.exists() else {}
    assert not [stamp for stamp in hashed if ".gguf|" in stamp], hashed
    assert "SHA-256" not in err  # nothing to say: nothing was read
