"""The environment a service carries is computed from what each adapter declares: every variable
that is set is carried (secrets only in the 0600 environment file), none that is not."""

from __future__ import annotations

import os
import plistlib
import stat
import sys
from pathlib import Path

import pytest
from pydantic import BaseModel, ValidationError

from specctl.orchestrator.config.settings import Settings
from specctl.orchestrator.contract import registry
from specctl.orchestrator.contract.settings import EnvConfig, EnvSettings, EnvVar, settings_vars
from specctl.orchestrator.service import envfile, environment
from tests.cli import ROOT, specctl

FIXED = {"SPECCTL_STATE_DIR", "SPECCTL_CONFIG_DIR", "SPECCTL_CACHE_DIR", "PYTHONUNBUFFERED",
         "PATH", "SPECCTL_MAX_RESTARTS"}


def adapter_settings_classes() -> dict[str, list[type[EnvSettings]]]:
    """Every settings class defined in each adapter's module (declared or not)."""
    found = {}
    for name, cls in registry.adapter_classes().items():
        module = sys.modules[cls.__module__]
        found[name] = [obj for obj in vars(module).values() if isinstance(obj, type)
                       and issubclass(obj, EnvSettings) and obj.__module__ == module.__name__]
    return found


def _valid(model: type[BaseModel], field: str, var: str) -> str:
    """A value the settings model accepts for `field`, distinct per variable."""
    for candidate in (f"/opt/specctl-test/{var.lower()}", "7", "http://127.0.0.1:9", "1",
                      "1048576"):
        try:
            model.model_validate({field: candidate})
        except ValidationError:
            continue
        return candidate
    raise AssertionError(f"no sample value for {var}")


def sample_values() -> dict[str, str]:
    """A valid value for every declared variable: specctl's, Hugging Face's, each adapter's."""
    values: dict[str, str] = {}
    models: list[type[BaseModel]] = [Settings, *(m for c in registry.adapter_classes().values()
                                                 for m in c.settings)]
    for model in models:
        prefix = str(model.model_config.get("env_prefix", ""))
        for field in model.model_fields:
            var = f"{prefix}{field}".upper()
            values[var] = _valid(model, field, var)
    for declared in environment.declared(registry.adapter_classes().values()):
        values.setdefault(declared.name, "1" if declared.name == "HF_HUB_OFFLINE"
                          else f"/opt/specctl-test/{declared.name.lower()}")
    values.pop("PATH")  # the test's own: the service must find python
    values.pop("SPECCTL_MAX_RESTARTS")  # the unit's own: 0, restarts are the manager's
    return values


def own_llama_server(folder: Path) -> str:
    """A llama-server of your own for SPECCTL_LLAMA_SERVER (install plans the profile first, so
    the variable must name a program that answers): it answers --help and --version as the
    recorded build does (adapters/dialects)."""
    dialects = ROOT / "adapters" / "dialects"
    program = folder / "bin" / "llama-server"
    program.parent.mkdir(parents=True, exist_ok=True)
    program.write_text(f"#!/bin/sh\ncase \"$1\" in --version) cat "
                       f"'{dialects / 'llama-server-0c1e570.version'}';; *) cat "
                       f"'{dialects / 'llama-server-0c1e570.help'}';; esac\n")
    program.chmod(0o755)
    return str(program)


def clean_env(home: Path) -> dict[str, str]:
    declared = {v.name for v in environment.declared(registry.adapter_classes().values())}
    env = {k: v for k, v in os.environ.items()
           if k not in declared - {"PATH"} and not k.startswith("SPECCTL_")}
    return {**env, "HOME": str(home), "SPECCTL_CONFIG_DIR": str(home / "config"),
            "SPECCTL_STATE_DIR": str(home / "state"), "SPECCTL_CACHE_DIR": str(home / "cache")}


def unit_env(unit: str) -> dict[str, str]:
    lines = [ln.removeprefix("Environment=") for ln in unit.splitlines()
             if ln.startswith("Environment=")]
    return dict(ln.strip('"').split("=", 1) for ln in lines)


def test_every_adapter_declares_each_settings_class_it_defines() -> None:
    found = adapter_settings_classes()
    assert set(found) == set(registry.adapter_classes())
    for name, classes in found.items():
        declared = registry.adapter_classes()[name].settings
        assert classes, f"{name} defines no settings class"
        assert set(classes) == set(declared), f"{name} declares {declared}, defines {classes}"
        names = {v.name for v in registry.adapter_classes()[name].environment()}
        assert {v.name for v in settings_vars(declared, name)} <= names


def _install(env: dict[str, str], manager: str) -> tuple[str, dict[str, str], Path]:
    home = Path(env["HOME"])
    done = specctl("service", "install", "--profile", "cpu-demo", "--manager", manager, env=env)
    assert done.returncode == 0, done.stderr
    unit = home / (".config/systemd/user/specctl-cpu-demo.service" if manager == "systemd"
                   else "Library/LaunchAgents/dev.specctl.cpu-demo.plist")
    env_file = home / "config/services/cpu-demo.env"
    return unit.read_text(), envfile.read(env_file), env_file


@pytest.mark.parametrize("half", [False, True])
def test_install_carries_each_declared_variable_set_and_none_unset(tmp_path: Path,
                                                                   half: bool) -> None:
    values = sample_values() | {"SPECCTL_LLAMA_SERVER": own_llama_server(tmp_path)}
    values |= {"SPECCTL_SERVER__PORT": "9123", "SPECCTL_SERVER__API_KEY_ENV": "MY_API_KEY",
               "MY_API_KEY": "sk-'quoted' $HOME \\ `x`"}
    secrets = {v.name for v in environment.declared(registry.adapter_classes().values())
               if v.secret} | {"MY_API_KEY"}
    assert "HF_TOKEN" in secrets
    names = sorted(values)
    chosen = set(names[::2]) | {"SPECCTL_SERVER__API_KEY_ENV", "MY_API_KEY"} if half \
        else set(names)
    env = clean_env(tmp_path) | {k: values[k] for k in chosen}
    unit, written, env_file = _install(env, "systemd")
    carried = unit_env(unit)
    assert stat.S_IMODE(env_file.stat().st_mode) == 0o600
    assert f"EnvironmentFile=-{env_file}" in unit
    for name in names:
        if name not in chosen:
            assert name not in carried and name not in written and name not in unit, name
        elif name in secrets:
            assert written[name] == values[name], name
            assert name not in carried and values[name] not in unit, name
        else:
            assert carried[name] == values[name], name
            assert name not in written
    assert set(carried) - set(values) <= FIXED
    assert carried["SPECCTL_MAX_RESTARTS"] == "0"  # one restart layer, set whatever is in force
    assert set(written) == secrets & chosen


def test_the_plist_carries_the_same_without_secrets(tmp_path: Path) -> None:
    values = sample_values() | {"SPECCTL_LLAMA_SERVER": own_llama_server(tmp_path)}
    env = clean_env(tmp_path) | values
    text, written, env_file = _install(env, "launchd")
    plist = plistlib.loads(text.encode())["EnvironmentVariables"]
    assert plist[envfile.VARIABLE] == str(env_file)
    assert written == {"HF_TOKEN": values["HF_TOKEN"]}
    assert "HF_TOKEN" not in plist and values["HF_TOKEN"] not in text
    for name, value in values.items():
        if name != "HF_TOKEN":
            assert plist[name] == value, name


def test_dry_run_says_which_variables_and_why(tmp_path: Path) -> None:
    env = clean_env(tmp_path) | {"HF_TOKEN": "hf_secret", "SPECCTL_SERVER__PORT": "9123",
                                 "CUDA_VISIBLE_DEVICES": "1"}
    done = specctl("service", "install", "--profile", "cpu-demo", "--dry-run", "--manager",
                   "systemd", env=env)
    assert done.returncode == 0, done.stderr
    assert "hf_secret" not in done.stdout + done.stderr
    entries = done.stderr.replace("\n      ", " ").splitlines()[1:]  # wrapped at 80 columns
    lines = {ln.split()[0]: ln for ln in entries}
    assert "secret, not shown" in lines["HF_TOKEN"] and "login token" in lines["HF_TOKEN"]
    assert "profile override of server.port" in lines["SPECCTL_SERVER__PORT"]
    assert "GPUs" in lines["CUDA_VISIBLE_DEVICES"]
    assert not (tmp_path / "config/services").exists()  # a dry run writes nothing


def test_the_launchd_service_reads_its_secrets_back(tmp_path: Path) -> None:
    hostile = {"A": "plain", "B": "it's", "C": 'q"uote $HOME `x` \\n', "D": ""}
    path = tmp_path / "s.env"
    envfile.write(path, hostile)
    assert envfile.read(path) == hostile
    environ = {envfile.VARIABLE: str(path), "A": "already"}
    envfile.apply(environ)
    assert environ["A"] == "already" and environ["C"] == hostile["C"]
    path.write_text("A=$(rm -rf ~)\n")
    with pytest.raises(Exception, match="not NAME='value'"):
        envfile.read(path)


def test_a_declared_secret_is_a_secret_str_field() -> None:
    class S(EnvSettings):
        model_config = EnvConfig(env_prefix="X_")
        token: "SecretStr | None" = None  # noqa: UP037

    from pydantic import SecretStr

    S.model_rebuild(_types_namespace={"SecretStr": SecretStr})
    assert settings_vars((S,), "x") == (EnvVar("X_TOKEN", "x", True),)
