"""The adapter seam: outside adapters/, no module names a backend or imports an adapter module.

Checked on the code itself (names and string literals, not comments or docstrings): a backend is
known to the core only through the registry, which finds adapter modules by scanning the package.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from specctl.adapters import registry

ROOT = Path(__file__).resolve().parent.parent
CORE = ROOT / "orchestrator"
NOT_ADAPTERS = ("base", "registry", "prometheus")  # the contract, the list, a shared parser


def _docstrings(tree: ast.AST) -> set[int]:
    """ids of the string constants that are docstrings."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                out.add(id(body[0].value))
    return out


def backend_words() -> re.Pattern[str]:
    words = set()
    for cls in registry.adapter_classes().values():
        words |= {cls.name, *cls.aliases}
    return re.compile(r"(?<![\w.-])(" + "|".join(map(re.escape, sorted(words))) + r")(?![\w-])",
                      re.IGNORECASE)


def offences(path: Path, pattern: re.Pattern[str]) -> list[str]:
    tree = ast.parse(path.read_text())
    docs = _docstrings(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            mods = [a.name for a in node.names] if isinstance(node, ast.Import) else [
                f"{node.module}.{a.name}" for a in node.names]
            for mod in mods:
                if mod.startswith("specctl.adapters.") and mod.split(".")[2] not in NOT_ADAPTERS:
                    found.append(f"{path.name}:{node.lineno} imports {mod}")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) \
                and id(node) not in docs and pattern.search(node.value):
            found.append(f"{path.name}:{node.lineno} names a backend: {node.value!r}")
        elif isinstance(node, ast.Name | ast.Attribute):
            name = node.id if isinstance(node, ast.Name) else node.attr
            if pattern.fullmatch(name):
                found.append(f"{path.name}:{node.lineno} names a backend: {name}")
    return found


def test_the_registry_finds_every_adapter_module() -> None:
    modules = {p.stem for p in (ROOT / "adapters").glob("*.py")
               if "_" not in p.stem and p.stem not in NOT_ADAPTERS}
    assert set(registry.adapter_classes()) == modules


def test_no_core_module_names_a_backend() -> None:
    pattern = backend_words()
    found = [o for path in sorted(CORE.rglob("*.py")) for o in offences(path, pattern)]
    assert not found, "\n".join(found)


def test_the_check_catches_a_backend_name(tmp_path: Path) -> None:
    leaky = tmp_path / "leaky.py"
    name = next(iter(registry.adapter_classes()))
    leaky.write_text(f'"""Docs may say {name}."""\nfrom specctl.adapters.{name} import X\n'
                     f'if backend == "{name}":\n    pass\n')
    got = offences(leaky, backend_words())
    assert len(got) == 2, got
