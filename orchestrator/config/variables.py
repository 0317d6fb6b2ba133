"""Every SPECCTL_* variable specctl reads, and the check that refuses a misspelled one.

The names are computed, never listed by hand: specctl's settings (config/settings.py), its dirs
(contract/dirs.py), each backend's settings (its adapter declares them), the profile overrides
(`SPECCTL_K`, `SPECCTL_SERVER__PORT`: config/overrides.py checks those), and the two read by
name elsewhere (the launchd secrets file, the gateway's key). A variable that is none of these
but close to one (`SPECCTL_STATE_DIRR`), or that names a profile field without its section
(`SPECCTL_PORT` for `SPECCTL_SERVER__PORT`), is refused in one line naming both; any other
SPECCTL_* name is left alone (it may be your own API key's variable).
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping

from pydantic import BaseModel

from specctl.orchestrator.config import overrides
from specctl.orchestrator.contract.settings import settings_vars
from specctl.orchestrator.errors import SettingsError

PREFIX = overrides.PREFIX
# read by name outside config: service/envfile.VARIABLE, gateway/run.KEY_VAR
BY_NAME = ("SPECCTL_ENV_FILE", "SPECCTL_GATEWAY_API_KEY")
CLOSE = 0.85  # difflib's ratio (of the names less SPECCTL_) that makes one a misspelling


def settings_names() -> list[str]:
    """The machine settings: specctl's, its dirs', each backend's, and those read by name."""
    from specctl.orchestrator.config.settings import Settings
    from specctl.orchestrator.contract import dirs as paths
    from specctl.orchestrator.contract import registry

    names = [v.name for v in settings_vars((Settings, paths.Variables), "specctl")]
    names += [v.name for cls in registry.adapter_classes().values() for v in cls.environment()
              if v.name.startswith(PREFIX)]
    return sorted({*names, *BY_NAME})


def override_names(model: type[BaseModel]) -> list[str]:
    """Every profile override: SPECCTL_FIELD and SPECCTL_SECTION__FIELD."""
    out = []
    for name, info in model.model_fields.items():
        section = overrides.section_model(info.annotation)
        if section is None:
            out.append(f"{PREFIX}{name.upper()}")
        else:
            out += [f"{PREFIX}{name.upper()}__{f.upper()}" for f in section.model_fields]
    return out


def check(environ: Mapping[str, str], model: type[BaseModel],
          known: Iterable[str] | None = None) -> None:
    """Refuse a SPECCTL_* variable that misspells a known one (SettingsError, exit 2)."""
    settings = set(settings_names() if known is None else known)
    fields = override_names(model)
    for var in sorted(environ):
        upper = var.upper()
        if not upper.startswith(PREFIX) or upper in settings or upper in fields:
            continue
        if "__" in upper:
            continue  # a section's field: config/overrides.py says what is wrong with it
        bare = upper[len(PREFIX):]
        homes = [f for f in fields if f.endswith(f"__{bare}")]
        names = {n[len(PREFIX):]: n for n in [*settings, *fields]}
        close = homes or [names[n] for n in difflib.get_close_matches(bare, list(names), n=1,
                                                                      cutoff=CLOSE)]
        if close:
            raise SettingsError(f"${var} is not a specctl variable; did you mean {close[0]}? "
                                "rename or unset it")
