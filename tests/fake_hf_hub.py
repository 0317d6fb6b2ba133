"""A STAND-IN for the Hugging Face Hub, for tests only: this machine cannot reach huggingface.co, so
tests point the REAL `huggingface_hub` client (2.4.x, unmodified) at this server through
`HF_ENDPOINT=http://127.0.0.1:PORT` (or the `endpoint=` arguments of `HfApi`, `hf_hub_download`,
`HfFileSystem`). It mimics the Hub's HTTP protocol as the client reads it; it is not the Hub.

It serves model repos laid out on disk as `ROOT/<org>/<repo>/<files...>`. Implemented:

* `GET /api/models?author=&search=&filter=&limit=` (list_models): matching repos, brief entries.
* `GET /api/models/<org>/<repo>[/revision/<rev>]` (model_info / repo_info): `_id`, `id`, `sha`,
  `siblings` (`rfilename`; with `?blobs=true` also `size`, `blobId` and
  `lfs{sha256,size,pointerSize}`), `gated`, `private`, `tags`, `safetensors` (from `.meta.json`,
  else computed from the `*.safetensors` headers), `gguf`, `config`, ...; honours `expand=` and
  `expand[]=` (only `_id`, `id` and the listed properties come back, as on the Hub) and
  `securityStatus`.
* `GET /api/models/<org>/<repo>/tree/<rev>[/<path>]` (list_repo_tree) with `recursive`, `expand`,
  cursor pagination through a `Link: <...>; rel="next"` header (1000 entries a page, 50 expanded);
  `POST /api/models/<org>/<repo>/paths-info/<rev>` (get_paths_info, form or JSON body);
  `GET /api/models/<org>/<repo>/refs`; `GET /api/whoami-v2`; `GET /api/agent-harnesses` (the client
  fetches this once for its user-agent unless telemetry is off; answered with an empty registry).
* `HEAD`/`GET /<org>/<repo>/resolve/<rev>/<path>`: `X-Repo-Commit`, `ETag` (quoted git blob id, or
  the sha256 for LFS files, which also get `X-Linked-Etag` and `X-Linked-Size`), `Content-Length`,
  `Accept-Ranges: bytes`, `Content-Disposition`. `Range: bytes=a-b`, `bytes=a-` and `bytes=-n`
  answer 206 with `Content-Range` (416 past the end), so `hf_hub_download` resumes a cut download
  and ranged reads work. Files are served inline, without the Hub's redirect to a CDN, and never
  with Xet headers (`X-Xet-*`, `Link: ...xet-auth`), so the client takes the plain HTTP path.
* Errors as the Hub gives them (`X-Error-Code`, `X-Error-Message`, JSON `{"error": ...}`): unknown
  or private repo -> 401 (404 when a valid token was sent) `RepoNotFound`; bad revision -> 404
  `RevisionNotFound`; missing file or path -> 404 `EntryNotFound` (with `X-Repo-Commit`); gated repo
  file without a token -> 401 `GatedRepo`, with a token not granted access -> 403 `GatedRepo`;
  unknown token -> 401 "Invalid credentials in Authorization header". Metadata of gated repos stays
  readable without a token, as on the Hub.

Repo folder conventions (none of these control files is listed as a repo file):

* `.gated`: the repo is gated ("auto", or "manual" when the file says so). Tokens given to the
  server as `tokens` may read it; `ungranted_tokens` are valid tokens without access.
* `.meta.json`: extra model-info fields merged into model_info (`safetensors`, `gguf`, `tags`,
  `gated`, `private`, `pipeline_tag`, `library_name`, `config`, `cardData`, ...).
* `X.stub.json` = `{"size": N, "header": "file", "sha256": "..."}` describes a huge file `X`
  without storing it: `X` is listed with size N and served as the header file's bytes followed by
  zeros (ranges work across both). `header` is relative to the stub's folder; a header file inside
  the repo is not listed itself (it may be `X` itself). Without `sha256` the real sha256 is
  computed up to 256 MiB; above that a stable stand-in digest is used.
* LFS files (whose ETag is the sha256): stubs, the Hub's default `.gitattributes` patterns
  (`*.safetensors`, `*.bin`, `*.gguf`, ...), patterns with `filter=lfs` in the repo's own
  `.gitattributes`, and files of 10 MiB or more.

A repo's revision `sha` is a sha1 over its files' names, sizes and content hashes, so it is stable
while the files are, and changes when they do. Revisions accepted: `main`, `refs/heads/main`, `sha`.

Test hooks: request counts per URL path and in total, a request log (method, path, headers,
status), `fail_after_bytes()` to cut a file's body after N bytes (to test resume), and
stop/restart on the same port. Run by hand with `python tests/fake_hf_hub.py ROOT [--port N]`.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import fnmatch
import hashlib
import json
import os
import socket
import struct
import sys
import threading
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, cast
from urllib.parse import parse_qs, quote, unquote, urlencode, urlsplit

STUB_SUFFIX = ".stub.json"
META_FILE = ".meta.json"
GATED_FILE = ".gated"
LFS_MIN_SIZE = 10 * 1024 * 1024
STUB_HASH_LIMIT = 256 * 1024 * 1024
CHUNK = 1024 * 1024
TREE_PAGE_SIZE = 1000
TREE_PAGE_SIZE_EXPANDED = 50
MAIN_REFS = ("main", "refs/heads/main")
INVALID_CREDENTIALS = "Invalid credentials in Authorization header"
COMMIT_TITLE = "Upload folder using huggingface_hub"
# The Hub's default .gitattributes: files matching these are stored with Git LFS.
LFS_PATTERNS = (
    "*.7z", "*.arrow", "*.bin", "*.bz2", "*.ckpt", "*.ftz", "*.gguf", "*.gz", "*.h5", "*.joblib",
    "*.lfs.*", "*.mlmodel", "*.model", "*.msgpack", "*.npy", "*.npz", "*.onnx", "*.ot",
    "*.parquet", "*.pb", "*.pickle", "*.pkl", "*.pt", "*.pth", "*.rar", "*.safetensors",
    "saved_model/**/*", "*.tar.*", "*.tar", "*.tflite", "*.tgz", "*.wasm", "*.xz", "*.zip",
    "*.zst", "*tfevents*",
)
SAFETENSORS_DTYPES = frozenset({
    "BOOL", "U8", "I8", "F8_E5M2", "F8_E4M3", "I16", "U16", "F16", "BF16", "I32", "U32", "F32",
    "F64", "I64", "U64",
})

Auth = Literal["none", "granted", "ungranted"]
Gated = Literal["auto", "manual", False]

_hash_cache: dict[tuple[str, ...], str] = {}
_hash_lock = threading.Lock()


# --------------------------------------------------------------------------- repo contents


@dataclass(frozen=True)
class RepoFile:
    """One file as the Hub would list it."""

    path: str  # path in the repo, posix
    size: int
    source: Path | None  # real file whose first `source_len` bytes start the content (rest: zeros)
    source_len: int
    sha256: str | None  # set for LFS files
    git_oid: str  # git blob id (of the LFS pointer file for LFS files)
    mtime: float

    @property
    def lfs(self) -> bool:
        return self.sha256 is not None

    @property
    def etag(self) -> str:
        return self.sha256 if self.sha256 is not None else self.git_oid

    def pointer_size(self) -> int:
        return len(lfs_pointer(self.sha256 or "", self.size))

    def iter_bytes(self, start: int, end: int) -> Iterator[bytes]:
        """Content bytes [start, end), in chunks: the source's bytes, then zeros."""
        pos = start
        stop_real = min(end, self.source_len)
        if self.source is not None and pos < stop_real:
            with self.source.open("rb") as fh:
                fh.seek(pos)
                while pos < stop_real:
                    chunk = fh.read(min(CHUNK, stop_real - pos))
                    if not chunk:
                        break  # the source shrank: zeros from here on
                    pos += len(chunk)
                    yield chunk
        while pos < end:
            n = min(CHUNK, end - pos)
            pos += n
            yield bytes(n)

    def read(self, start: int, end: int) -> bytes:
        return b"".join(self.iter_bytes(start, min(end, self.size)))


def lfs_pointer(sha256: str, size: int) -> bytes:
    spec = "https://git-lfs.github.com/spec/v1"
    return f"version {spec}\noid sha256:{sha256}\nsize {size}\n".encode()


def git_blob_oid(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def _stat_key(path: Path) -> tuple[str, str, str]:
    st = path.stat()
    return str(path), str(st.st_size), str(st.st_mtime_ns)


def _cached_hash(key: tuple[str, ...], compute: Callable[[], str]) -> str:
    with _hash_lock:
        found = _hash_cache.get(key)
    if found is not None:
        return found
    value = compute()
    with _hash_lock:
        _hash_cache[key] = value
    return value


def _digest(chunks: Iterable[bytes], algo: str, prefix: bytes = b"") -> str:
    h = hashlib.new(algo)
    h.update(prefix)
    for chunk in chunks:
        h.update(chunk)
    return h.hexdigest()


def _file_chunks(path: Path) -> Iterator[bytes]:
    with path.open("rb") as fh:
        while chunk := fh.read(CHUNK):
            yield chunk


def _real_file(path: str, real: Path, lfs: bool) -> RepoFile:
    st = real.stat()
    key = _stat_key(real)
    if lfs:
        sha = _cached_hash(("sha256", *key), lambda: _digest(_file_chunks(real), "sha256"))
        oid = git_blob_oid(lfs_pointer(sha, st.st_size))
        return RepoFile(path, st.st_size, real, st.st_size, sha, oid, st.st_mtime)
    prefix = b"blob %d\0" % st.st_size
    oid = _cached_hash(("git", *key), lambda: _digest(_file_chunks(real), "sha1", prefix))
    return RepoFile(path, st.st_size, real, st.st_size, None, oid, st.st_mtime)


def _stub_file(path: str, stub: Path) -> tuple[RepoFile, Path | None]:
    spec = json.loads(stub.read_text())
    size = int(spec["size"])
    header = spec.get("header")
    source = (stub.parent / str(header)) if header else None
    source_len = min(size, source.stat().st_size) if source is not None else 0
    partial = RepoFile(path, size, source, source_len, None, "", stub.stat().st_mtime)
    sha = spec.get("sha256")
    if not sha:
        key = ("stub", *_stat_key(stub), *(_stat_key(source) if source is not None else ()))
        if size <= STUB_HASH_LIMIT:
            sha = _cached_hash(key, lambda: _digest(partial.iter_bytes(0, size), "sha256"))
        else:  # too big to hash on every scan: a stable stand-in digest
            head = partial.read(0, source_len)
            sha = hashlib.sha256(b"fake-hf-hub stub\0%d\0" % size + head).hexdigest()
    oid = git_blob_oid(lfs_pointer(str(sha), size))
    entry = RepoFile(path, size, source, source_len, str(sha), oid, partial.mtime)
    return entry, source


def _gitattributes_lfs(folder: Path) -> tuple[str, ...]:
    attrs = folder / ".gitattributes"
    if not attrs.is_file():
        return ()
    return tuple(
        line.split()[0] for line in attrs.read_text(errors="replace").splitlines()
        if "filter=lfs" in line and line.split() and not line.startswith("#")
    )


def _is_lfs(path: str, size: int, patterns: Iterable[str]) -> bool:
    if size >= LFS_MIN_SIZE:
        return True
    name = path.rsplit("/", 1)[-1]
    return any(fnmatch.fnmatch(path, p) or fnmatch.fnmatch(name, p) for p in patterns)


def _iso(ts: float) -> str:
    moment = datetime.fromtimestamp(ts, timezone.utc)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


@dataclass
class Repo:
    """A model repo as scanned from its folder (rescanned on every request)."""

    repo_id: str
    folder: Path
    files: dict[str, RepoFile]
    dirs: set[str]
    meta: dict[str, Any]
    gated: Gated
    private: bool
    sha: str = field(init=False)

    def __post_init__(self) -> None:
        h = hashlib.sha1()
        for f in self.files.values():
            h.update(f"{f.path}\0{f.size}\0{f.etag}\n".encode())
        self.sha = h.hexdigest()

    @classmethod
    def scan(cls, repo_id: str, folder: Path) -> Repo:
        stubs: dict[str, Path] = {}
        plain: dict[str, Path] = {}
        for p in sorted(folder.rglob("*")):
            rel = p.relative_to(folder).as_posix()
            if not p.is_file() or rel.split("/")[0] == ".git" or rel in (META_FILE, GATED_FILE):
                continue
            if rel.endswith(STUB_SUFFIX):
                stubs[rel[: -len(STUB_SUFFIX)]] = p
            else:
                plain[rel] = p
        patterns = LFS_PATTERNS + _gitattributes_lfs(folder)
        files: dict[str, RepoFile] = {}
        hidden: set[Path] = set()
        for rel, stub in stubs.items():
            files[rel], header = _stub_file(rel, stub)
            if header is not None:
                hidden.add(header.resolve())
        for rel, real in plain.items():
            if rel in files or real.resolve() in hidden:
                continue
            files[rel] = _real_file(rel, real, _is_lfs(rel, real.stat().st_size, patterns))
        files = dict(sorted(files.items()))
        dirs = {"/".join(path.split("/")[:i])
                for path in files for i in range(1, path.count("/") + 1)}
        meta_path = folder / META_FILE
        meta: dict[str, Any] = json.loads(meta_path.read_text()) if meta_path.is_file() else {}
        gated: Gated = False
        if (folder / GATED_FILE).is_file():
            gated = "manual" if "manual" in (folder / GATED_FILE).read_text() else "auto"
        elif meta.get("gated") in ("auto", "manual", True):
            gated = "manual" if meta["gated"] == "manual" else "auto"
        return cls(repo_id, folder, files, dirs, meta, gated, bool(meta.get("private", False)))

    def tree_oid(self, path: str) -> str:
        prefix = f"{path}/"
        h = hashlib.sha1(f"tree {path}\n".encode())
        for f in self.files.values():
            if f.path.startswith(prefix):
                h.update(f"{f.path}\0{f.etag}\n".encode())
        return h.hexdigest()

    def last_modified(self) -> float:
        return max((f.mtime for f in self.files.values()), default=self.folder.stat().st_mtime)

    def created(self) -> float:
        return min((f.mtime for f in self.files.values()), default=self.folder.stat().st_mtime)

    def safetensors_info(self) -> dict[str, Any] | None:
        """What the Hub computes from the `*.safetensors` headers: parameter counts per dtype."""
        params: Counter[str] = Counter()
        for f in self.files.values():
            if f.path.endswith(".safetensors") and f.size >= 8:
                params.update(_safetensors_params(f))
        if not params:
            return None
        return {"parameters": dict(params), "total": sum(params.values())}

    def config_info(self) -> dict[str, Any] | None:
        cfg = self.files.get("config.json")
        if cfg is None or cfg.size > 1024 * 1024:
            return None
        try:
            data = json.loads(cfg.read(0, cfg.size))
        except ValueError:
            return None
        if not isinstance(data, dict):
            return None
        return {k: data[k] for k in ("architectures", "model_type") if k in data}


def _safetensors_params(f: RepoFile) -> Counter[str]:
    counts: Counter[str] = Counter()
    (length,) = struct.unpack("<Q", f.read(0, 8))
    if length > 25_000_000 or 8 + length > f.size:
        return counts
    try:
        header = json.loads(f.read(8, 8 + length))
    except ValueError:
        return counts
    for name, tensor in header.items():
        if name == "__metadata__" or not isinstance(tensor, dict):
            continue
        dtype = str(tensor.get("dtype"))
        n = 1
        for dim in tensor.get("shape", []):
            n *= int(dim)
        if dtype in SAFETENSORS_DTYPES:
            counts[dtype] += n
    return counts


# --------------------------------------------------------------------------- protocol pieces


class HubError(Exception):
    """An error answer, shaped like the Hub's."""

    def __init__(self, status: int, message: str, code: str | None = None,
                 headers: Mapping[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code
        self.headers = dict(headers or {})


def repo_not_found(auth: Auth) -> HubError:
    # Unauthenticated, the Hub answers 401 for missing (and private) repos so as not to leak them.
    status = 401 if auth == "none" else 404
    return HubError(status, "Repository not found", "RepoNotFound")


def parse_range(header: str | None, size: int) -> tuple[int, int] | None:
    """(start, end) inclusive, or None to serve the whole body; HubError(416) if unsatisfiable."""
    if not header or "," in header:
        return None  # multiple ranges are allowed to be ignored (RFC 9110)
    unit, _, spec = header.strip().partition("=")
    first, sep, last = spec.strip().partition("-")
    if unit.strip().lower() != "bytes" or not sep:
        return None
    first, last = first.strip(), last.strip()
    if not (first.isdigit() or first == "") or not (last.isdigit() or last == ""):
        return None
    unsatisfiable = HubError(416, "Requested Range Not Satisfiable",
                             headers={"Content-Range": f"bytes */{size}"})
    if first == "":
        if last == "":
            return None
        n = int(last)
        if n == 0 or size == 0:
            raise unsatisfiable
        return max(0, size - n), size - 1
    start = int(first)
    end = int(last) if last else size - 1
    if last and end < start:
        return None  # syntactically invalid: ignored
    if start >= size:
        raise unsatisfiable
    return start, min(end, size - 1)


def _flag(query: Mapping[str, list[str]], name: str) -> bool:
    return any(v.lower() in ("1", "true", "yes") for v in query.get(name, []))


def _file_json(repo: Repo, f: RepoFile, expand: bool) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "file", "oid": f.git_oid, "size": f.size, "path": f.path}
    if f.sha256 is not None:
        out["lfs"] = {"oid": f.sha256, "size": f.size, "pointerSize": f.pointer_size()}
    if expand:
        out["lastCommit"] = {"id": repo.sha, "title": COMMIT_TITLE, "date": _iso(f.mtime)}
        out["securityFileStatus"] = {
            "status": "safe", "avScan": {"virusFound": False, "virusNames": None},
            "pickleImportScan": None,
        }
    return out


def _dir_json(repo: Repo, path: str, expand: bool) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "directory", "oid": repo.tree_oid(path), "size": 0, "path": path}
    if expand:
        out["lastCommit"] = {"id": repo.sha, "title": COMMIT_TITLE,
                             "date": _iso(repo.last_modified())}
    return out


def _sibling(f: RepoFile, blobs: bool) -> dict[str, Any]:
    out: dict[str, Any] = {"rfilename": f.path}
    if blobs:
        out["blobId"] = f.git_oid
        out["size"] = f.size
        if f.sha256 is not None:
            out["lfs"] = {"sha256": f.sha256, "size": f.size, "pointerSize": f.pointer_size()}
    return out


def model_info_json(repo: Repo, query: Mapping[str, list[str]]) -> dict[str, Any]:
    blobs = _flag(query, "blobs")
    org = repo.repo_id.split("/")[0]
    tags: list[str] = []
    if any(p.endswith(".safetensors") for p in repo.files):
        tags.append("safetensors")
    if any(p.endswith(".gguf") for p in repo.files):
        tags.append("gguf")
    full: dict[str, Any] = {
        "_id": hashlib.sha1(repo.repo_id.encode()).hexdigest()[:24],
        "id": repo.repo_id, "modelId": repo.repo_id, "author": org, "sha": repo.sha,
        "lastModified": _iso(repo.last_modified()), "createdAt": _iso(repo.created()),
        "private": repo.private, "gated": repo.gated, "disabled": False,
        "downloads": 0, "likes": 0, "tags": [*tags, "region:us"],
        "siblings": [_sibling(f, blobs) for f in repo.files.values()],
        "spaces": [], "usedStorage": sum(f.size for f in repo.files.values()),
    }
    computed = {"safetensors": repo.safetensors_info(), "config": repo.config_info()}
    full.update({k: v for k, v in computed.items() if v})
    reserved = {"_id", "id", "modelId", "sha", "siblings"}
    full.update({k: v for k, v in repo.meta.items() if k not in reserved})
    full["gated"], full["private"] = repo.gated, repo.private
    if "tags" in repo.meta:
        full["tags"] = list(dict.fromkeys([*repo.meta["tags"], *tags, "region:us"]))
    if _flag(query, "securityStatus"):
        full["securityRepoStatus"] = {"scansDone": True, "filesWithIssues": []}
    expand = query.get("expand", []) + query.get("expand[]", [])
    if not expand:
        return full
    # With `expand`, the Hub returns only the listed properties (plus `_id` and `id`).
    return {k: full[k] for k in ("_id", "id", *expand) if k in full}


def _parse_paths_body(body: bytes, content_type: str) -> tuple[list[str], bool]:
    if "json" in content_type:
        data = json.loads(body or b"{}")
        paths = data.get("paths", [])
        return [str(p) for p in (paths if isinstance(paths, list) else [paths])], bool(
            data.get("expand") in (True, "true", "True", "1"))
    form = parse_qs(body.decode(), keep_blank_values=True)
    return form.get("paths", []), _flag(form, "expand")


# --------------------------------------------------------------------------- server state


@dataclass(frozen=True)
class RequestRecord:
    """One request as the server saw it (headers with lower-case names)."""

    method: str
    path: str  # URL path, percent-decoded
    query: str
    headers: dict[str, str]


class HubState:
    """What the handler threads share: the repo root, tokens, counters and failure plans."""

    def __init__(self, root: Path, tokens: Iterable[str], ungranted_tokens: Iterable[str],
                 tree_page_size: int, tree_page_size_expanded: int) -> None:
        self.root = root
        self.tokens = frozenset(tokens)
        self.ungranted_tokens = frozenset(ungranted_tokens)
        self.tree_page_size = tree_page_size
        self.tree_page_size_expanded = tree_page_size_expanded
        self.lock = threading.Lock()
        self.counts: Counter[str] = Counter()
        self.log: list[RequestRecord] = []
        self.statuses: list[int] = []
        self.failures: dict[str, list[int]] = {}
        self.answers: dict[str, Any] = {}  # repo id -> a model-info answer sent verbatim

    def record(self, rec: RequestRecord) -> int:
        with self.lock:
            self.counts[rec.path] += 1
            self.log.append(rec)
            self.statuses.append(0)
            return len(self.log) - 1

    def set_status(self, index: int, status: int) -> None:
        with self.lock:
            if 0 <= index < len(self.statuses):
                self.statuses[index] = status

    def take_failure(self, key: str) -> int | None:
        with self.lock:
            plan = self.failures.get(key)
            if not plan:
                return None
            limit = plan.pop(0)
            if not plan:
                del self.failures[key]
            return limit

    def all_repos(self) -> list[Repo]:
        found = []
        if self.root.is_dir():
            for folder in sorted(p for p in self.root.glob("*/*") if p.is_dir()):
                repo = self.load_repo(folder.parent.name, folder.name)
                if repo is not None:
                    found.append(repo)
        return found

    def load_repo(self, org: str, name: str) -> Repo | None:
        for part in (org, name):
            if not part or part.startswith(".") or "/" in part or "\\" in part:
                return None
        folder = self.root / org / name
        return Repo.scan(f"{org}/{name}", folder) if folder.is_dir() else None


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], state: HubState) -> None:
        self.state = state
        self.open_sockets: set[socket.socket] = set()
        self.sockets_lock = threading.Lock()
        super().__init__(address, _Handler)

    def close_connections(self) -> None:
        with self.sockets_lock:
            socks = list(self.open_sockets)
        for sock in socks:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)


# --------------------------------------------------------------------------- HTTP handler


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "FakeHFHub/1.0"
    timeout = 60  # idle keep-alive connections are dropped after this
    _status_index = -1

    @property
    def hub(self) -> _Server:
        return cast(_Server, self.server)

    def setup(self) -> None:
        super().setup()
        with self.hub.sockets_lock:
            self.hub.open_sockets.add(self.connection)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            with self.hub.sockets_lock:
                self.hub.open_sockets.discard(self.connection)

    def log_message(self, format: str, *args: Any) -> None:
        if os.environ.get("FAKE_HF_HUB_VERBOSE"):
            sys.stderr.write(f"[fake-hf-hub] {format % args}\n")

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_HEAD(self) -> None:
        self._dispatch("HEAD")

    def do_POST(self) -> None:
        self._dispatch("POST")

    # ---- plumbing

    def _dispatch(self, method: str) -> None:
        split = urlsplit(self.path)
        body = b""
        if method == "POST":
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        headers = {k.lower(): v for k, v in self.headers.items()}
        record = RequestRecord(method, unquote(split.path), split.query, headers)
        self._status_index = self.hub.state.record(record)
        segments = [unquote(s) for s in split.path.split("/")[1:]]
        query = parse_qs(split.query, keep_blank_values=True)
        try:
            self._route(method, segments, query, body)
        except HubError as err:
            self._send_error(method, err)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except Exception as exc:  # a bug here: answer 500 rather than hang the client
            self._send_error(method, HubError(500, f"fake hub error: {exc!r}"))

    def send_response(self, code: int, message: str | None = None) -> None:
        self.hub.state.set_status(self._status_index, code)
        super().send_response(code, message)
        request_headers = getattr(self, "headers", None)
        trace = request_headers.get("X-Amzn-Trace-Id") if request_headers is not None else None
        self.send_header("X-Request-Id", trace or str(uuid.uuid4()))

    def _send_bytes(self, method: str, status: int, body: bytes, content_type: str,
                    headers: Mapping[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if method != "HEAD":
            self.wfile.write(body)

    def _send_json(self, method: str, data: Any, status: int = 200,
                   headers: Mapping[str, str] | None = None) -> None:
        self._send_bytes(method, status, json.dumps(data).encode(),
                         "application/json; charset=utf-8", headers)

    def _send_error(self, method: str, err: HubError) -> None:
        headers = dict(err.headers)
        if err.code:
            headers["X-Error-Code"] = err.code
        if err.status != 416:
            headers["X-Error-Message"] = err.message
        self._send_json(method, {"error": err.message}, err.status, headers)

    def _auth(self) -> Auth:
        value = self.headers.get("Authorization") or ""
        if not value:
            return "none"
        token = value.split(" ", 1)[1].strip() if value.lower().startswith("bearer ") else value
        if token in self.hub.state.tokens:
            return "granted"
        if token in self.hub.state.ungranted_tokens:
            return "ungranted"
        raise HubError(401, INVALID_CREDENTIALS)

    def _repo(self, org: str, name: str, auth: Auth) -> Repo:
        repo = self.hub.state.load_repo(org, name)
        if repo is None or (repo.private and auth != "granted"):
            raise repo_not_found(auth)
        return repo

    @staticmethod
    def _check_revision(repo: Repo, revision: str) -> None:
        if revision not in (*MAIN_REFS, repo.sha):
            raise HubError(404, f"Invalid rev id: {revision}", "RevisionNotFound")

    # ---- routes

    def _route(self, method: str, seg: list[str], query: dict[str, list[str]], body: bytes) -> None:
        auth = self._auth()
        if seg == ["api", "agent-harnesses"] and method != "POST":
            self._send_json(method, {"standardEnvVars": [], "harnesses": {}})
        elif seg == ["api", "whoami-v2"] and method != "POST":
            self._whoami(method, auth)
        elif seg == ["api", "models"] and method != "POST":
            self._list_models(method, query, auth)
        elif len(seg) >= 4 and seg[0] == "api" and seg[1] == "models":
            self._api_model(method, seg[2], seg[3], seg[4:], query, body, auth)
        elif len(seg) >= 4 and seg[0] == "api" and seg[1] in ("datasets", "spaces"):
            raise repo_not_found(auth)  # this stand-in serves model repos only
        elif len(seg) >= 5 and seg[2] == "resolve" and method in ("GET", "HEAD"):
            if seg[0] in ("datasets", "spaces", "buckets"):
                raise repo_not_found(auth)
            self._resolve(method, seg[0], seg[1], seg[3], "/".join(seg[4:]), auth)
        else:
            raise HubError(404, "Not Found")

    def _list_models(self, method: str, query: dict[str, list[str]], auth: Auth) -> None:
        """`GET /api/models` (list_models): `author`, `search` (a case-insensitive substring of
        the repo id, as the Hub matches it), `filter` (tags), `limit`; most downloaded first (here:
        by name). Entries carry what the Hub's list carries (id, author, tags, gated, ...)."""
        author = query.get("author", [""])[0]
        search = query.get("search", [""])[0].lower()
        wanted = set(query.get("filter", []))
        limit = int(query.get("limit", ["1000"])[0] or 1000)
        out = []
        for repo in self.hub.state.all_repos():
            if (author and repo.repo_id.split("/")[0] != author) or search not in (
                    repo.repo_id.lower()) or (repo.private and auth != "granted"):
                continue
            info = model_info_json(repo, {})
            if wanted and not wanted <= set(info["tags"]):
                continue
            out.append({k: info[k] for k in ("_id", "id", "modelId", "author", "private",
                                             "gated", "downloads", "likes", "tags",
                                             "createdAt", "lastModified") if k in info})
        self._send_json(method, out[:limit])

    def _whoami(self, method: str, auth: Auth) -> None:
        if auth == "none":
            raise HubError(401, INVALID_CREDENTIALS)
        self._send_json(method, {
            "type": "user", "id": "0" * 24, "name": "fake-hub-user", "fullname": "Fake Hub User",
            "isPro": False, "orgs": [],
            "auth": {"type": "access_token", "accessToken": {
                "displayName": "fake-hub-token",
                "role": "read" if auth == "granted" else "fineGrained",
            }},
        })

    def _api_model(self, method: str, org: str, name: str, tail: list[str],
                   query: dict[str, list[str]], body: bytes, auth: Auth) -> None:
        repo = self._repo(org, name, auth)
        if method == "GET" or method == "HEAD":
            if not tail or (len(tail) == 2 and tail[0] == "revision"):
                self._check_revision(repo, tail[1] if tail else "main")
                if repo.repo_id in self.hub.state.answers:  # a hostile Hub (answer_with)
                    self._send_json(method, self.hub.state.answers[repo.repo_id])
                    return
                self._send_json(method, model_info_json(repo, query))
                return
            if len(tail) >= 2 and tail[0] == "tree":
                self._check_revision(repo, tail[1])
                self._tree(method, repo, "/".join(tail[2:]).strip("/"), query)
                return
            if tail == ["refs"]:
                ref = {"name": "main", "ref": "refs/heads/main", "targetCommit": repo.sha}
                refs: dict[str, Any] = {"branches": [ref], "converts": [], "tags": []}
                if _flag(query, "include_prs"):
                    refs["pullRequests"] = []
                self._send_json(method, refs)
                return
        elif len(tail) == 2 and tail[0] == "paths-info":
            self._check_revision(repo, tail[1])
            paths, expand = _parse_paths_body(body, self.headers.get("Content-Type") or "")
            out = []
            for p in (q.strip("/") for q in paths):
                if p in repo.files:
                    out.append(_file_json(repo, repo.files[p], expand))
                elif p in repo.dirs:
                    out.append(_dir_json(repo, p, expand))
            self._send_json(method, out)
            return
        raise HubError(404, "Not Found")

    def _tree(self, method: str, repo: Repo, path: str, query: dict[str, list[str]]) -> None:
        if path and path not in repo.dirs:
            raise HubError(404, "Entry not found", "EntryNotFound",
                           {"X-Repo-Commit": repo.sha})
        recursive, expand = _flag(query, "recursive"), _flag(query, "expand")
        prefix = f"{path}/" if path else ""
        depth = prefix.count("/")
        entries: list[tuple[str, bool]] = [
            (d, True) for d in repo.dirs
            if d.startswith(prefix) and (recursive or d.count("/") == depth)
        ] + [
            (f, False) for f in repo.files
            if f.startswith(prefix) and (recursive or f.count("/") == depth)
        ]
        entries.sort(key=lambda e: (e[0].count("/"), not e[1], e[0]))  # trees first, as the Hub
        page_size = self.hub.state.tree_page_size_expanded if expand else (
            self.hub.state.tree_page_size)
        cursor = query.get("cursor", [""])[0]
        try:
            offset = int(base64.urlsafe_b64decode(cursor.encode()).decode()) if cursor else 0
        except ValueError as exc:
            raise HubError(400, "Invalid cursor") from exc
        page = entries[offset: offset + page_size]
        headers: dict[str, str] = {}
        if offset + page_size < len(entries):
            params = {"recursive": str(recursive).lower(), "expand": str(expand).lower(),
                      "cursor": base64.urlsafe_b64encode(str(offset + page_size).encode()).decode()}
            host = self.headers.get("Host") or f"127.0.0.1:{self.hub.server_address[1]}"
            link = f"http://{host}{urlsplit(self.path).path}?{urlencode(params)}"
            headers["Link"] = f'<{link}>; rel="next"'
        data = [_dir_json(repo, p, expand) if is_dir else _file_json(repo, repo.files[p], expand)
                for p, is_dir in page]
        self._send_json(method, data, headers=headers)

    def _resolve(self, method: str, org: str, name: str, revision: str, path: str,
                 auth: Auth) -> None:
        repo = self._repo(org, name, auth)
        if repo.gated and auth != "granted":
            if auth == "none":
                msg = (f"Access to model {repo.repo_id} is restricted. You must have access to it "
                       "and be authenticated to access it. Please log in.")
                raise HubError(401, msg, "GatedRepo")
            msg = (f"Access to model {repo.repo_id} is restricted and you are not in the "
                   f"authorized list. Visit https://huggingface.co/{repo.repo_id} to ask for "
                   "access.")
            raise HubError(403, msg, "GatedRepo")
        self._check_revision(repo, revision)
        f = repo.files.get(path)
        if f is None:
            raise HubError(404, "Entry not found", "EntryNotFound", {"X-Repo-Commit": repo.sha})
        self._send_file(method, repo, f)

    def _send_file(self, method: str, repo: Repo, f: RepoFile) -> None:
        headers = {
            "Accept-Ranges": "bytes",
            "ETag": f'"{f.etag}"',
            "X-Repo-Commit": repo.sha,
            "Content-Disposition": (f"inline; filename*=UTF-8''{quote(f.path.rsplit('/', 1)[-1])};"
                                    f' filename="{f.path.rsplit("/", 1)[-1]}";'),
        }
        if f.sha256 is not None:
            headers["X-Linked-Etag"] = f'"{f.sha256}"'
            headers["X-Linked-Size"] = str(f.size)
        try:
            span = parse_range(self.headers.get("Range"), f.size)
        except HubError as err:
            err.headers.update(headers)
            raise
        start, end = span if span is not None else (0, f.size - 1)
        length = end - start + 1 if f.size else 0
        self.send_response(206 if span is not None else 200)
        if span is not None:
            self.send_header("Content-Range", f"bytes {start}-{end}/{f.size}")
        self.send_header("Content-Type", _content_type(f.path))
        self.send_header("Content-Length", str(length))
        for k, v in headers.items():
            self.send_header(k, v)
        self.end_headers()
        if method == "HEAD":
            return
        cut = self.hub.state.take_failure(f"{repo.repo_id}/{f.path}")
        sent = 0
        for chunk in f.iter_bytes(start, start + length):
            if cut is not None and sent + len(chunk) >= cut:
                self.wfile.write(chunk[: cut - sent])
                self._drop_connection()
                return
            self.wfile.write(chunk)
            sent += len(chunk)

    def _drop_connection(self) -> None:
        self.wfile.flush()
        self.close_connection = True
        with contextlib.suppress(OSError):
            self.connection.shutdown(socket.SHUT_RDWR)


def _content_type(path: str) -> str:
    if path.endswith(".json"):
        return "application/json; charset=utf-8"
    if path.endswith((".md", ".txt", ".py", ".yaml", ".yml", ".jinja")):
        return "text/plain; charset=utf-8"
    return "application/octet-stream"


# --------------------------------------------------------------------------- test helpers


def write_stub(target: Path, size: int, header: Path | str | None = None,
               sha256: str | None = None) -> Path:
    """Describe file `target` (of `size` bytes) by a `target.stub.json` sidecar; returns it."""
    spec: dict[str, Any] = {"size": size}
    if header is not None:
        spec["header"] = str(header)
    if sha256 is not None:
        spec["sha256"] = sha256
    stub = target.with_name(target.name + STUB_SUFFIX)
    stub.parent.mkdir(parents=True, exist_ok=True)
    stub.write_text(json.dumps(spec))
    return stub


def write_meta(repo_dir: Path, **fields: Any) -> Path:
    """Write the repo's `.meta.json` (extra model-info fields)."""
    repo_dir.mkdir(parents=True, exist_ok=True)
    path = repo_dir / META_FILE
    path.write_text(json.dumps(fields))
    return path


def gate(repo_dir: Path, mode: Literal["auto", "manual"] = "auto") -> Path:
    """Mark the repo as gated."""
    repo_dir.mkdir(parents=True, exist_ok=True)
    path = repo_dir / GATED_FILE
    path.write_text(mode)
    return path


class FakeHub:
    """Runs the stand-in Hub on 127.0.0.1 in a background thread.

    `with FakeHub(root, tokens=["hf_x"]) as hub:` starts it on a free port (`hub.url`); `stop()`
    and `start()` again reuse the same port. `requests` counts requests per URL path (percent-
    decoded, no query), `total_requests` all of them, `log` lists each request; `reset_counts()`
    clears them. `fail_after_bytes("org/repo/file", n)` cuts the next GET body of that file after
    n bytes (of that response's body) and drops the connection. `answer_with("org/repo", data)`
    answers that repo's model info with `data` as it is (any JSON: a hostile Hub's answer).
    """

    def __init__(self, root: Path | str, *, tokens: Iterable[str] = (),
                 ungranted_tokens: Iterable[str] = (), host: str = "127.0.0.1", port: int = 0,
                 tree_page_size: int = TREE_PAGE_SIZE,
                 tree_page_size_expanded: int = TREE_PAGE_SIZE_EXPANDED) -> None:
        self.root = Path(root)
        self.host = host
        self.port = port
        self.state = HubState(self.root, tokens, ungranted_tokens, tree_page_size,
                              tree_page_size_expanded)
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        if not self.port:
            raise RuntimeError("FakeHub has not been started")
        return f"http://{self.host}:{self.port}"

    def answer_with(self, repo_id: str, data: Any) -> None:
        self.state.answers[repo_id] = data

    @property
    def running(self) -> bool:
        return self._server is not None

    def start(self) -> FakeHub:
        if self._server is not None:
            return self
        server = _Server((self.host, self.port), self.state)
        self.port = server.server_address[1]
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name=f"fake-hf-hub:{self.port}", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        server, thread = self._server, self._thread
        self._server = self._thread = None
        if server is None:
            return
        server.shutdown()
        server.close_connections()  # keep-alive connections would otherwise still be served
        server.server_close()
        if thread is not None:
            thread.join(timeout=5)

    def restart(self) -> FakeHub:
        self.stop()
        return self.start()

    def __enter__(self) -> FakeHub:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    @property
    def requests(self) -> Counter[str]:
        with self.state.lock:
            return Counter(self.state.counts)

    @property
    def total_requests(self) -> int:
        with self.state.lock:
            return len(self.state.log)

    @property
    def log(self) -> list[RequestRecord]:
        with self.state.lock:
            return list(self.state.log)

    @property
    def statuses(self) -> list[int]:
        """Status code answered to each request in `log` (0 while in flight)."""
        with self.state.lock:
            return list(self.state.statuses)

    def requests_to(self, path: str, method: str | None = None) -> list[RequestRecord]:
        """Logged requests whose URL path is `path` (leading slash optional)."""
        want = "/" + path.lstrip("/")
        return [r for r in self.log if r.path == want and (method is None or r.method == method)]

    def reset_counts(self) -> None:
        with self.state.lock:
            self.state.counts.clear()
            self.state.log.clear()
            self.state.statuses.clear()

    def fail_after_bytes(self, path: str, n: int, times: int = 1) -> None:
        """Cut the next `times` GET bodies of file `org/repo/path/in/repo` after `n` bytes."""
        with self.state.lock:
            self.state.failures.setdefault(path.strip("/"), []).extend([n] * times)

    def env(self) -> dict[str, str]:
        """Environment for a subprocess that should use this Hub (the client reads it at import)."""
        return {"HF_ENDPOINT": self.url}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Serve ROOT/<org>/<repo>/ as a stand-in HF Hub.")
    parser.add_argument("root", type=Path)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--token", action="append", default=[], help="token granted access")
    args = parser.parse_args(argv)
    hub = FakeHub(args.root, tokens=args.token, host=args.host, port=args.port).start()
    print(f"HF_ENDPOINT={hub.url}", flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        hub.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
