"""Property-based tests (hypothesis) for the second hardening round (issue 26): generators for
each class of hostile input it names. GGUF values of every type (NaN, infinities, 2^64-1, text
where a count belongs, arrays) under the keys planning reads; profiles nested deep; Hub answers
of any JSON shape, through the real `huggingface_hub` client against tests/fake_hf_hub.py;
config.json and tokenizer.json of any shape; IPv6 hosts; log line counts; outside text through
the sanitiser. The properties: a valid value or one clear SpecctlError naming its source, no
other exception, within a bound of time, and nothing printable that a terminal obeys.
"""

from __future__ import annotations

import ipaddress
import json
import math
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specctl.orchestrator import sanitise
from specctl.orchestrator.config import profiles
from specctl.orchestrator.contract.launch import url_host
from specctl.orchestrator.errors import ModelError, ProfileError
from specctl.orchestrator.models import compat
from specctl.orchestrator.models.hub import Hub
from specctl.orchestrator.models.info import from_gguf, from_hf_dir
from specctl.orchestrator.runtime import procs
from tests import hostile_gguf
from tests.fake_hf_hub import FakeHub
from tests.test_fake_hf_hub import hf_cache  # noqa: F401 (a fixture: the client online)
from tests.test_properties_parsers_writers import json_values

SOME = settings(max_examples=150, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow,
                                       HealthCheck.function_scoped_fixture])
FEW = settings(max_examples=40, deadline=None, database=None,
               suppress_health_check=[HealthCheck.too_slow,
                                      HealthCheck.function_scoped_fixture])


def folder() -> tempfile.TemporaryDirectory[str]:
    return tempfile.TemporaryDirectory(prefix="specctl-prop2-")


# --- GGUF values of every type under the keys planning reads ------------------------------------

KEYS = ["qwen2__block_count", "qwen2__attention__head_count", "qwen2__attention__head_count_kv",
        "qwen2__embedding_length", "qwen2__attention__key_length", "general__name",
        "general__architecture", "tokenizer__ggml__model", "tokenizer__ggml__pre",
        "tokenizer__ggml__bos_token_id", "tokenizer__ggml__add_bos_token",
        "general__file_type", "tokenizer__ggml__tokens"]
INTS = {0: (0, 255), 1: (-128, 127), 2: (0, 65535), 3: (-32768, 32767), 4: (0, 2**32 - 1),
        5: (-2**31, 2**31 - 1), 10: (0, 2**64 - 1), 11: (-2**63, 2**63 - 1)}
floats = st.one_of(st.sampled_from([math.nan, math.inf, -math.inf, 0.0, -0.0, 3.4e38, 4.0]),
                   st.floats(width=32))
doubles = st.one_of(floats, st.sampled_from([1e308, -1e308, 5e-324]), st.floats())


@st.composite
def gguf_values(draw: st.DrawFn) -> bytes:
    vtype = draw(st.sampled_from([*INTS, 6, 7, 8, 9, 12]))
    if vtype in INTS:
        lo, hi = INTS[vtype]
        return hostile_gguf.scalar(vtype, draw(st.one_of(st.sampled_from([lo, hi, 0, 1, 4]),
                                                         st.integers(lo, hi))))
    if vtype in (6, 12):
        return hostile_gguf.scalar(vtype, draw(floats if vtype == 6 else doubles))
    if vtype == 7:
        return hostile_gguf.scalar(7, draw(st.booleans()))
    if vtype == 8:
        return hostile_gguf.scalar(8, draw(st.text(max_size=40)).encode("utf-8", "replace"))
    item = draw(st.sampled_from([4, 6, 8]))
    values: list[Any] = draw(st.lists(
        st.integers(0, 2**32 - 1) if item == 4 else floats if item == 6
        else st.text(max_size=8), max_size=6))
    return hostile_gguf.array(item, values)


@SOME
@given(st.dictionaries(st.sampled_from(KEYS), gguf_values(), max_size=4))
def test_any_gguf_value_is_read_or_one_model_error_naming_the_file(
        changes: dict[str, bytes]) -> None:
    with folder() as tmp:
        path = hostile_gguf.model(Path(tmp) / "m.gguf", **changes)
        started = time.monotonic()
        try:
            info = from_gguf(path, str(path))
            compat.file_tokens(info)
        except ModelError as exc:
            assert str(path) in str(exc) and "\n" not in str(exc)
            return
        finally:
            assert time.monotonic() - started < 5
        for count in (info.layers, info.heads, info.kv_heads, info.head_dim, info.vocab_size):
            assert isinstance(count, int) and 0 <= count <= 1 << 24


# --- profiles nested deep -------------------------------------------------------------------------

@st.composite
def nested_toml(draw: st.DrawFn) -> str:
    depth = draw(st.one_of(st.integers(0, 50), st.integers(900, 1100),
                           st.sampled_from([5000, 100_000])))
    kind = draw(st.sampled_from(["array", "inline", "mixed"]))
    opening = {"array": "[", "inline": "{a = ", "mixed": "[{a = "}[kind]
    closing = {"array": "]", "inline": "}", "mixed": "}]"}[kind]
    key = draw(st.sampled_from(["target", "description", "x", "server.port", "backend"]))
    return f'target = "x"\n{key} = ' + opening * depth + "1" + closing * depth + "\n"


@FEW
@given(nested_toml())
def test_a_profile_nested_any_depth_is_valid_or_one_profile_error(text: str) -> None:
    started = time.monotonic()
    try:
        profiles.parse(text, "deep", "deep.toml")
    except ProfileError as exc:
        assert "\n" not in str(exc) and len(str(exc)) < 2000
    assert time.monotonic() - started < 10


# --- config.json and tokenizer.json of any shape --------------------------------------------------

config_like = st.one_of(json_values, st.fixed_dictionaries({}, optional={
    k: json_values for k in ("num_hidden_layers", "num_attention_heads", "hidden_size",
                             "vocab_size", "head_dim", "num_key_value_heads", "model_type",
                             "architectures", "text_config", "quantization", "eos_token_id")}))
tokenizer_like = st.one_of(json_values, st.fixed_dictionaries({}, optional={
    "model": st.one_of(json_values, st.fixed_dictionaries({}, optional={
        "type": json_values, "vocab": json_values})),
    "added_tokens": st.one_of(json_values, st.lists(st.fixed_dictionaries(
        {"id": st.one_of(st.integers(), json_values), "content": json_values}), max_size=3))}))


@SOME
@given(config_like, tokenizer_like)
def test_a_model_folder_is_read_or_one_model_error(config: Any, tokenizer: Any) -> None:
    with folder() as tmp:
        root = Path(tmp)
        (root / "config.json").write_text(json.dumps(config))
        (root / "tokenizer.json").write_text(json.dumps(tokenizer))
        started = time.monotonic()
        try:
            info = from_hf_dir(root, str(root))
            compat.file_tokens(info)
        except ModelError as exc:
            assert str(root) in str(exc) and "\n" not in str(exc)
        assert time.monotonic() - started < 5


# --- Hub answers of any shape, through the real client --------------------------------------

@pytest.fixture(scope="module")
def hub_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("hub-root")
    (root / "acme" / "odd").mkdir(parents=True)
    (root / "acme" / "odd" / "config.json").write_text("{}")
    return root


sibling = st.one_of(json_values, st.fixed_dictionaries({"rfilename": json_values}, optional={
    "size": json_values, "lfs": st.one_of(json_values, st.fixed_dictionaries(
        {"sha256": json_values, "size": json_values}))}))
model_info = st.one_of(json_values, st.fixed_dictionaries(
    {"id": st.just("acme/odd"), "sha": st.one_of(st.just("a" * 40), json_values)},
    optional={"siblings": st.one_of(json_values, st.lists(sibling, max_size=4)),
              "safetensors": json_values, "gated": json_values}))


@FEW
@given(answer=model_info)
def test_any_hub_answer_is_a_listing_or_one_model_error(
        answer: Any, hub_root: Path, hf_cache: Path) -> None:  # noqa: F811
    with FakeHub(hub_root) as fake, folder() as tmp:
        fake.answer_with("acme/odd", answer)
        try:
            repo = Hub(Path(tmp), endpoint=fake.url).repo("acme/odd")
        except ModelError as exc:
            assert "acme/odd" in str(exc) and "\n" not in str(exc)
            return
        assert all(isinstance(f.path, str) and f.size >= 0 for f in repo.files)


# --- IPv6 hosts, log line counts, outside text ----------------------------------------------

@SOME
@given(st.one_of(st.ip_addresses(v=6).map(str), st.ip_addresses(v=4).map(str),
                 st.sampled_from(["::", "0.0.0.0", "", "localhost", "::1"])), st.integers(1, 65535))
def test_a_url_for_any_host_parses_back_to_it(host: str, port: int) -> None:
    url = f"http://{url_host(host)}:{port}/v1"
    parts = urlsplit(url)
    assert parts.port == port
    if host not in ("::", "0.0.0.0", "", "localhost"):
        assert ipaddress.ip_address(parts.hostname or "") == ipaddress.ip_address(host)


@SOME
@given(st.lists(st.text(alphabet=st.characters(
    codec="utf-8",
    blacklist_characters="\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"), max_size=10), max_size=30),
       st.integers(0, 40))
def test_tail_gives_the_last_n_lines(lines: list[str], n: int) -> None:
    with folder() as tmp:
        path = Path(tmp) / "x.log"
        path.write_text("".join(f"{ln}\n" for ln in lines), encoding="utf-8")
        got = procs.tail(str(path), n)
        assert got == "\n".join(lines[-n:] if n else [])


@SOME
@given(st.text())
def test_sanitised_outside_text_is_one_line_a_terminal_cannot_obey(text: str) -> None:
    out = sanitise.line(text)
    assert "\n" not in out and "\r" not in out and not sanitise.CONTROL.search(out)
    assert len(out) <= 4 * sanitise.LINE_LIMIT + 8
    assert sanitise.line(out) == out  # escaping is stable: printed once, read the same


