"""One import name and one path per module: the top-level folders are mapped under `specctl`
by setuptools (pyproject.toml's package-dir), with no links.

From the repository root every product module loads once, by its specctl name, from the file
git knows (so a traceback names a path `git blame` knows); a folder imported by its bare name
refuses; no code imports one; pyproject.toml lists every package there is; the sdist holds the
repository's own paths and the wheel the mapped ones.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
CONF = tomllib.loads((ROOT / "pyproject.toml").read_text())
MAPPED: dict[str, str] = CONF["tool"]["setuptools"]["package-dir"]
BARE = tuple(folder for name, folder in MAPPED.items() if name != folder)


def tracked(*paths: str) -> list[str]:
    out = subprocess.run(["git", "ls-files", "--", *paths], cwd=ROOT, check=True,
                         capture_output=True, text=True).stdout
    return out.splitlines()


def product_modules() -> list[str]:
    """Every product module by its specctl name, from the files git tracks."""
    names = []
    for prefix, folder in MAPPED.items():
        for rel in tracked(folder):
            path = Path(rel)
            if path.suffix != ".py" or path.name == "__main__.py":  # runs the CLI
                continue
            parts = path.relative_to(folder).with_suffix("").parts
            names.append(".".join((prefix, *(parts[:-1] if parts[-1] == "__init__" else
                                             parts))))
    return sorted(names)


def test_no_folder_is_a_link() -> None:
    links = [p for p in ROOT.rglob("*") if p.is_symlink() and ".git" not in p.parts
             and not any(part.startswith((".venv", "build")) for part in p.parts)]
    assert not links, links


def test_pyproject_lists_every_package_there_is() -> None:
    found = set()
    for prefix, folder in MAPPED.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            parts = init.parent.relative_to(ROOT / folder).parts
            found.add(".".join((prefix, *parts)))
    assert found == set(CONF["tool"]["setuptools"]["packages"])


def _bare_imports(path: Path) -> list[str]:
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = [node.module]
        else:
            continue
        out += [f"{path.relative_to(ROOT)}:{node.lineno}: {n}" for n in names
                if n.split(".")[0] in BARE]
    return out


def test_nothing_imports_a_folder_by_its_bare_name() -> None:
    files = [ROOT / f for f in tracked("*.py")]
    files += [ROOT / f for f in tracked("scripts") if (ROOT / f).read_bytes()
              .startswith(b"#!/usr/bin/env python")]
    found = [line for path in files for line in _bare_imports(path)]
    assert not found, "\n".join(found)


def test_the_check_sees_a_bare_import(tmp_path: Path) -> None:
    bad = ROOT / "tests" / "_bare_probe_tmp.py"
    bad.write_text("from orchestrator.errors import SpecctlError\nimport adapters.vllm\n")
    try:
        assert [line.split(": ")[1] for line in _bare_imports(bad)] == [
            "orchestrator.errors", "adapters.vllm"]
    finally:
        bad.unlink()


@pytest.mark.parametrize("folder", BARE)
def test_a_bare_folder_name_refuses_to_import(folder: str) -> None:
    done = subprocess.run([sys.executable, "-c", f"import {folder}"], cwd=ROOT,
                          capture_output=True, text=True)
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: import specctl.") and f"not {folder}" in last


def test_every_module_loads_once_from_the_file_git_knows() -> None:
    """From the repository root (its folders on sys.path, as for pytest or `python -c`)."""
    code = ("import importlib, json, sys\n"
            "for name in json.loads(sys.argv[1]):\n"
            "    importlib.import_module(name)\n"
            "print(json.dumps({n: getattr(m, '__file__', None) for n, m in sys.modules.items()"
            " if n.split('.')[0] in ('specctl', *json.loads(sys.argv[2]))}))\n")
    modules = product_modules()
    done = subprocess.run([sys.executable, "-c", code, json.dumps(modules), json.dumps(BARE)],
                          cwd=ROOT, capture_output=True, text=True, check=True)
    loaded: dict[str, str | None] = json.loads(done.stdout)
    assert set(modules) <= set(loaded)
    assert not [n for n in loaded if not n.startswith("specctl")]  # no bare name loaded
    files = [f for f in loaded.values() if f is not None]
    assert len(files) == len(set(files)), "a file loaded under two names"
    known = set(tracked())
    outside = [f for f in files if str(Path(f).relative_to(ROOT)) not in known]
    assert not outside, outside


def test_a_traceback_names_the_repository_file() -> None:
    done = subprocess.run([sys.executable, "-c", "from specctl.orchestrator.files import "
                           "check_name; check_name('../x', 'profile name')"],
                          cwd=ROOT, capture_output=True, text=True)
    assert done.returncode != 0
    assert f'File "{ROOT / "orchestrator" / "files.py"}"' in done.stderr


@pytest.fixture(scope="module")
def dists(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    # the sdist, then the wheel built from it (so nothing is written into the checkout, and the
    # sdist is shown to hold all the wheel needs)
    subprocess.run([sys.executable, "-m", "build", "--outdir", str(out), str(ROOT)],
                   check=True, capture_output=True)
    return out


def test_the_sdist_mirrors_the_repository(dists: Path) -> None:
    (sdist,) = dists.glob("*.tar.gz")
    with tarfile.open(sdist) as tar:
        names = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
    wanted = {f for folder in MAPPED.values() for f in tracked(folder)}
    assert wanted <= names, sorted(wanted - names)[:10]


def test_the_wheel_holds_the_mapped_paths(dists: Path) -> None:
    (wheel,) = dists.glob("*.whl")
    with zipfile.ZipFile(wheel) as whl:
        names = set(whl.namelist())
    for prefix, folder in MAPPED.items():
        for rel in tracked(folder):
            inside = Path(*prefix.split("."), Path(rel).relative_to(folder)).as_posix()
            assert inside in names, inside  # the code and its data (suites, dialects)
    assert "specctl/orchestrator/errors.py" in names
    assert not [n for n in names if n.split("/")[0] in BARE]
