"""One exception family. Every message says what happened and what to do next.

The CLI turns these (and profile validation errors) into a one-line message and an exit code;
anything else is a bug and keeps its traceback.
"""

from __future__ import annotations


class SpecctlError(Exception):
    """Base of every error a user can act on."""

    exit_code = 1


class ProfileError(SpecctlError):
    """A profile is missing, malformed or invalid."""

    exit_code = 2


class HardwareError(SpecctlError):
    """Hardware could not be detected or a recorded machine could not be read."""


class BadInputError(SpecctlError):
    """What the user typed cannot be used: a value, a combination of flags, a name. Like a
    command-line usage error, it exits 2 (README's exit-code table)."""

    exit_code = 2


class ModelError(SpecctlError):
    """A model reference cannot be resolved, or a model file is missing or not a GGUF."""


class BadRefError(ModelError):
    """Text that is not a model reference (an unknown source, a malformed hf: reference, an
    unknown quantisation), or a model file named on the command line that is not there: bad
    input, exit 2."""

    exit_code = 2


class IncompatibleDraftError(SpecctlError):
    """The draft model cannot speculate for the target (tokenizers differ)."""


class DoesNotFitError(SpecctlError):
    """The plan needs more memory than the machine has."""


class BackendError(SpecctlError):
    """A backend is missing, too old for a flag, failed to build, or crashed."""


class UnknownBackendError(BackendError):
    """A backend name that names no backend: bad input, exit 2."""

    exit_code = 2


class ServerError(SpecctlError):
    """Launching or supervising a server failed (port in use, crash loop, unhealthy)."""


class NotUsableError(SpecctlError):
    """A measured setting must not be used: its output changed, its engine is broken, or it did
    not draft (bench's verdict says which, with the evidence)."""

    exit_code = 3


class StateError(SpecctlError):
    """State or tuning files could not be read or written."""


class BadPathError(StateError):
    """A file the user named for specctl to write or read cannot be used (its folder is
    missing, it is a folder, it is not there): bad input, exit 2."""

    exit_code = 2


class ReadOnlyError(StateError):
    """A write refused with EROFS: under a service, a folder outside the unit's ReadWritePaths=
    (or a read-only mount). Not a full disk: the message says which setting to change."""

    def __init__(self, path: object) -> None:
        super().__init__(
            f"cannot write {path}: read-only file system; a specctl service may write only its "
            f"unit's ReadWritePaths=, so add this folder there (`systemctl edit` the unit) or "
            f"point the variable that chose it into one of them")


class NameRefusedError(SpecctlError):
    """A name that cannot become a file or service name (it would leave its folder, or carry
    characters a unit file, a plist or a path would read differently)."""

    exit_code = 2


class SettingsError(SpecctlError):
    """A SPECCTL_* variable holds a value specctl cannot use."""

    exit_code = 2


def first_problem(exc: Exception) -> str:
    """The first problem of a validation error (pydantic's, or any other), in one line."""
    errors = getattr(exc, "errors", None)
    if callable(errors):
        found = errors()
        if found:
            loc = ".".join(str(p) for p in found[0].get("loc", ()))
            return f"{loc}: {found[0]['msg']}" if loc else str(found[0]["msg"])
    lines = str(exc).strip().splitlines()
    return (lines[0] if lines else type(exc).__name__)[:200]
