"""Model references and the resolver: files, the local HF cache, the catalog, clear errors."""

from __future__ import annotations

from pathlib import Path

import gguf
import pytest

from specctl.adapters.ollama_store import OllamaStore
from specctl.orchestrator.errors import ModelError
from specctl.orchestrator.models import catalog
from specctl.orchestrator.models.info import ModelRef, parse_ref
from specctl.orchestrator.models.resolve import Resolver
from tests.ggufs import write_gguf


@pytest.fixture
def resolver(tmp_path: Path) -> Resolver:
    """Looks only in empty temp dirs: nothing of the user's is found."""
    return Resolver(models_dir=tmp_path / "models", hf_hub=tmp_path / "hub",
                    stores={"ollama": OllamaStore(tmp_path / "ollama")})


# --- parse_ref --------------------------------------------------------------------------------


def test_parse_gguf_path() -> None:
    assert parse_ref("/models/llama.gguf") == ModelRef("gguf", "/models/llama.gguf")
    assert parse_ref("  /models/llama.gguf  ") == ModelRef("gguf", "/models/llama.gguf")


def test_parse_gguf_path_expands_home() -> None:
    ref = parse_ref("~/models/x.gguf")
    assert ref.scheme == "gguf"
    assert ref.name == str(Path.home() / "models" / "x.gguf")


def test_parse_hf_with_quant() -> None:
    ref = parse_ref("hf:bartowski/Meta-Llama-3.1-70B-Instruct-GGUF:q4_k_m")
    assert ref == ModelRef("hf", "bartowski/Meta-Llama-3.1-70B-Instruct-GGUF", "Q4_K_M")
    assert str(ref) == "hf:bartowski/Meta-Llama-3.1-70B-Instruct-GGUF:Q4_K_M"


def test_parse_hf_without_quant() -> None:
    ref = parse_ref("hf:meta-llama/Llama-3.2-1B-Instruct")
    assert ref == ModelRef("hf", "meta-llama/Llama-3.2-1B-Instruct", None)
    assert str(ref) == "hf:meta-llama/Llama-3.2-1B-Instruct"


def test_a_store_reference_is_spelled_by_its_store(resolver: Resolver) -> None:
    assert parse_ref("ollama:llama3.1") == ModelRef("ollama", "llama3.1")  # parsed generically
    assert resolver.ref("ollama:llama3.1") == ModelRef("ollama", "llama3.1:latest")
    assert resolver.ref("ollama:llama3.1:70b") == ModelRef("ollama", "llama3.1:70b")
    assert str(resolver.ref("ollama:qwen2.5")) == "ollama:qwen2.5:latest"


def test_an_unknown_store_is_a_clear_error(resolver: Resolver) -> None:
    with pytest.raises(ModelError, match=r"unknown model source 'nosuch:'.*ollama:"):
        resolver.resolve("nosuch:model")


def test_parse_testbed() -> None:
    assert parse_ref("testbed:qwen-0.5b-q4") == ModelRef("testbed", "qwen-0.5b-q4")


@pytest.mark.parametrize(("text", "says"), [
    ("", "empty model reference"),
    ("   ", "empty model reference"),
    ("hf:just-a-name", "hf:org/repo"),
    ("hf:a/b/c", "hf:org/repo"),
    ("testbed:no-such-model", "unknown testbed model"),
])
def test_parse_bad_refs(text: str, says: str) -> None:
    with pytest.raises(ModelError, match=says):
        parse_ref(text)


def test_unknown_testbed_key_lists_the_known_ones() -> None:
    with pytest.raises(ModelError) as info:
        parse_ref("testbed:qwen")
    for key in ("qwen-1.5b-q4", "qwen-0.5b-q4", "smollm2-135m", "gemma3-270m"):
        assert key in str(info.value)


# --- Resolver ---------------------------------------------------------------------------------


def test_catalog_model_not_on_disk(resolver: Resolver) -> None:
    info = resolver.resolve("hf:bartowski/Meta-Llama-3.1-70B-Instruct-GGUF:Q4_K_M")
    assert info.source == "catalog"
    assert info.path is None
    assert info.name == "Llama-3.1-70B-Instruct"
    assert info.quant == "Q4_K_M"
    assert info.size_bytes == int(70.55e9 * catalog.BYTES_PER_WEIGHT["Q4_K_M"])
    assert info.size_bytes == pytest.approx(42.72e9, abs=0.01e9)
    assert (info.layers, info.kv_heads, info.head_dim, info.vocab_size) == (80, 8, 128, 128256)
    assert info.describe().endswith("not on disk)") and "about 39.8 GiB" in info.describe()


def test_catalog_quant_from_the_default(resolver: Resolver) -> None:
    info = resolver.resolve("hf:meta-llama/Llama-3.2-1B-Instruct", default_quant="BF16")
    assert info.quant == "BF16"
    assert info.size_bytes == int(1.24e9 * 2.0)
    assert resolver.resolve("hf:meta-llama/Llama-3.2-1B-Instruct").quant == "Q4_K_M"


def test_catalog_quant_from_the_repo_name(resolver: Resolver) -> None:
    info = resolver.resolve("hf:hugging-quants/Meta-Llama-3.1-70B-Instruct-AWQ-INT4",
                            default_quant="BF16")
    assert info.quant == "INT4"
    assert info.size_bytes == int(70.55e9 * catalog.BYTES_PER_WEIGHT["INT4"])


def test_gguf_file_you_wrote(tmp_path: Path, resolver: Resolver) -> None:
    path = write_gguf(tmp_path / "tiny.gguf", arch="llama", name="Tiny", block_count=6,
                      heads=16, kv_heads=4, embedding=1024, tokenizer_model="llama",
                      tokenizer_pre="default", bos=1, eos=2, add_bos=True,
                      file_type=int(gguf.LlamaFileType.MOSTLY_Q8_0))
    info = resolver.resolve(str(path))
    assert info.source == "file"
    assert info.path == path
    assert info.ref == str(path)
    assert info.name == "Tiny"
    assert info.architecture == "llama"
    assert (info.layers, info.heads, info.kv_heads) == (6, 16, 4)
    assert info.head_dim == 1024 // 16
    assert info.vocab_size == 16
    assert info.vocab_type == "spm"
    assert info.tokenizer == "gguf:llama/default"
    assert (info.bos_id, info.eos_id, info.add_bos, info.add_eos) == (1, 2, True, None)
    assert info.quant == "Q8_0"
    assert info.size_bytes == path.stat().st_size
    assert info.params_b is None  # not a catalog model
    assert info.kv_bytes_per_token_f16 == 6 * 4 * 64 * 2 * 2


def test_gguf_file_key_length_wins_over_embedding_split(tmp_path: Path,
                                                        resolver: Resolver) -> None:
    path = write_gguf(tmp_path / "k.gguf", heads=8, embedding=512, key_length=128)
    assert resolver.resolve(str(path)).head_dim == 128


def test_gguf_file_of_a_catalog_model_gets_its_params(tmp_path: Path,
                                                      resolver: Resolver) -> None:
    path = write_gguf(tmp_path / "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf", name=None)
    info = resolver.resolve(str(path))
    assert info.source == "file"
    assert info.name == "qwen2.5-coder-0.5b-instruct-q4_k_m"
    assert info.params_b == 0.49
    assert info.family == "qwen2.5"


def test_hf_model_in_the_local_cache_is_read_from_the_file(tmp_path: Path,
                                                           resolver: Resolver) -> None:
    snap = resolver.hf_hub / "models--org--Tiny-GGUF" / "snapshots" / "abc123"
    snap.mkdir(parents=True)
    write_gguf(snap / "Tiny-Q8_0.gguf", name="tiny q8")
    wanted = write_gguf(snap / "Tiny-Q4_K_M.gguf", name="tiny q4")
    info = resolver.resolve("hf:org/Tiny-GGUF:q4_k_m")
    assert info.source == "file"
    assert info.path == wanted
    assert info.name == "tiny q4"


def test_testbed_model_not_provisioned(resolver: Resolver) -> None:
    """Planned from the catalog at the path it will have; the note says how it gets there."""
    info = resolver.resolve("testbed:smollm2-135m")
    assert info.source == "catalog" and info.path is not None and not info.path.exists()
    assert "not fetched yet" in info.note and "specctl models testbed" in info.note
    assert info.size_bytes == 98362432


def test_missing_gguf_path(tmp_path: Path, resolver: Resolver) -> None:
    missing = tmp_path / "absent.gguf"
    with pytest.raises(ModelError, match="not found") as info:
        resolver.resolve(str(missing))
    assert str(missing) in str(info.value)


@pytest.mark.parametrize(("ref", "how"), [
    ("hf:nobody/unknown-model-GGUF:Q4_K_M",
     "specctl models pull hf:nobody/unknown-model-GGUF:Q4_K_M"),
    ("hf:nobody/unknown-model", "specctl models pull hf:nobody/unknown-model"),
    ("ollama:unknown-model", "ollama pull unknown-model:latest"),
])
def test_unknown_model_says_how_to_get_it(ref: str, how: str, resolver: Resolver) -> None:
    with pytest.raises(ModelError) as info:
        resolver.resolve(ref)
    message = str(info.value)
    assert "not on disk and not in the catalog" in message
    assert how in message


def test_require_file(tmp_path: Path, resolver: Resolver) -> None:
    info = resolver.resolve("hf:bartowski/Llama-3.2-1B-Instruct-GGUF:Q8_0")
    with pytest.raises(ModelError, match="specctl models pull"):
        resolver.require_file(info)
    path = write_gguf(tmp_path / "tiny.gguf")
    assert resolver.require_file(resolver.resolve(str(path))) == path


@pytest.mark.parametrize(("name", "expected"), [
    ("bartowski/Meta-Llama-3.1-70B-Instruct-GGUF", "Llama-3.1-70B-Instruct"),
    ("Qwen/Qwen2.5-Coder-32B-Instruct", "Qwen2.5-Coder-32B-Instruct"),
    ("Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF", "Qwen2.5-Coder-0.5B-Instruct"),
    ("unsloth/DeepSeek-R1-Distill-Llama-70B", "DeepSeek-R1-Distill-Llama-70B"),
])
def test_catalog_lookup_prefers_the_longest_match(name: str, expected: str) -> None:
    known = catalog.lookup(name)
    assert known is not None
    assert known.name == expected


def test_catalog_lookup_unknown() -> None:
    assert catalog.lookup("someone/some-model") is None


@pytest.mark.parametrize(("name", "quant"), [
    ("model-Q4_K_M.gguf", "Q4_K_M"), ("model-bf16", "BF16"), ("model-Q8_0", "Q8_0"),
    ("model-f16.gguf", "F16"), ("plain-model", None),
])
def test_quant_in(name: str, quant: str | None) -> None:
    assert catalog.quant_in(name) == quant
