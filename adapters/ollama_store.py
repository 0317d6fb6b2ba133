"""Ollama's on-disk model store: resolve `ollama:name:tag` to the GGUF blob it serves.

Layout: `<models>/manifests/<registry>/<namespace>/<name>/<tag>` is a JSON manifest whose layer of
media type `application/vnd.ollama.image.model` names the blob `<models>/blobs/sha256-<hex>`.
The models dir is $OLLAMA_MODELS, else ~/.ollama/models (macOS and user installs) or
/usr/share/ollama/.ollama/models (the Linux service).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import ClassVar

from specctl.adapters.base import ModelStore
from specctl.orchestrator.errors import ModelError

MODEL_LAYER = "application/vnd.ollama.image.model"
REGISTRY = "registry.ollama.ai"


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
    return root / "manifests" / Path(*parts) / (tag or "latest")


def blob_for(name_tag: str, root: Path) -> Path | None:
    """The GGUF blob of an Ollama model, None when the model is not pulled."""
    path = manifest_path(name_tag, root)
    try:
        manifest = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, json.JSONDecodeError) as exc:
        raise ModelError(f"Ollama manifest {path} is unreadable ({exc}); `ollama pull` it "
                         "again") from None
    for layer in manifest.get("layers", []):
        if layer.get("mediaType") == MODEL_LAYER:
            blob = root / "blobs" / str(layer["digest"]).replace(":", "-")
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

    def __init__(self, root: Path) -> None:
        self.root = root

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
        return f"pull it with `ollama pull {name}`"
