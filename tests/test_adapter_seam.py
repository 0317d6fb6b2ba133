"""The adapter seam: outside adapters/, no module names a backend or imports an adapter module.

Checked on the code itself (names and string literals, not comments or docstrings): a backend is
known to the core only through the registry, which finds adapter modules by scanning the package.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from specctl.orchestrator.contract import registry

ROOT = Path(__file__).resolve().parent.parent
CORE = ROOT / "orchestrator"
NOT_ADAPTERS = ("prometheus",)  # a shared parser, not a backend


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


def backend_tokens() -> frozenset[str]:
    """Backend names as whole tokens: a name joined by `_` (SPECCTL_VLLM_PYTHON, ollama_url)."""
    words = {w.lower() for cls in registry.adapter_classes().values()
             for w in (cls.name, *cls.aliases)}
    return frozenset(w for w in words if re.fullmatch(r"[a-z0-9]+", w))


def backend_variables() -> frozenset[str]:
    """The SPECCTL_* settings each adapter declares: only its adapter names them."""
    return frozenset(v.name for cls in registry.adapter_classes().values()
                     for v in cls.environment() if v.name.startswith("SPECCTL_"))


def _named(text: str) -> str | None:
    """The backend named inside `text` by a token (split on `_` and other separators) or by
    one of the adapters' own variables, if any."""
    hit = next((t for t in re.split(r"[^a-z0-9]+", text.lower()) if t in backend_tokens()), None)
    return hit or next((v for v in backend_variables() if v in text.upper()), None)


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
                and id(node) not in docs and (pattern.search(node.value) or _named(node.value)):
            found.append(f"{path.name}:{node.lineno} names a backend: {node.value!r}")
        elif isinstance(node, ast.Name | ast.Attribute | ast.FunctionDef | ast.ClassDef | ast.arg):
            name = (node.id if isinstance(node, ast.Name) else node.attr
                    if isinstance(node, ast.Attribute) else node.arg
                    if isinstance(node, ast.arg) else node.name)
            if pattern.fullmatch(name) or _named(name):
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


def test_the_check_catches_a_backend_name_inside_identifiers_and_variables(
        tmp_path: Path) -> None:
    name = next(iter(backend_tokens()))
    variable = next(iter(backend_variables()))
    leaky = tmp_path / "leaky.py"
    leaky.write_text(f'PASSED = ("SPECCTL_{name.upper()}_PYTHON", "{name.upper()}_MODELS")\n'
                     f'{name}_url = 1\n'
                     f'def use_{name}(x): pass\n'
                     f'KNOWN = "{variable}"\n'
                     f'fine = "SPECCTL_SERVER__PORT"\n')
    got = offences(leaky, backend_words())
    assert sorted(g.split(":")[1].split()[0] for g in got) == ["1", "1", "2", "3", "4"], got
