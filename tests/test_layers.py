"""The layering written in ARCHITECTURE.md and at the top of each package, checked on the code.

A module may import (at run time or for types alone, at any depth: an `if TYPE_CHECKING:`
import is an arrow too) what its layer allows. The flow runs one way: the contract (the adapter
protocol, the registry and the values adapters exchange: the plan, the dirs, the machine, the
model's metadata) on the ground floor -> config -> machine, models ->
planning -> runtime -> measure; app and runs compose them; commands hold each command's flow; cli
sits on top; adapters see the contract and the core's pure helpers, and the core reaches them
only through the registry's entry points. Inside measure/, each wing imports only the wings
before it in WINGS (the table in measure/__init__.py), and measure/ has at most ten rooms.

Folders as well as modules: counting every run-time import (at module level or inside a
function), no two folders (a package of orchestrator/, a top-level module, adapters/) import
each other, however indirectly.

No two product modules import each other, however indirectly, counting every import: at module
level, inside functions, under `if TYPE_CHECKING:`, and `importlib.import_module` (a name built
at run time may be any module of the caller's own package).
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LEAVES = {"errors", "files", "sizes", "humanize", "sanitise", "http", "exposition"}
BASE = LEAVES | {"contract"}
ALLOWED: dict[str, set[str]] = {
    "errors": set(),
    "sizes": set(),
    "files": {"errors"},
    "http": {"errors"},
    "exposition": {"errors"},
    "contract": LEAVES,  # the ground floor: the leaves and pydantic, nothing above
    "config": BASE,
    "machine": BASE | {"config"},
    "models": BASE | {"config"},
    "service": BASE | {"config"},
    "planning": BASE | {"config", "machine", "models"},
    "runtime": BASE | {"config", "machine", "models", "planning"},
    "measure": BASE | {"config", "machine", "models", "planning", "runtime"},
    "app": BASE | {"config", "machine", "models", "planning", "runtime", "measure", "service"},
    # the running profiles, with what the service manager says of those it runs
    "runs": BASE | {"config", "machine", "models", "planning", "runtime", "service", "app"},
    "commands": BASE | {"config", "machine", "models", "planning", "runtime", "measure",
                        "service", "app", "runs"},
    # the gateway routes each request by its kind (measure/route/classify.py, choose.py)
    "gateway": BASE | {"config", "machine", "models", "planning", "runtime", "measure", "app"},
}
# adapters: the contract, each other, and the core's pure helpers they share
ADAPTERS = LEAVES | {"contract", "models.compat", "machine.hardware"}


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


def imports(path: Path, types: bool = True) -> list[tuple[int, str]]:
    """The specctl modules a file imports, with their lines; `types=False` leaves out the
    `if TYPE_CHECKING:` ones."""
    tree = ast.parse(path.read_text())
    skip = set() if types else _type_only(tree)
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
    for path in product_files():
        src = layer_of(path)
        for line, module in imports(path):
            dst = target_of(module)
            if dst != src and not allowed(src, dst):
                out.append(f"{path.relative_to(ROOT)}:{line}: {src} imports {module}")
    return out


def test_every_import_follows_the_layers() -> None:
    found = offences()
    assert not found, "\n".join(found)


MEASURE = ROOT / "orchestrator" / "measure"
WINGS = ("prompts", "lab", "estimates", "results", "lossless", "route", "traffic", "tune",
         "bench")  # measure/__init__.py's table, from the ground up


def wing_of(module: str) -> str | None:
    """specctl.orchestrator.measure.tune.race -> tune; None outside measure's wings."""
    parts = module.split(".")
    return parts[3] if parts[:3] == ["specctl", "orchestrator", "measure"] and len(parts) > 3 \
        else None


def wing_offences() -> list[str]:
    out = []
    for path in sorted(MEASURE.rglob("*.py")):
        rel = path.relative_to(MEASURE).parts
        if len(rel) < 2:
            continue
        src = rel[0]
        for line, module in imports(path):
            dst = wing_of(module)
            if dst is not None and WINGS.index(dst) > WINGS.index(src):
                out.append(f"{path.relative_to(ROOT)}:{line}: wing {src} imports {module}")
    return out


def test_each_wing_of_measure_imports_only_the_wings_below_it() -> None:
    found = wing_offences()
    assert not found, "\n".join(found)
    rooms = sorted(p.name for p in MEASURE.iterdir() if p.name != "__pycache__"
                   and (p.is_dir() or p.suffix == ".py") and p.name != "__init__.py")
    assert rooms == sorted(WINGS) and len(rooms) <= 10, rooms
    table = (MEASURE / "__init__.py").read_text()
    assert [w for w in WINGS if f"\n    {w} " in table] == list(WINGS)  # the map says so


def test_the_wing_check_sees_an_upward_import() -> None:
    assert wing_of("specctl.orchestrator.measure.tune.race") == "tune"
    assert wing_of("specctl.orchestrator.measure") is None
    assert WINGS.index("bench") > WINGS.index("tune") > WINGS.index("results")


def test_the_check_sees_an_upward_import() -> None:
    assert not allowed("models", "planning") and not allowed("runtime", "app")
    assert not allowed("adapters.x", "planning") and allowed("adapters.x", "models.compat")
    assert allowed("cli", "app") and allowed("measure", "runtime")
    assert allowed("adapters.x", "contract") and allowed("config", "contract")
    assert not allowed("contract", "config") and not allowed("contract", "adapters.vllm")
    assert allowed("commands", "runs") and allowed("cli", "commands")
    assert not allowed("commands", "cli") and not allowed("app", "commands")
    assert allowed("gateway", "app") and not allowed("gateway", "cli")


# -- circles, counting every import -------------------------------------------------------------


def module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(("specctl", *(parts[:-1] if parts[-1] == "__init__" else parts)))


def _imported(node: ast.AST) -> Iterator[str]:
    """The names an import statement (any kind, anywhere) or an import_module call reaches;
    "*" for an import_module of a name built at run time."""
    if isinstance(node, ast.Import):
        yield from (a.name for a in node.names)
    elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
        yield from (f"{node.module}.{a.name}" for a in node.names)
    elif (isinstance(node, ast.Call) and isinstance(node.func, (ast.Attribute, ast.Name))
          and (node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id)
          == "import_module" and node.args):
        arg = node.args[0]
        yield arg.value if isinstance(arg, ast.Constant) and isinstance(arg.value, str) else "*"


def import_graph(files: Iterable[Path], root: Path) -> dict[str, set[str]]:
    """module -> the product modules it imports, every import counted (see the docstring)."""
    paths = {module_name(path, root): path for path in files}

    def resolve(name: str) -> str | None:  # `from a.b import c`: module a.b.c, else a.b
        while name and name not in paths:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for module, path in paths.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            for name in _imported(node):
                if name == "*":
                    found |= {m for m in paths if m.rpartition(".")[0] == package}
                elif (target := resolve(name)) is not None:
                    found.add(target)
        graph[module] = found - {module}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import circles: each set of modules that reach one another (Tarjan), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = stack[stack.index(node):]
            del stack[stack.index(node):]
            if len(group) > 1:
                found.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def product_files() -> list[Path]:
    return sorted([*(ROOT / "orchestrator").rglob("*.py"), *(ROOT / "adapters").glob("*.py")])


def test_no_import_circle_among_product_modules() -> None:
    graph = import_graph(product_files(), ROOT)
    assert "specctl.orchestrator.contract.launch" in graph["specctl.orchestrator.contract.adapter"]
    # the registry finds the adapters through entry points: the contract imports none
    assert not {m for m in graph["specctl.orchestrator.contract.registry"]
                if m.startswith("specctl.adapters")}
    found = circles(graph)
    assert not found, "\n".join(" -> ".join(c) for c in found)


def test_the_circle_check_sees_type_only_and_late_imports(tmp_path: Path) -> None:
    """A circle held open by a type-only import one way and a function-level one back fails."""
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "a.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from specctl.pkg.b import B\n")
    (tmp_path / "pkg" / "b.py").write_text("def f():\n    from specctl.pkg import a\n")
    (tmp_path / "pkg" / "c.py").write_text("from specctl.pkg.a import x\n")
    files = sorted(tmp_path.rglob("*.py"))
    assert circles(import_graph(files, tmp_path)) == [["specctl.pkg.a", "specctl.pkg.b"]]
    (tmp_path / "pkg" / "b.py").write_text("import importlib\n"
                                           "def f(n):\n    importlib.import_module(n)\n")
    assert circles(import_graph(files, tmp_path)) == [  # b may load a, and c
        ["specctl.pkg.a", "specctl.pkg.b", "specctl.pkg.c"]]
    (tmp_path / "pkg" / "b.py").write_text("import specctl.pkg\n")  # a package: no circle
    assert circles(import_graph(files, tmp_path)) == []


# -- folders ------------------------------------------------------------------------------------


def folder_of(module: str) -> str:
    """specctl.orchestrator.contract.plan -> planning; specctl.orchestrator.app -> app;
    specctl.adapters.vllm -> adapters."""
    parts = module.split(".")[1:]
    return "adapters" if parts[0] == "adapters" else parts[1] if len(parts) > 1 else parts[0]


def folder_graph(files: Iterable[Path], root: Path) -> dict[str, set[str]]:
    """folder -> the folders its modules import at run time (type-only imports left out)."""
    graph: dict[str, set[str]] = {}
    for path in files:
        src = folder_of(module_name(path, root))
        dsts = {folder_of(module) for _, module in imports(path, types=False)
                if module.startswith(("specctl.orchestrator.", "specctl.adapters"))}
        graph.setdefault(src, set()).update(dsts - {src})
    return graph


def test_no_two_folders_import_each_other() -> None:
    graph = folder_graph(product_files(), ROOT)
    assert "contract" in graph["adapters"] and "contract" in graph["config"]
    assert "adapters" not in graph["contract"] and "adapters" not in graph["config"]
    found = circles(graph)
    assert not found, "\n".join(" <-> ".join(c) for c in found)


def test_the_folder_check_sees_two_folders_pointing_both_ways() -> None:
    found = circles({"config": {"contract"}, "contract": {"machine"}, "machine": {"config"},
                     "planning": {"contract"}})
    assert found == [["config", "contract", "machine"]]
