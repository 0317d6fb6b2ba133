"""Ollama's on-disk model store: resolve `ollama:name:tag` to the GGUF blob it serves.

Layout: `<models>/manifests/<registry>/<namespace>/<name>/<tag>` is a JSON manifest whose layer of
media type `application/vnd.ollama.image.model` names the blob `<models>/blobs/sha256-<hex>`.
The models dir is $OLLAMA_MODELS, else ~/.ollama/models (macOS and user installs) or
/usr/share/ollama/.ollama/models (the Linux service).
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import ClassVar

from pydantic import BaseModel, ConfigDict, ValidationError

from specctl.orchestrator import http
from specctl.orchestrator.contract.stores import ModelStore
from specctl.orchestrator.errors import ModelError, first_problem
from specctl.orchestrator.files import UnreadableError, read_text
from specctl.orchestrator.humanize import Say

MODEL_LAYER = "application/vnd.ollama.image.model"
REGISTRY = "registry.ollama.ai"
_PART = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")  # a name, namespace or tag: no "..", "/"
_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")


class _Layer(BaseModel):
    model_config = ConfigDict(strict=True, defer_build=True)
    mediaType: str  # Ollama's key
    digest: str


class _Manifest(BaseModel):
    """The part of an Ollama manifest specctl reads; another tool's file: validated."""

    model_config = ConfigDict(strict=True, defer_build=True)
    layers: list[_Layer]


def models_dir(env: Mapping[str, str], home: Path) -> Path:
    if env.get("OLLAMA_MODELS"):
        return Path(env["OLLAMA_MODELS"])
    user = home / ".ollama" / "models"
    service = Path("/usr/share/ollama/.ollama/models")
    return user if user.is_dir() or not service.is_dir() else service


def manifest_path(name_tag: str, root: Path) -> Path:
    name, _, tag = name_tag.partition(":")
    parts = name.split("/")
    if len(parts) == 1:
        parts = [REGISTRY, "library", *parts]
    elif len(parts) == 2:
        parts = [REGISTRY, *parts]
    tag = tag or "latest"
    bad = next((p for p in [*parts, tag] if not _PART.fullmatch(p)), None)
    if bad is not None:
        raise ModelError(f"'ollama:{name_tag}' is not an Ollama model name ('{bad}'); names are "
                         "like qwen2.5-coder:1.5b or namespace/name:tag")
    return root / "manifests" / Path(*parts) / tag


def blob_for(name_tag: str, root: Path) -> Path | None:
    """The GGUF blob of an Ollama model, None when the model is not pulled."""
    path = manifest_path(name_tag, root)
    try:
        manifest = _Manifest.model_validate_json(read_text(path, limit=1 << 20))
    except FileNotFoundError:
        return None
    except (OSError, UnreadableError, ValidationError) as exc:
        why = first_problem(exc) if isinstance(exc, ValidationError) else str(exc)
        raise ModelError(f"Ollama manifest {path} is unreadable ({why}); `ollama pull "
                         f"{name_tag}` again") from None
    for layer in manifest.layers:
        if layer.mediaType == MODEL_LAYER:
            if not _DIGEST.fullmatch(layer.digest):
                raise ModelError(f"Ollama manifest {path} names a model blob "
                                 f"{layer.digest[:80]!r} that is not a sha256 digest; "
                                 f"`ollama pull {name_tag}` again")
            blob = root / "blobs" / layer.digest.replace(":", "-")
            if not blob.is_file():
                raise ModelError(f"Ollama blob {blob} for {name_tag} is missing; "
                                 f"`ollama pull {name_tag}` again")
            return blob
    raise ModelError(f"{path} has no model layer (is {name_tag} an adapter or a projector?)")


def all_models(root: Path) -> Iterator[tuple[str, Path]]:
    """(name:tag, blob) of every pulled model."""
    base = root / "manifests"
    if not base.is_dir():
        return
    for manifest in sorted(p for p in base.rglob("*") if p.is_file()):
        rel = manifest.relative_to(base).parts
        if len(rel) < 4:
            continue
        registry, namespace, *name, tag = rel
        short = "/".join(name) if (registry, namespace) == (REGISTRY, "library") else \
            "/".join([namespace, *name])
        try:
            blob = blob_for(f"{short}:{tag}", root)
        except ModelError:
            continue
        if blob is not None:
            yield f"{short}:{tag}", blob


class OllamaStore(ModelStore):
    """`ollama:name[:tag]` references: the models Ollama has pulled, as GGUF files."""

    scheme: ClassVar[str] = "ollama"

    def __init__(self, root: Path, daemon: str | None = None) -> None:
        self.root, self.daemon = root, daemon  # the daemon's URL: pulls go through it

    def normalize(self, name: str) -> str:
        base, _, tag = name.partition(":")
        if not base:
            raise ModelError(f"'ollama:{name}': an Ollama reference is ollama:name[:tag]")
        return f"{base}:{tag or 'latest'}"

    def locate(self, name: str) -> Path | None:
        return blob_for(name, self.root)

    def models(self) -> Iterator[tuple[str, Path]]:
        return all_models(self.root)

    def how_to_get(self, name: str) -> str:
        return f"pull it with `ollama pull {shlex.quote(name)}`"

    def pull(self, name: str, say: Say) -> Path:
        """`ollama pull` through the daemon's API, its progress shown; then the GGUF blob."""
        import httpx

        name = self.normalize(name)
        if self.daemon is None:
            raise ModelError(f"no Ollama daemon to pull {name} through; {self.how_to_get(name)}")
        url = f"{self.daemon.rstrip('/')}/api/pull"
        try:
            with http.stream("POST", url, json={"model": name, "stream": True},
                             timeout=httpx.Timeout(3600, connect=5)) as resp:
                for raw in resp.iter_lines():
                    line = json.loads(raw) if raw.strip() else {}
                    if "error" in line:
                        raise ModelError(f"ollama pull {name}: {str(line['error'])[:200]}")
                    if line.get("total"):
                        say(f"{line.get('status', 'pulling')}: {line.get('completed', 0)} of "
                            f"{line['total']} bytes")
        except (http.Unreachable, ValueError) as exc:
            raise ModelError(f"cannot pull {name} through Ollama at {self.daemon} "
                             f"({type(exc).__name__}); is `ollama serve` running?") from None
        blob = self.locate(name)
        if blob is None:
            raise ModelError(f"Ollama said it pulled {name}, but {self.root} has no blob for it")
        return blob
