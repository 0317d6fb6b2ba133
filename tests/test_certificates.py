"""Losslessness certificates (measure/results/certificates.py): written per engine build and model
files, found again for the same configuration, "engine changed" when the build is another, validated
when read back."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from specctl.orchestrator.errors import StateError
from specctl.orchestrator.measure.results import certificates as certs
from specctl.orchestrator.models import digest


def engine(tmp_path: Path, version: str = "b1", body: bytes = b"llama-server build 1"
           ) -> certs.Build:
    program = tmp_path / "llama-server"
    program.write_bytes(body)
    return certs.engine_of("llamacpp", version, str(program), digest.cache_of(tmp_path / "st"))


def setting(tmp_path: Path, k: int = 3) -> certs.Setting:
    target, draft = tmp_path / "t.gguf", tmp_path / "d.gguf"
    target.write_bytes(b"target weights")
    draft.write_bytes(b"draft weights")
    cache = digest.cache_of(tmp_path / "st")
    return certs.Setting(target="testbed:t", target_sha256=digest.file_sha(target, cache),
                         draft="testbed:d", draft_sha256=digest.file_sha(draft, cache),
                         method="draft", k=k)


def judged(differs: bool = False, usable: bool = True) -> dict[str, Any]:
    """A judged `bench --quality` report, as much of it as a certificate reads."""
    cat = {"verdict": "differs" if differs else "no difference detected", "p_value": 0.0005
           if differs else 0.41, "alpha": 0.05, "prompts": 2, "baseline_samples": 64,
           "candidate_samples": 64, "tokens": {"min_detectable_tv": 0.21},
           "loglik": None}
    return {"categories": ["chat"], "verdict": "speculation helps (draft k=3: 1.4x)",
            "configs": {"draft k=3": {"overall": {"usable": usable},
                                      "chat": {"identity": "3/3 identical"}}},
            "floor_check": {"passed": True},
            "quality": {"against": "speculative", "config": "draft k=3", "temperature": 0.8,
                        "top_p": 0.95, "samples_per_prompt": 32, "tokens": 12,
                        "categories": {"chat": cat}}}


def test_a_certificate_is_found_for_its_build_and_models_and_not_for_others(
        tmp_path: Path) -> None:
    folder = certs.folder(tmp_path / "st")
    built, tested = engine(tmp_path), setting(tmp_path)
    assert certs.find(folder, tested, built, "demo").state == "none"
    cert = certs.from_report("demo", built, tested, judged())
    certs.save(folder, cert)
    found = certs.find(folder, tested, built, "demo")
    assert found.state == "passing" and found.certificate == cert
    assert found.line().startswith("passing for llamacpp b1 (program sha256 ")
    assert "chat p=0.41" in found.line() and "0.21 TV per token" in found.line()
    assert certs.find(folder, setting(tmp_path, k=4), built).state == "none"
    # a new build of the engine (another program file, same version string): test again
    rebuilt = engine(tmp_path, body=b"llama-server build 2")
    changed = certs.find(folder, tested, rebuilt, "demo")
    assert changed.state == "engine changed" and changed.certificate == cert
    assert "engine build changed since" in changed.line()
    assert "`specctl bench -p demo --quality`" in changed.line()
    assert certs.find(folder, tested, engine(tmp_path, version="b2")).state == "engine changed"


def test_a_failing_run_writes_a_failing_certificate(tmp_path: Path) -> None:
    folder = certs.folder(tmp_path / "st")
    built, tested = engine(tmp_path), setting(tmp_path)
    for report in (judged(differs=True), judged(usable=False)):
        certs.save(folder, certs.from_report("demo", built, tested, report))
        found = certs.find(folder, tested, built)
        assert found.state == "failing" and found.line().startswith("FAILING for llamacpp")


def test_a_tampered_certificate_is_set_aside_not_trusted(tmp_path: Path) -> None:
    folder = certs.folder(tmp_path / "st")
    built, tested = engine(tmp_path), setting(tmp_path)
    path = certs.save(folder, certs.from_report("demo", built, tested, judged(differs=True)))
    data = json.loads(path.read_text())
    data["categories"][0]["p_value"] = 7.0  # no p-value is 7
    path.write_text(json.dumps(data))
    with pytest.raises(StateError) as bad:
        certs.find(folder, tested, built)
    assert "certificate" in str(bad.value) and "\n" not in str(bad.value)
    assert path.with_name(path.name + ".corrupt").exists() and not path.exists()
    assert certs.find(folder, tested, built).state == "none"


def test_a_run_record_finds_the_certificate_of_its_plan(tmp_path: Path) -> None:
    state = tmp_path / "st"
    built, tested = engine(tmp_path), setting(tmp_path)
    certs.save(certs.folder(state), certs.from_report("demo", built, tested, judged()))
    plan = {"profile": "demo", "backend": "llamacpp", "backend_version": "b1",
            "engine": built.program, "method": "draft", "k": 3,
            "target": {"ref": "testbed:t", "path": str(tmp_path / "t.gguf")},
            "draft": {"ref": "testbed:d", "path": str(tmp_path / "d.gguf")}}
    found = certs.for_run(state, plan)
    assert found is not None and found.state == "passing"
    assert found.to_json()["engine"]["version"] == "b1"
    assert certs.for_run(state, {**plan, "k": 5}).state == "none"  # type: ignore[union-attr]
    assert certs.for_run(state, {"profile": "old"}) is None  # an older record: nothing to say
