"""TGI in its container image (docker or podman): the `run` command around the launcher's
arguments, the mounts (the Hugging Face cache as /data, a local model folder read-only) and the
port mapping. Pure: tgi.py computes the launcher arguments and validates them."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path, PurePosixPath

from specctl.orchestrator.errors import BackendError
from specctl.orchestrator.files import expand_user

CONTAINER_PORT = 80  # the image sets PORT=80
DATA = PurePosixPath("/data")  # the image's HF_HOME: downloads land in /data/hub
MODELS = PurePosixPath("/models")  # where local model folders are mounted, read-only
_NAME_CHARS = re.compile(r"[^A-Za-z0-9_.-]")


def image_tag(image: str) -> str:
    """'ghcr.io/huggingface/text-generation-inference:3.3.7' -> '3.3.7' ('latest' if none)."""
    name = image.rsplit("/", 1)[-1].split("@", 1)[0]
    return name.partition(":")[2] or "latest"


def default_hf_dirs(environ: Mapping[str, str], home: Path) -> tuple[str, str | None]:
    """The user's Hugging Face home (mounted as /data) and, when HF_HUB_CACHE puts the hub
    elsewhere, that hub (mounted as /data/hub)."""
    hf_home = expand_user(environ.get("HF_HOME") or home / ".cache" / "huggingface")
    hub = environ.get("HF_HUB_CACHE")
    if hub and expand_user(hub) != hf_home / "hub":
        return str(hf_home), str(expand_user(hub))
    return str(hf_home), None


def bind_host(host: str) -> str:
    """The host side of `-p HOST:PORT:80`: an address, as the engines want it."""
    if host.lower() == "localhost":
        return "127.0.0.1"
    if host == "":
        return "0.0.0.0"
    return f"[{host}]" if ":" in host else host


def host_dir(path: str | Path, what: str) -> str:
    text = str(path)
    if not Path(text).is_absolute() or ":" in text:
        raise BackendError(f"{what} {text} cannot be mounted into the container (`-v "
                           "HOST:CONTAINER`): use an absolute path without ':'")
    return text


def container_model(repo: str | None, path: Path | None,
                    missing: Callable[[], str]) -> tuple[str, list[str]]:
    """`--model-id` inside the container and the mount it needs. A Hugging Face model by its
    repo id (found in the mounted cache or downloaded there); a local folder mounted read-only
    under /models (a cache snapshot with its repo folder, so its links into blobs/ resolve).
    `missing` raises with what to do when it is neither."""
    if repo is not None:
        return repo, []
    if path is None:
        missing()
    folder = Path(host_dir(path or "", "the model folder"))
    if folder.parent.name == "snapshots":  # <cache>/models--org--name/snapshots/<revision>
        top = folder.parent.parent
        inside = MODELS / _NAME_CHARS.sub("-", top.name) / "snapshots" / \
            _NAME_CHARS.sub("-", folder.name)
        return str(inside), ["-v", f"{top}:{inside.parent.parent}:ro"]
    inside = MODELS / (_NAME_CHARS.sub("-", folder.name) or "model")
    return str(inside), ["-v", f"{folder}:{inside}:ro"]


def run_argv(engine: str, program: str, profile: str, host: str, port: int, shm_size: str,
             mounts: Sequence[tuple[str | None, PurePosixPath]], model_mount: Sequence[str],
             key: bool, image: str, args: Sequence[str]) -> list[str]:
    """`docker|podman run ... IMAGE ARGS`. Environment variables go in by name only: the
    engine copies their values from its own environment."""
    name = "specctl-" + _NAME_CHARS.sub("-", profile)
    gpus = ["--gpus", "all"] if engine == "docker" else [
        "--device", "nvidia.com/gpu=all", "--security-opt", "label=disable"]  # CDI
    argv = [program, "run", "--rm", "--name", name, *gpus, "--shm-size", shm_size,
            "-p", f"{bind_host(host)}:{port}:{CONTAINER_PORT}"]
    for where, inside in mounts:
        if where:
            argv += ["-v", f"{host_dir(where, str(inside))}:{inside}"]
    argv += [*model_mount, "-e", "HF_TOKEN", "-e", "HF_HUB_OFFLINE"]
    if key:
        argv += ["-e", "API_KEY"]
    return [*argv, image, *args]
