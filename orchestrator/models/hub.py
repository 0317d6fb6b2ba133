"""Model metadata from the Hugging Face Hub, without downloading weights, cached per revision.

Through `huggingface_hub` (it honours HF_ENDPOINT, HF_TOKEN, HF_HUB_OFFLINE and gated repos):
a repo's files and sizes and its safetensors parameter count (`model_info`), its `config.json`
and `tokenizer.json` (small files), and for GGUF files the metadata header alone, read with
ranged requests (the architecture and the tokenizer live there). Everything read is kept under
specctl's cache dir, `hub/<org>--<repo>/<revision>/`, with the revision `main` pointed to in
`refs.json`: a second plan makes no request and works offline (`specctl models pull` refreshes
the revision). The client is imported only when the cache cannot answer.
"""

from __future__ import annotations

import errno
import json
import os
import re
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from specctl.orchestrator.contract.model import RepoFile
from specctl.orchestrator.errors import ModelError, ReadOnlyError
from specctl.orchestrator.files import UnreadableError, read_text, write_atomic
from specctl.orchestrator.models import gguf_meta

T = TypeVar("T")

REPO = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}")
_SPLIT = re.compile(r"-(\d{5})-of-(\d{5})\.gguf$")
FIRST_READ = 4 << 20  # most GGUF metadata (a 150k-token vocabulary) fits in a few MB
MAX_HEADER = 128 << 20
SMALL_FILES = ("config.json", "tokenizer.json", "tokenizer_config.json")
SEARCH_TTL = 24 * 3600
CALL_TIMEOUT = 10.0  # seconds one metadata call to the Hub may take, retries included
BUDGET = 20.0  # seconds of metadata calls one command may wait for in all (a slow Hub)
READ_RATE = 4 << 20  # bytes a second a ranged read may assume on top of CALL_TIMEOUT
MAX_CACHED = 16 << 20  # a cached repo listing or search answer (a few KB; huge repos ~1 MB)


def within(seconds: float, call: Callable[[], T]) -> T:
    """`call()`, or TimeoutError after `seconds`: every Hub call has a deadline, whatever the
    client does inside (its own retries, a request sent with no timeout). A call that runs
    late is left to finish in a daemon thread; its answer is dropped."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = call()
        except BaseException as exc:  # handed to the caller, whatever it is
            box["error"] = exc

    worker = threading.Thread(target=run, name="specctl-hub-call", daemon=True)
    worker.start()
    worker.join(seconds)
    if worker.is_alive():
        raise TimeoutError(f"no answer within {seconds:.0f} s")
    if "error" in box:
        raise box["error"]
    return box["value"]  # type: ignore[no-any-return]


def _cache_text(path: Path, limit: int = MAX_CACHED) -> str | None:
    """A file of specctl's Hub cache, read bounded (a FIFO, a link to /dev/zero or a huge file
    is no answer, never a hang); None when there is none or it cannot be read."""
    try:
        return read_text(path, limit=limit)
    except (OSError, UnreadableError):
        return None


# llama.cpp's sidecar files beside a target GGUF (`mtp-<model>.gguf`, or in an `MTP/` folder):
# the kind is asked for as the quantisation, `hf:org/repo:MTP`
SIDECARS = ("mtp", "dflash", "dspark", "eagle3")
_SIDECAR = re.compile(r"(?:^|/)(mtp|dflash|dspark|eagle3)(?:[-_/.]|$)", re.IGNORECASE)


def sidecar_kind(path: str) -> str | None:
    """'mtp' for 'mtp-gemma-4-E4B-it.gguf' or 'MTP/x.gguf'; None for a model file."""
    m = _SIDECAR.search(path)
    return m.group(1).lower() if m and path.endswith(".gguf") else None
REACH_TIMEOUT = 5.0  # seconds to connect to the Hub's host before calling it unreachable
_PROXIES = ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy")


def _no_answer(why: str) -> str:
    return (f"cannot reach the Hugging Face Hub (no answer: {why}); check the network or "
            "HF_ENDPOINT, or set HF_HUB_OFFLINE=1 to use what is cached")


def _http_error(name: str, what: str, exc: Exception) -> ModelError:
    """An HTTP error status from the Hub as one line: 401 is the token, the rest may pass."""
    response = getattr(exc, "response", None)
    status = response.status_code if response is not None else "an error"
    if status == 401:
        return ModelError(f"{name}: the Hub refused the Hugging Face token (401): it is wrong or "
                          "revoked; fix HF_TOKEN or log in again (`hf auth login`)")
    return ModelError(f"{name}: the Hub answered {status} for {what}; try again later")


class Repo(BaseModel):
    """What the Hub says of one revision of a model repo (also its cached record, validated
    the same way when read back)."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    name: str = Field(pattern=REPO.pattern)
    revision: str = Field(pattern=r"^[0-9a-f]{40}$")
    files: tuple[RepoFile, ...]
    params: int | None = Field(None, ge=0)  # the safetensors parameter count
    gated: bool = False
    base_model: str | None = Field(None, pattern=REPO.pattern)  # its model card's base_model

    def _all_ggufs(self) -> list[RepoFile]:
        return [f for f in self.files if f.path.endswith(".gguf") and "mmproj" not in f.path]

    def ggufs(self) -> list[RepoFile]:
        """The model's GGUF files; sidecars beside them left out (a repo of nothing but heads,
        e.g. `EAGLE3-...-GGUF`, is a model of its own)."""
        found = self._all_ggufs()
        return [f for f in found if sidecar_kind(f.path) is None] or found

    def sidecars(self) -> dict[str, list[RepoFile]]:
        """llama.cpp sidecar files beside the model (MTP, DFlash, DSpark, EAGLE-3) by kind."""
        found = self._all_ggufs()
        if all(sidecar_kind(f.path) for f in found):
            return {}
        out: dict[str, list[RepoFile]] = {}
        for f in sorted(found, key=lambda f: f.path):
            kind = sidecar_kind(f.path)
            if kind:
                out.setdefault(kind, []).append(f)
        return out

    def quants(self) -> dict[str, list[RepoFile]]:
        """Quantisation -> its file(s): a split GGUF's parts in order, the first holding the
        metadata."""
        out: dict[str, list[RepoFile]] = {}
        for f in sorted(self.ggufs(), key=lambda f: f.path):
            if f.quant:
                out.setdefault(f.quant, []).append(f)
        return out

    def weights(self) -> list[RepoFile]:
        return [f for f in self.files if f.path.endswith(".safetensors")]


class _Search(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    at: float
    repos: tuple[str, ...]


def check_name(name: str) -> str:
    if not REPO.fullmatch(name) or ".." in name:
        raise ModelError(f"'{name}' is not a Hugging Face repo id (org/name)")
    return name


def _safe_file(path: str) -> str:
    """A repo file's path as one name in our cache dir (no folders, no '..')."""
    if not path or path.startswith("/") or any(p in ("", ".", "..") for p in path.split("/")):
        raise ModelError(f"the Hub listed a file with an unsafe path: {path!r}")
    return path.replace("/", "--")


class Hub:
    """Hub metadata with a cache under `root` (specctl's cache dir / "hub")."""

    def __init__(self, root: Path, endpoint: str | None = None, offline: bool = False,
                 downloads: Path | None = None) -> None:
        self.root, self.endpoint, self.offline = root, endpoint, offline
        self.downloads = downloads  # the Hugging Face cache files go to (None: its default)
        self.requests = 0  # made by this object (tests and `plan` timing read it)
        self.unreachable = ""  # why the Hub could not be reached, once found (fail fast after)
        self._reached = False
        self.waited = 0.0  # seconds spent waiting for metadata calls (against BUDGET)

    # -- the cache ---------------------------------------------------------------------------
    def _dir(self, name: str) -> Path:
        return self.root / check_name(name).replace("/", "--")

    def _cached_ref(self, name: str) -> str | None:
        text = _cache_text(self._dir(name) / "refs.json", limit=4096)
        try:
            data = json.loads(text) if text is not None else None
        except (ValueError, RecursionError):
            return None
        rev = data.get("main") if isinstance(data, dict) else None
        return rev if isinstance(rev, str) and re.fullmatch(r"[0-9a-f]{40}", rev) else None

    def _cached_repo(self, name: str, revision: str) -> Repo | None:
        """The cached record, validated; one that fails is set aside and asked again."""
        path = self._dir(name) / revision / "repo.json"
        text = _cache_text(path)
        if text is None:
            return None
        try:
            return Repo.model_validate_json(text)
        except ValueError:  # pydantic's ValidationError, or JSON nested too deep
            _set_aside(path)
            return None

    def cached(self, name: str) -> Repo | None:
        rev = self._cached_ref(name)
        return self._cached_repo(name, rev) if rev else None

    # -- asking the Hub ----------------------------------------------------------------------
    @contextmanager
    def _asking(self, name: str, what: str) -> Iterator[None]:
        """Turn the client's errors into one line that names the repo and what to do."""
        import httpx
        from huggingface_hub import errors

        if self.offline:
            raise ModelError(f"{name}: {what} is not in specctl's cache and HF_HUB_OFFLINE is "
                             "set; run once with network (or `specctl models pull hf:"
                             f"{name}`), or unset HF_HUB_OFFLINE")
        self._check_reachable()
        self.requests += 1
        try:
            yield
        except errors.GatedRepoError as exc:
            raise self._gated(name, exc) from None
        except errors.RepositoryNotFoundError:
            raise ModelError(f"no Hugging Face repo {name} (or it is private): check the name, "
                             "or log in (`hf auth login` or HF_TOKEN)") from None
        except errors.RevisionNotFoundError:
            raise ModelError(f"{name}: the revision is not on the Hub") from None
        except errors.EntryNotFoundError:
            raise ModelError(f"{name}: {what} is not in the repo") from None
        except errors.OfflineModeIsEnabled:
            raise ModelError(f"{name}: {what} is not in specctl's cache and HF_HUB_OFFLINE is "
                             "set; run once with network") from None
        except errors.HfHubHTTPError as exc:
            raise _http_error(name, what, exc) from None
        except (OSError, ValueError) as exc:  # connection refused, DNS, timeouts (httpx errors)
            if getattr(exc, "errno", None) == errno.EROFS:  # writing the cache, not the network
                raise ReadOnlyError(getattr(exc, "filename", None) or self.root) from None
            raise ModelError(f"{name}: cannot reach the Hugging Face Hub for {what} "
                             f"({type(exc).__name__}); check the network or HF_ENDPOINT, or set "
                             "HF_HUB_OFFLINE=1 to use what is cached") from None
        except (httpx.HTTPError, httpx.InvalidURL) as exc:  # the client's own transport errors
            raise ModelError(f"{name}: cannot reach the Hugging Face Hub for {what} "
                             f"({type(exc).__name__}); check the network or HF_ENDPOINT"
                             ) from None

    @contextmanager
    def _guarded(self, name: str, what: str) -> Iterator[None]:
        """Inside `_asking`: once the Hub did not answer, later calls fail at once (a Hub that
        never answers costs one deadline, not one per candidate); an answer of the wrong shape
        (model info that is a list, siblings that are text) is one line."""
        import httpx

        if self.unreachable:
            raise ModelError(f"{name}: {what}: {self.unreachable}")
        try:
            yield
        except OSError as exc:  # TimeoutError, connection refused
            if getattr(exc, "response", None) is None:  # an HTTP status (404, gated) answered
                self.unreachable = _no_answer(type(exc).__name__)
            raise
        except (TypeError, KeyError, AttributeError, IndexError) as exc:
            raise ModelError(f"{name}: the Hub's answer for {what} is not what the Hub sends "
                             f"({type(exc).__name__}); check HF_ENDPOINT") from None
        except (httpx.HTTPError, httpx.InvalidURL) as exc:
            self.unreachable = _no_answer(type(exc).__name__)
            raise

    def _ask(self, name: str, what: str, call: Callable[[], T],
             seconds: float = CALL_TIMEOUT) -> T:
        """One call to the Hub: its errors mapped to one line, within `seconds`."""
        with self._asking(name, what), self._guarded(name, what):
            left = BUDGET - self.waited
            if left <= 0:
                self.unreachable = _no_answer(f"it took more than {BUDGET:.0f} s in all")
                raise TimeoutError(self.unreachable)
            started = time.monotonic()
            try:
                return within(min(seconds, left), call)
            finally:
                self.waited += time.monotonic() - started

    def _gated(self, name: str, exc: Exception) -> ModelError:
        """A gated repo: 401 without a token (or one the Hub does not know), 403 with a token
        that has no access yet; both say where access is requested."""
        page = f"{(self.endpoint or 'https://huggingface.co').rstrip('/')}/{name}"
        response = getattr(exc, "response", None)
        if response is not None and response.status_code == 403:
            return ModelError(f"{name} is gated and your token has no access yet: request access "
                              f"on {page} (granted per account), then run again")
        return ModelError(f"{name} is gated: request access on {page}, then log in with an "
                          "account that has it (`hf auth login` or HF_TOKEN)")

    def _check_reachable(self) -> None:
        """Fail fast, once per command, when the Hub's host cannot be reached: the client would
        spend ~24 s in retries of each search (a proxy, when set, is left to the client)."""
        if self.unreachable:
            raise ModelError(self.unreachable)
        if self._reached or any(os.environ.get(v) for v in _PROXIES):
            return
        url = urlsplit(self.endpoint or os.environ.get("HF_ENDPOINT") or "https://huggingface.co")
        port = url.port or (443 if url.scheme == "https" else 80)
        try:
            socket.create_connection((url.hostname or "", port), timeout=REACH_TIMEOUT).close()
        except OSError as exc:
            self.unreachable = (f"cannot reach the Hugging Face Hub at {url.netloc} "
                                f"({exc.strerror or type(exc).__name__}); check the network or "
                                "HF_ENDPOINT, or set HF_HUB_OFFLINE=1 to use what is cached")
            raise ModelError(self.unreachable) from None
        self._reached = True

    def repo(self, name: str, refresh: bool = False) -> Repo:
        """The repo at `main`: from the cache, else from the Hub (and then cached)."""
        found = None if refresh else self.cached(name)
        if found is not None:
            return found
        from huggingface_hub import HfApi

        info = self._ask(name, "the repo's file list", lambda: HfApi(
            endpoint=self.endpoint).model_info(name, files_metadata=True,
                                               timeout=CALL_TIMEOUT))
        repo = listing(name, info)
        folder = self._dir(name)
        self._keep(folder / repo.revision / "repo.json", repo.model_dump_json() + "\n")
        self._keep(folder / "refs.json", json.dumps({"main": repo.revision,
                                                     "at": int(time.time())}) + "\n")
        return repo

    def _read(self, repo: Repo, path: str, start: int, end: int) -> bytes:
        from huggingface_hub import HfFileSystem

        fs = HfFileSystem(endpoint=self.endpoint, skip_instance_cache=True)
        data = self._ask(repo.name, path, lambda: fs.cat_file(
            f"{repo.name}/{path}", start=start, end=end, revision=repo.revision),
            CALL_TIMEOUT + (end - start) / READ_RATE)
        if not isinstance(data, bytes) or len(data) > end - start:
            raise ModelError(f"{repo.name}/{path}: the Hub sent {len(data)} bytes for a "
                             f"range of {end - start}")
        return data

    def gguf_header(self, repo: Repo, file: RepoFile) -> Path:
        """A local file holding `file`'s GGUF metadata (the bytes up to its end), read with
        ranged requests that grow until the metadata is whole."""
        out = self._dir(repo.name) / repo.revision / (_safe_file(file.path) + ".header")
        if out.is_file():
            return out
        size, data = min(FIRST_READ, file.size), b""
        while True:
            data += self._read(repo, file.path, len(data), size)
            try:
                end = gguf_meta.parse(data)[1]
                break
            except EOFError:
                if size >= min(MAX_HEADER, file.size):
                    raise ModelError(f"{repo.name}/{file.path}: no complete GGUF metadata in "
                                     f"its first {size >> 20} MB") from None
                size = min(size * 4, MAX_HEADER, file.size)
            except ValueError as exc:
                raise ModelError(f"{repo.name}/{file.path} is not a GGUF file ({exc})") from None
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(data[:end])
        return out

    def small_files(self, repo: Repo) -> Path:
        """A folder with the repo's config.json and tokenizer files (what planning reads)."""
        folder = self._dir(repo.name) / repo.revision / "meta"
        present = {f.path for f in repo.files}
        wanted = [f for f in SMALL_FILES if f in present]
        if "config.json" not in present:
            raise ModelError(f"{repo.name} has no config.json and no GGUF file; is it a model?")
        for name in wanted:
            if not (folder / name).is_file():
                size = next(f.size for f in repo.files if f.path == name)
                if size > MAX_HEADER:
                    raise ModelError(f"{repo.name}/{name} is implausibly large ({size} bytes)")
                data = self._read(repo, name, 0, size)
                folder.mkdir(parents=True, exist_ok=True)
                (folder / name).write_bytes(data)
        return folder

    def fetch(self, repo: str, revision: str, file: RepoFile) -> Path:
        """Download one file into the standard Hugging Face cache (huggingface_hub's progress
        bar; a dropped connection resumes within the call; a file already there is not fetched
        again), then check its size and SHA-256. A partial file is never left in the cache."""
        from huggingface_hub import hf_hub_download

        with self._asking(repo, file.path):
            path = Path(hf_hub_download(repo, file.path, revision=revision,
                                        endpoint=self.endpoint, cache_dir=self.downloads))
        verify(path, file)
        return path

    def search(self, author: str, text: str, limit: int = 40) -> list[str]:
        """Repo ids by `author` ("" for anyone's) whose id contains `text` (the Hub's own
        search); an answer is reused for a day, and for ever offline."""
        key = re.sub(r"[^A-Za-z0-9._-]", "_", f"{author}--{text}")[:150]
        path = self.root / "search" / f"{key}.json"
        answer = _cache_text(path)
        try:
            cached = _Search.model_validate_json(answer) if answer is not None else None
            if cached is not None and (self.offline or time.time() - cached.at < SEARCH_TTL):
                return list(cached.repos)
        except ValueError:
            _set_aside(path)
        from huggingface_hub import HfApi

        repos = self._ask(f"{author or '*'}/*", f"models matching '{text}'", lambda: [
            m.id for m in HfApi(endpoint=self.endpoint).list_models(
                author=author or None, search=text, limit=limit)])
        found = _Search(at=time.time(), repos=tuple(
            r for r in repos if isinstance(r, str) and REPO.fullmatch(r)))
        self._keep(path, found.model_dump_json() + "\n")
        return list(found.repos)

    def _keep(self, path: Path, text: str) -> None:
        """Cache an answer; a read-only cache names the folder to make writable (its root)."""
        try:
            write_atomic(path, text)
        except ReadOnlyError:
            raise ReadOnlyError(self.root) from None


def _base_model(card: Any) -> str | None:
    """The model card's `base_model` (a repo id, or a list whose first is the one), when it is
    one; anything else is no base model rather than a refusal of the whole repo."""
    value = getattr(card, "base_model", None) if card is not None else None
    if isinstance(value, list):
        value = value[0] if value else None
    return value if isinstance(value, str) and REPO.fullmatch(value) else None
def _set_aside(path: Path) -> None:
    with suppress(OSError):
        path.replace(path.with_suffix(".json.corrupt"))


def listing(name: str, info: Any) -> Repo:
    """The Hub's model info (huggingface_hub's ModelInfo) as a Repo, every field checked: an
    answer of the wrong shape (siblings that are text, sizes that are not numbers) is one line."""
    siblings = getattr(info, "siblings", None) or []
    if not isinstance(siblings, list):
        raise ModelError(f"{name}: the Hub's answer is not a model repo listing (siblings: "
                         f"{type(siblings).__name__}, not a list); check HF_ENDPOINT")
    safetensors = getattr(info, "safetensors", None)
    data = {"name": name, "revision": getattr(info, "sha", None),
            "params": getattr(safetensors, "total", None) if safetensors else None,
            "gated": getattr(info, "gated", False) not in (False, None),
            "base_model": _base_model(getattr(info, "card_data", None)),
            "files": tuple({"path": getattr(s, "rfilename", s), "size": getattr(s, "size", 0)
                            or 0, "sha256": getattr(getattr(s, "lfs", None), "sha256", None)}
                           for s in siblings)}
    try:
        return Repo.model_validate(data, strict=True)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"])
        raise ModelError(f"{name}: the Hub's answer is not a model repo listing ({where}: "
                         f"{err['msg']}); check HF_ENDPOINT") from None


def verify(path: Path, file: RepoFile) -> None:
    """Size, and SHA-256 when the Hub gave one (LFS files); a mismatch removes the file."""
    import hashlib

    size = path.stat().st_size
    problem = f"{size} bytes, expected {file.size}" if size != file.size else ""
    if not problem and file.sha256:
        digest = hashlib.sha256()
        with path.open("rb") as fh:
            for block in iter(lambda: fh.read(1 << 22), b""):
                digest.update(block)
        if digest.hexdigest() != file.sha256:
            problem = f"SHA-256 {digest.hexdigest()[:12]}..., expected {file.sha256[:12]}..."
    if problem:
        path.resolve().unlink(missing_ok=True)
        path.unlink(missing_ok=True)
        raise ModelError(f"{file.path} arrived damaged ({problem}); removed it, pull again")


def pick_quant(repo: Repo, quant: str | None) -> list[RepoFile]:
    """The GGUF file(s) of `quant` in the repo; a clear error listing the ones it has."""
    sidecars = repo.sidecars()
    if quant and quant.lower() in SIDECARS:
        if quant.lower() not in sidecars:
            raise ModelError(f"{repo.name} has no {quant.upper()} sidecar file")
        return sidecars[quant.lower()][:1]
    quants = repo.quants()
    if not quants:
        raise ModelError(f"{repo.name} has no GGUF files; name a repo of GGUF files (its name "
                         "usually ends in -GGUF)")
    if quant and quant.upper() in quants:
        return quants[quant.upper()]
    have = ", ".join(sorted(quants))
    if quant:
        raise ModelError(f"{repo.name} has no {quant} file; choose one of {have} "
                         f"(hf:{repo.name}:QUANT)")
    if len(quants) == 1:
        return next(iter(quants.values()))
    raise ModelError(f"{repo.name} has several quantisations ({have}); name one as "
                     f"hf:{repo.name}:QUANT")
