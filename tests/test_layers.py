"""The layering written in ARCHITECTURE.md and at the top of each package, checked on the code.

A module may import (at run time, at any depth; `if TYPE_CHECKING:` imports are types only and
free) what its layer allows. The flow runs one way: config -> machine, models -> planning ->
runtime -> measure; app and runs compose them; commands hold each command's flow; cli sits
on top; adapters see only the contract.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LEAVES = {"errors", "files", "sizes", "humanize"}
BASE = LEAVES | {"adapters.base", "adapters.registry"}
ALLOWED: dict[str, set[str]] = {
    "errors": set(),
    "sizes": set(),
    "files": {"errors"},
    "config": BASE,
    "machine": BASE | {"config"},
    "models": BASE | {"config"},
    "service": BASE | {"config"},
    "planning": BASE | {"config", "machine", "models"},
    "runtime": BASE | {"config", "machine", "models", "planning"},
    "measure": BASE | {"config", "machine", "models", "planning", "runtime"},
    "app": BASE | {"config", "machine", "models", "planning", "runtime", "measure", "service"},
    "runs": BASE | {"config", "machine", "models", "planning", "runtime", "app"},
    "commands": BASE | {"config", "machine", "models", "planning", "runtime", "measure",
                        "service", "app", "runs"},
}
# adapters: the contract, each other, and the core's pure helpers they share
ADAPTERS = LEAVES | {"models.compat", "machine.hardware"}


def layer_of(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("").parts
    if rel[0] == "adapters":
        return f"adapters.{rel[1]}"
    return rel[1]


def _type_only(tree: ast.Module) -> set[int]:
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            out |= {id(n) for n in ast.walk(node)}
    return out


def imports(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text())
    skip = _type_only(tree)
    found = []
    for node in ast.walk(tree):
        if id(node) in skip or not isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                 [f"{node.module}.{a.name}" for a in node.names] if node.module else [])
        found += [(node.lineno, n) for n in names if n.startswith("specctl.")]
    return found


def target_of(module: str) -> str:
    parts = module.split(".")[1:]
    if parts[0] == "adapters":
        return "adapters." + parts[1] if len(parts) > 1 else "adapters"
    if parts[0] == "orchestrator" and len(parts) > 1:
        return ".".join(parts[1:3]) if parts[1] in ("models", "machine") else parts[1]
    return parts[0]


def allowed(src: str, dst: str) -> bool:
    top = dst.split(".")[0] if not dst.startswith("adapters.") else dst
    if src.startswith("adapters."):
        return dst.startswith("adapters") or dst in ADAPTERS or top in LEAVES
    if src == "cli" or top == src:
        return True
    return top in ALLOWED[src] or dst in ALLOWED[src]


def offences() -> list[str]:
    out = []
    files = [*(ROOT / "orchestrator").rglob("*.py"), *(ROOT / "adapters").glob("*.py")]
    for path in sorted(files):
        src = layer_of(path)
        for line, module in imports(path):
            dst = target_of(module)
            if dst != src and not allowed(src, dst):
                out.append(f"{path.relative_to(ROOT)}:{line}: {src} imports {module}")
    return out


def test_every_import_follows_the_layers() -> None:
    found = offences()
    assert not found, "\n".join(found)


def test_the_check_sees_an_upward_import() -> None:
    assert not allowed("models", "planning") and not allowed("runtime", "app")
    assert not allowed("adapters.x", "planning") and allowed("adapters.x", "models.compat")
    assert allowed("cli", "app") and allowed("measure", "runtime")
    assert allowed("commands", "runs") and allowed("cli", "commands")
    assert not allowed("commands", "cli") and not allowed("app", "commands")
