"""What models this machine holds, where, and how large: specctl's own cache (the test models),
the Hugging Face cache (through huggingface_hub's cache scan), other tools' stores (Ollama's),
LM Studio's folders and the user's model folders. And removing a Hugging Face cache entry through
the same API (`specctl models rm`)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specctl.orchestrator.contract.stores import ModelStore
from specctl.orchestrator.errors import BadRefError, ModelError
from specctl.orchestrator.models.info import parse_ref


@dataclass(frozen=True)
class Held:
    ref: str  # how specctl names it (a path for plain files)
    where: str  # specctl, hf-cache, lm-studio, models-dir, or a store's scheme
    size_bytes: int
    path: Path

    def to_json(self) -> dict[str, Any]:
        return {"ref": self.ref, "where": self.where, "size_bytes": self.size_bytes,
                "path": str(self.path)}


def _size(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def _folder(folder: Path, where: str, testbed: Path | None = None) -> list[Held]:
    if not folder.is_dir():
        return []
    out = []
    for path in sorted(folder.rglob("*.gguf")):
        ref = str(path)
        if testbed is not None and path.parent == testbed:
            from specctl.orchestrator.models import testbed as testbed_mod

            key = next((m.key for m in testbed_mod.MODELS if m.filename == path.name), None)
            ref = f"testbed:{key}" if key else ref
        out.append(Held(ref, where, path.stat().st_size, path))
    return out


def hf_cache(hub: Path) -> list[Held]:
    """Model repos in the Hugging Face cache (every revision's files counted once)."""
    if not hub.is_dir():
        return []
    from huggingface_hub import CacheNotFound, CorruptedCacheException, scan_cache_dir

    try:
        info = scan_cache_dir(hub)
    except (CacheNotFound, CorruptedCacheException, OSError) as exc:  # said, not fatal
        raise ModelError(f"cannot read the Hugging Face cache {hub}: {exc}") from None
    return [Held(f"hf:{r.repo_id}", "hf-cache", r.size_on_disk, r.repo_path)
            for r in sorted(info.repos, key=lambda r: r.repo_id) if r.repo_type == "model"]


def held(models_dir: Path, hub: Path, stores: Iterable[ModelStore],
         folders: Iterable[tuple[Path, str]]) -> list[Held]:
    """Every model found, in the order: specctl's, the HF cache, stores, other folders."""
    from specctl.orchestrator.models.testbed import testbed_dir

    out = _folder(models_dir, "specctl", testbed_dir(models_dir))
    out += hf_cache(hub)
    for store in stores:
        out += [Held(f"{store.scheme}:{name}", store.scheme, _size(path), path)
                for name, path in store.models()]
    for folder, where in folders:
        out += _folder(folder, where)
    return out


def remove_hf(ref: str, hub: Path) -> tuple[str, int]:
    """Delete a model repo's revisions from the Hugging Face cache (huggingface_hub's own
    deletion: blobs no other revision uses go too); (repo, bytes freed)."""
    parsed = parse_ref(ref)
    if parsed.scheme != "hf":
        raise BadRefError(f"'{ref}': `models rm` removes hf:ORG/REPO entries of the Hugging Face "
                          "cache; remove other files yourself (`specctl models list` shows "
                          "where they are)")
    from huggingface_hub import scan_cache_dir

    repos = [r for r in scan_cache_dir(hub).repos if r.repo_type == "model"
             and r.repo_id == parsed.name] if hub.is_dir() else []
    if not repos:
        raise ModelError(f"{parsed.name} is not in the Hugging Face cache ({hub}); "
                         "`specctl models list` shows what is")
    info = scan_cache_dir(hub)
    strategy = info.delete_revisions(*(rev.commit_hash for rev in repos[0].revisions))
    freed = strategy.expected_freed_size
    strategy.execute()
    return parsed.name, freed
