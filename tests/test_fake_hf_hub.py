"""Tests for the stand-in Hugging Face Hub (tests/fake_hf_hub.py), driven by the REAL, unmodified
`huggingface_hub` client: no Hub can be reached from here, so these prove that the stand-in speaks
the protocol the client expects (model info, tree listings, downloads with resume, ranged reads,
error codes, offline mode), in a throw-away HF_HOME.

The client reads HF_ENDPOINT, HF_HOME, HF_HUB_OFFLINE, ... once, at import. In-process tests pass
`endpoint=` explicitly and patch `huggingface_hub.constants`; the subprocess tests set the real
environment variables before the client is imported.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest
from huggingface_hub import (
    HfApi,
    HfFileSystem,
    constants,
    get_hf_file_metadata,
    get_session,
    hf_hub_download,
    hf_hub_url,
    snapshot_download,
)
from huggingface_hub.errors import (
    EntryNotFoundError,
    GatedRepoError,
    HfHubHTTPError,
    LocalEntryNotFoundError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)
from huggingface_hub.hf_api import RepoFile, RepoFolder

from tests.fake_hf_hub import FakeHub, gate, git_blob_oid, write_meta, write_stub

GRANTED = "hf_granted_token"
UNGRANTED = "hf_ungranted_token"
STUB_SIZE = 3_000_000
GGUF_HEADER = b"GGUF" + struct.pack("<IQQ", 3, 0, 0) + b"fake-gguf-header" * 4


def safetensors_bytes() -> bytes:
    header = {
        "__metadata__": {"format": "pt"},
        "w": {"dtype": "F32", "shape": [4, 8], "data_offsets": [0, 128]},
        "b": {"dtype": "BF16", "shape": [8], "data_offsets": [128, 144]},
    }
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    return struct.pack("<Q", len(raw)) + raw + bytes(range(144))


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """ROOT/<org>/<repo>/ with three small repos, a few KB each."""
    root = tmp_path / "hub-root"
    tiny = root / "acme" / "tiny"
    (tiny / "sub" / "dir").mkdir(parents=True)
    (tiny / "config.json").write_text(json.dumps({"model_type": "llama", "architectures": ["X"]}))
    (tiny / "README.md").write_text("# tiny\n")
    (tiny / "tokenizer.json").write_text(json.dumps({"vocab": [f"tok{i}" for i in range(400)]}))
    (tiny / "model.safetensors").write_bytes(safetensors_bytes())
    (tiny / "weights.bin").write_bytes(os.urandom(20_000))
    (tiny / "sub" / "dir" / "notes.txt").write_text("notes\n" * 50)

    big = root / "acme" / "big-gguf"
    big.mkdir(parents=True)
    (big / "model.Q4_K_M.gguf").write_bytes(GGUF_HEADER)  # the stub's header file, not listed
    write_stub(big / "model.Q4_K_M.gguf", STUB_SIZE, header="model.Q4_K_M.gguf")
    (big / "README.md").write_text("# big\n")
    write_meta(big, tags=["llama"], pipeline_tag="text-generation",
               gguf={"total": 8_030_261_248, "architecture": "llama", "context_length": 131072})

    gated = root / "acme" / "gated"
    gated.mkdir(parents=True)
    (gated / "config.json").write_text("{}")
    gate(gated, "manual")
    return root


@pytest.fixture
def hf_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A throw-away HF_HOME; the client's import-time constants are patched to match."""
    home = tmp_path / "hf-home"
    env = {"HF_HOME": str(home), "HF_HUB_CACHE": str(home / "hub"),
           "HF_HUB_DISABLE_TELEMETRY": "1"}
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    for key in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_HUB_OFFLINE", "HF_ENDPOINT"):
        monkeypatch.delenv(key, raising=False)
    patched = {
        "HF_HOME": str(home), "HF_HUB_CACHE": str(home / "hub"),
        "HF_TOKEN_PATH": str(home / "token"), "HF_STORED_TOKENS_PATH": str(home / "stored_tokens"),
        "AGENT_HARNESSES_PATH": str(home / ".agent_harnesses.json"),
        "HF_XET_CACHE": str(home / "xet"),
        "HF_HUB_DISABLE_TELEMETRY": True, "HF_HUB_OFFLINE": False,
    }
    for key, val in patched.items():
        monkeypatch.setattr(constants, key, val)
    return home / "hub"


@pytest.fixture
def hub(root: Path, hf_cache: Path) -> Iterator[FakeHub]:
    with FakeHub(root, tokens=[GRANTED], ungranted_tokens=[UNGRANTED]) as running:
        yield running


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def stub_content() -> bytes:
    return GGUF_HEADER + bytes(STUB_SIZE - len(GGUF_HEADER))


def test_model_info_lists_files_with_sizes_and_sidecar_fields(hub: FakeHub, root: Path) -> None:
    api = HfApi(endpoint=hub.url, token=False)
    info = api.model_info("acme/tiny", files_metadata=True)
    assert info.id == "acme/tiny"
    assert info.sha is not None and len(info.sha) == 40
    assert info.siblings is not None
    sizes = {s.rfilename: s.size for s in info.siblings}
    tiny = root / "acme" / "tiny"
    assert sizes == {p.relative_to(tiny).as_posix(): p.stat().st_size
                     for p in tiny.rglob("*") if p.is_file()}
    by_name = {s.rfilename: s for s in info.siblings}
    config = (tiny / "config.json").read_bytes()
    assert by_name["config.json"].blob_id == git_blob_oid(config)  # a real git blob id
    assert by_name["config.json"].lfs is None
    weights = by_name["weights.bin"].lfs
    assert weights is not None and weights.sha256 == sha256((tiny / "weights.bin").read_bytes())
    assert info.safetensors is not None  # computed from the safetensors header, like the Hub
    assert info.safetensors.parameters == {"F32": 32, "BF16": 8}
    assert info.safetensors.total == 40
    assert info.config == {"architectures": ["X"], "model_type": "llama"}
    assert info.gated is False and info.private is False
    # the same revision by its sha, and a stable sha
    assert api.model_info("acme/tiny", revision=info.sha).sha == info.sha

    big = api.model_info("acme/big-gguf", files_metadata=True)
    assert big.siblings is not None
    assert {s.rfilename: s.size for s in big.siblings} == {
        "model.Q4_K_M.gguf": STUB_SIZE, "README.md": 6}
    lfs = big.siblings[[s.rfilename for s in big.siblings].index("model.Q4_K_M.gguf")].lfs
    assert lfs is not None and lfs.sha256 == sha256(stub_content())
    assert big.gguf == {"total": 8_030_261_248, "architecture": "llama", "context_length": 131072}
    assert big.tags is not None and "llama" in big.tags and "gguf" in big.tags
    assert big.pipeline_tag == "text-generation"

    # expand: only the listed properties come back; siblings without blobs=true carry names only
    slim = api.model_info("acme/big-gguf", expand=["sha", "siblings", "gguf"])
    assert slim.sha == big.sha and slim.gguf == big.gguf
    assert slim.tags is None and slim.gated is None
    assert slim.siblings is not None and {s.size for s in slim.siblings} == {None}
    assert hub.requests_to("/api/models/acme/big-gguf")[-1].query.count("expand=") == 3


def test_list_repo_tree_and_get_paths_info(hub: FakeHub, root: Path) -> None:
    api = HfApi(endpoint=hub.url, token=False)
    tree = list(api.list_repo_tree("acme/tiny", recursive=True))
    files = {e.path: e.size for e in tree if isinstance(e, RepoFile)}
    assert files["sub/dir/notes.txt"] == 300 and files["weights.bin"] == 20_000
    assert {e.path for e in tree if isinstance(e, RepoFolder)} == {"sub", "sub/dir"}

    top = list(api.list_repo_tree("acme/tiny"))
    assert [e.path for e in top if isinstance(e, RepoFolder)] == ["sub"]
    assert "sub/dir/notes.txt" not in {e.path for e in top}
    inside = list(api.list_repo_tree("acme/tiny", path_in_repo="sub/dir", expand=True))
    assert [e.path for e in inside] == ["sub/dir/notes.txt"]
    first = inside[0]
    assert isinstance(first, RepoFile) and first.last_commit is not None
    assert first.security is not None and first.security.safe

    stub_tree = list(api.list_repo_tree("acme/big-gguf"))
    assert {e.path: e.size for e in stub_tree if isinstance(e, RepoFile)} == {
        "model.Q4_K_M.gguf": STUB_SIZE, "README.md": 6}

    infos = api.get_paths_info("acme/big-gguf", ["model.Q4_K_M.gguf", "README.md", "missing"])
    assert {i.path for i in infos} == {"model.Q4_K_M.gguf", "README.md"}
    gguf = next(i for i in infos if isinstance(i, RepoFile) and i.path == "model.Q4_K_M.gguf")
    assert gguf.size == STUB_SIZE and gguf.lfs is not None
    assert gguf.lfs.sha256 == sha256(stub_content())
    folder = api.get_paths_info("acme/tiny", ["sub"], expand=True)
    assert isinstance(folder[0], RepoFolder) and folder[0].last_commit is not None

    with pytest.raises(EntryNotFoundError):
        list(api.list_repo_tree("acme/tiny", path_in_repo="nope"))

    # cursor pagination through the Link header, followed by the client
    with FakeHub(root, tree_page_size=2) as paged:
        names = HfApi(endpoint=paged.url, token=False).list_repo_files("acme/tiny")
        assert sorted(names) == sorted(files)
        assert len(paged.requests_to("/api/models/acme/tiny/tree/main")) == 4  # 8 entries / 2


def test_hf_hub_download_small_and_stub_files(hub: FakeHub, root: Path, hf_cache: Path) -> None:
    config = hf_hub_download("acme/tiny", "config.json", endpoint=hub.url)
    tiny = root / "acme" / "tiny"
    assert Path(config).read_bytes() == (tiny / "config.json").read_bytes()
    # the cache layout: blobs named by the ETag, snapshots/<sha>/ symlinks, refs/main
    repo_cache = hf_cache / "models--acme--tiny"
    sha = (repo_cache / "refs" / "main").read_text()
    assert Path(config) == repo_cache / "snapshots" / sha / "config.json"
    assert (repo_cache / "blobs" / git_blob_oid((tiny / "config.json").read_bytes())).is_file()

    nested = hf_hub_download("acme/tiny", "notes.txt", subfolder="sub/dir", endpoint=hub.url)
    assert Path(nested).read_text() == "notes\n" * 50

    meta = get_hf_file_metadata(hf_hub_url("acme/big-gguf", "model.Q4_K_M.gguf",
                                           endpoint=hub.url))
    assert meta.size == STUB_SIZE and meta.etag == sha256(stub_content())
    assert meta.xet_file_data is None  # no Xet headers: plain HTTP download

    hub.reset_counts()
    big = hf_hub_download("acme/big-gguf", "model.Q4_K_M.gguf", endpoint=hub.url)
    data = Path(big).read_bytes()
    assert len(data) == STUB_SIZE and data == stub_content()
    assert Path(big).resolve().name == sha256(data)  # LFS blobs are named by their sha256
    assert [r.method for r in hub.log] == ["HEAD", "GET"]

    hub.reset_counts()  # warm cache: one HEAD to check the ETag, no GET
    assert hf_hub_download("acme/big-gguf", "model.Q4_K_M.gguf", endpoint=hub.url) == big
    assert [r.method for r in hub.log] == ["HEAD"]

    snapshot = snapshot_download("acme/tiny", endpoint=hub.url)
    assert (Path(snapshot) / "sub" / "dir" / "notes.txt").is_file()
    assert (Path(snapshot) / "weights.bin").read_bytes() == (tiny / "weights.bin").read_bytes()


def test_interrupted_download_resumes_with_a_range_request(hub: FakeHub, root: Path) -> None:
    # The 2.4.0 client writes the body in DOWNLOAD_CHUNK_SIZE (10 MiB) chunks and resumes from
    # the last whole chunk written: a stub file makes a 12 MiB body without 12 MiB on disk.
    chunk = constants.DOWNLOAD_CHUNK_SIZE
    repo = root / "acme" / "resume"
    repo.mkdir()
    (repo / "big.bin").write_bytes(os.urandom(8192))
    write_stub(repo / "big.bin", chunk + 2 * 1024 * 1024, header="big.bin")
    expected = (repo / "big.bin").read_bytes() + bytes(chunk + 2 * 1024 * 1024 - 8192)
    hub.fail_after_bytes("acme/resume/big.bin", chunk + 4096)

    path = hf_hub_download("acme/resume", "big.bin", endpoint=hub.url)
    assert sha256(Path(path).read_bytes()) == sha256(expected)
    gets = hub.requests_to("/acme/resume/resolve/main/big.bin", "GET")
    assert len(gets) == 2
    assert "range" not in gets[0].headers
    assert gets[1].headers["range"] == f"bytes={chunk}-"
    assert hub.statuses[hub.log.index(gets[1])] == 206


def test_cut_within_the_first_chunk_downloads_again_from_zero(hub: FakeHub, root: Path) -> None:
    hub.fail_after_bytes("acme/tiny/weights.bin", 5000)
    path = hf_hub_download("acme/tiny", "weights.bin", endpoint=hub.url)
    expected = (root / "acme" / "tiny" / "weights.bin").read_bytes()
    assert Path(path).read_bytes() == expected
    gets = hub.requests_to("/acme/tiny/resolve/main/weights.bin", "GET")
    assert len(gets) == 2
    assert "range" not in gets[1].headers  # the 5000 bytes never left the client's chunker


def test_ranged_reads(hub: FakeHub, root: Path) -> None:
    fs = HfFileSystem(endpoint=hub.url, token=False, skip_instance_cache=True)
    assert fs.size("acme/big-gguf/model.Q4_K_M.gguf") == STUB_SIZE
    hub.reset_counts()
    with fs.open("acme/big-gguf/model.Q4_K_M.gguf", "rb", block_size=4096) as fh:
        assert fh.read(4) == b"GGUF"
        assert fh.read(20) == GGUF_HEADER[4:24]
        fh.seek(STUB_SIZE - 8)
        assert fh.read(8) == bytes(8)
    spans = [tuple(int(x) for x in r.headers["range"].removeprefix("bytes=").split("-"))
             for r in hub.log if r.method == "GET"]
    assert len(spans) == 2  # fsspec's read-ahead blocks, fetched with Range requests
    assert spans[0][0] == 0 and spans[0][1] < 8192
    assert spans[1][1] == STUB_SIZE - 1 and spans[1][0] > STUB_SIZE - 8192
    assert set(hub.statuses) == {206}

    url = hf_hub_url("acme/big-gguf", "model.Q4_K_M.gguf", endpoint=hub.url)
    resp = get_session().get(url, headers={"Range": "bytes=0-15"})
    assert resp.status_code == 206 and resp.content == GGUF_HEADER[:16]
    assert resp.headers["Content-Range"] == f"bytes 0-15/{STUB_SIZE}"
    tail = get_session().get(url, headers={"Range": "bytes=-10"})
    assert tail.status_code == 206 and tail.content == bytes(10)
    across = get_session().get(url, headers={"Range": f"bytes={len(GGUF_HEADER) - 4}-"
                                                      f"{len(GGUF_HEADER) + 3}"})
    assert across.content == GGUF_HEADER[-4:] + bytes(4)
    beyond = get_session().get(url, headers={"Range": f"bytes={STUB_SIZE}-"})
    assert beyond.status_code == 416

    # whole-file streaming read (no Range)
    assert fs.cat_file("acme/tiny/config.json") == (root / "acme/tiny/config.json").read_bytes()

    # the client's own ranged read of a safetensors header (asks bytes=0-100000 of a small file)
    hub.reset_counts()
    meta = HfApi(endpoint=hub.url, token=False).get_safetensors_metadata("acme/tiny")
    assert meta.parameter_count == {"F32": 32, "BF16": 8}
    assert [r.headers.get("range") for r in hub.log] == [None, "bytes=0-100000"]


def test_client_raises_the_hub_errors(hub: FakeHub) -> None:
    api = HfApi(endpoint=hub.url, token=False)
    with pytest.raises(RepositoryNotFoundError) as missing:
        api.model_info("acme/nope")
    assert missing.value.response.status_code == 401
    with pytest.raises(RepositoryNotFoundError):
        hf_hub_download("acme/nope", "config.json", endpoint=hub.url)
    with pytest.raises(RevisionNotFoundError):
        api.model_info("acme/tiny", revision="v9")
    with pytest.raises(RevisionNotFoundError):
        hf_hub_download("acme/tiny", "config.json", revision="v9", endpoint=hub.url)
    with pytest.raises(EntryNotFoundError):
        hf_hub_download("acme/tiny", "nope.json", endpoint=hub.url)
    assert not api.file_exists("acme/tiny", "nope.json")
    assert api.file_exists("acme/tiny", "sub/dir/notes.txt")
    assert not api.repo_exists("acme/nope") and api.repo_exists("acme/tiny")

    # gated: metadata is public, files are not
    assert api.model_info("acme/gated").gated == "manual"
    with pytest.raises(GatedRepoError) as no_token:
        hf_hub_download("acme/gated", "config.json", endpoint=hub.url, token=False)
    assert no_token.value.response.status_code == 401
    with pytest.raises(GatedRepoError) as no_access:
        hf_hub_download("acme/gated", "config.json", endpoint=hub.url, token=UNGRANTED)
    assert no_access.value.response.status_code == 403
    ok = hf_hub_download("acme/gated", "config.json", endpoint=hub.url, token=GRANTED)
    assert Path(ok).read_text() == "{}"
    assert hub.log[-1].headers["authorization"] == f"Bearer {GRANTED}"

    # private (from .meta.json): invisible without a granted token, as on the Hub
    write_meta(hub.root / "acme" / "tiny", private=True)
    with pytest.raises(RepositoryNotFoundError) as private:
        api.model_info("acme/tiny")
    assert private.value.response.status_code == 401
    with pytest.raises(RepositoryNotFoundError) as other_user:
        api.model_info("acme/tiny", token=UNGRANTED)
    assert other_user.value.response.status_code == 404
    assert api.model_info("acme/tiny", token=GRANTED).private is True

    with pytest.raises(HfHubHTTPError) as bad_token:
        api.model_info("acme/tiny", token="hf_unknown")
    assert not isinstance(bad_token.value, RepositoryNotFoundError)
    assert bad_token.value.response.status_code == 401


def test_offline_with_warm_cache_makes_no_requests(
        hub: FakeHub, hf_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = hf_hub_download("acme/tiny", "config.json", endpoint=hub.url)
    sha = (hf_cache / "models--acme--tiny" / "refs" / "main").read_text()
    hub.reset_counts()
    assert hf_hub_download("acme/tiny", "config.json", endpoint=hub.url,
                           local_files_only=True) == path
    # online, but pinned to a cached commit: the client does not ask the Hub at all
    assert hf_hub_download("acme/tiny", "config.json", revision=sha, endpoint=hub.url) == path
    assert hub.total_requests == 0
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    assert hf_hub_download("acme/tiny", "config.json", endpoint=hub.url) == path
    with pytest.raises(LocalEntryNotFoundError):
        hf_hub_download("acme/tiny", "README.md", endpoint=hub.url)
    assert hub.total_requests == 0


CLIENT_SCRIPT = """
import json, sys
from huggingface_hub import constants, hf_hub_download
path = hf_hub_download("acme/tiny", sys.argv[1])
print(json.dumps({"path": path, "endpoint": constants.ENDPOINT,
                  "offline": constants.HF_HUB_OFFLINE}))
"""


def run_client(hub: FakeHub, home: Path, filename: str, **env: str) -> dict[str, object]:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGING"))}
    full_env.update(hub.env(), HF_HOME=str(home), **env)
    proc = subprocess.run([sys.executable, "-c", CLIENT_SCRIPT, filename], env=full_env,
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    result: dict[str, object] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def test_env_vars_read_at_import_in_a_subprocess(hub: FakeHub, tmp_path: Path) -> None:
    home = tmp_path / "subprocess-home"
    online = run_client(hub, home, "config.json")
    assert online["endpoint"] == hub.url and online["offline"] is False
    methods = [(r.method, r.path) for r in hub.log]
    assert ("HEAD", "/acme/tiny/resolve/main/config.json") in methods
    assert ("GET", "/acme/tiny/resolve/main/config.json") in methods
    # with telemetry on, the client fetches its agent-harness registry from HF_ENDPOINT
    assert ("GET", "/api/agent-harnesses") in methods

    hub.reset_counts()
    offline = run_client(hub, home, "config.json", HF_HUB_OFFLINE="1")
    assert offline["offline"] is True and offline["path"] == online["path"]
    assert hub.total_requests == 0


def test_stop_and_restart_on_the_same_port(hub: FakeHub) -> None:
    api = HfApi(endpoint=hub.url, token=False)
    url = hub.url
    path = hf_hub_download("acme/tiny", "config.json", endpoint=hub.url)
    hub.stop()
    with pytest.raises(httpx2.ConnectError):
        api.model_info("acme/tiny")
    # the client falls back to its cache when the Hub is unreachable
    assert hf_hub_download("acme/tiny", "config.json", endpoint=url) == path
    hub.start()
    assert hub.url == url
    assert api.model_info("acme/tiny").id == "acme/tiny"


def test_list_models_by_author_and_search(tmp_path: Path) -> None:
    for repo in ("org/Model-7B-GGUF", "org/Model-0.5B-GGUF", "org/Other-1B", "else/Model-1B"):
        (tmp_path / repo).mkdir(parents=True)
        (tmp_path / repo / "README.md").write_text(repo)
    with FakeHub(tmp_path) as hub:
        api = HfApi(endpoint=hub.url)
        found = [m.id for m in api.list_models(author="org", search="model")]
        assert found == ["org/Model-0.5B-GGUF", "org/Model-7B-GGUF"]
        assert [m.id for m in api.list_models(search="1b", limit=1)] == ["else/Model-1B"]
