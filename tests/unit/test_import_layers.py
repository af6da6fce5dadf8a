"""The import graph of mptfx's own code, read statically with `ast`.

Every import counts, also the ones inside functions (the command modules import most of
what they use lazily, so `mptfx --help` stays instant) and `importlib.import_module("...")`
with a literal name. The graph has one node per module under pipelines/, components/,
models/ and benchmarks/; `from pkg import name` points at the submodule `pkg.name` when
there is one, else at `pkg` itself. Importing `a.b.c` also runs `a/__init__` and
`a/b/__init__`; those implicit arrows are left out, so a package's `__init__` importing its
own submodules is an ordinary arrow down, and only a submodule that imports back from its
package's `__init__` closes a cycle.

The rules:
- no module imports a `_private` name (or reads `module._private`) from another module;
- no import cycle among our modules, nor among our packages (each `components/<pkg>/`,
  the `components/*.py` leaves, models/, pipelines/, benchmarks/, tools/): a package may
  depend on another only one way round;
- components/core/ imports no other component package, and each package of components/
  (and models/) imports only the sibling packages `COMPONENT_IMPORTS` lists, which is the
  table "Which package may import which, and why" of docs/ARCHITECTURE.md;
- components/ and models/ import nothing from pipelines/ or benchmarks/ (the layers above);
- nothing that is installed (pipelines/, components/, models/, benchmarks/) imports the
  developer lab under tools/ (run from the checkout; not in the wheel or the image).
"""

from __future__ import annotations

import ast
import functools
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("pipelines", "components", "models", "benchmarks", "tools")
LOWER_LAYERS = ("components", "models")
UPPER_LAYERS = ("pipelines", "benchmarks")
INSTALLED = ("pipelines", "components", "models", "benchmarks")
CHECKOUT_ONLY = ("tools",)
IMPORT_BY_NAME = ("importlib.import_module", "import_module", "__import__")
ARCHITECTURE = REPO / "docs" / "ARCHITECTURE.md"
PACKAGE_TABLE = "### Which package may import which, and why"
# The base every component package and models/ may import: components/core/ and the
# components/*.py leaves (node "components"). Anything else a package of components/ or
# models/ imports from components/ or models/ is listed here, with the reason in the table.
BASE = {"components", "components.core"}
COMPONENT_IMPORTS: dict[str, set[str]] = {
    "components": set(),
    "components.core": set(),
    "components.ingest": set(),
    "components.serving": set(),
    "components.validation": set(),
    "components.monitor": {"components.serving"},
    "components.pusher": {"components.serving"},
    "components.tracking": {"components.serving"},
    "components.tflite": {"components.trainer"},
    "components.infra": {"components.serving", "components.trainer"},
    "components.trainer": {"components.monitor", "components.serving", "components.tracking",
                           "models"},
    "components.predict": {"components.ingest", "components.serving", "components.tflite",
                           "components.trainer"},
    "models": set(),
}


@dataclass
class ImportGraph:
    """Modules (dotted name -> file), arrows between them, and private names reached."""

    files: dict[str, Path]
    edges: dict[str, dict[str, int]] = field(default_factory=dict)  # target -> first line
    private_uses: list[str] = field(default_factory=list)
    hidden_imports: list[str] = field(default_factory=list)  # import_module(<not a literal>)


def _is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _dotted(node: ast.AST) -> str | None:
    """`a.b.c` for a Name/Attribute chain, else None."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    return ".".join(reversed(parts))


def discover(root: Path, packages: tuple[str, ...]) -> dict[str, Path]:
    """Every module of `packages` under `root`, by dotted name (`pkg/__init__.py` is `pkg`)."""
    files = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            files[".".join(parts)] = path
    return files


def build_graph(root: Path, packages: tuple[str, ...]) -> ImportGraph:
    """Read every module of `packages` and record what it imports, anywhere in its body."""
    graph = ImportGraph(discover(root, packages))
    for module, path in graph.files.items():
        _read_module(graph, module, path, root, packages)
    return graph


def _read_module(graph: ImportGraph, module: str, path: Path, root: Path,
                 packages: tuple[str, ...]) -> None:
    tree = ast.parse(path.read_text(), filename=str(path))
    is_package = path.name == "__init__.py"
    own_package = module if is_package else module.rpartition(".")[0]
    edges = graph.edges.setdefault(module, {})
    module_aliases: dict[str, str] = {}  # local name -> first-party module it is bound to

    def owning_module(name: str) -> str | None:
        while name and name not in graph.files:
            name = name.rpartition(".")[0]
        return name or None

    def add_edge(target: str | None, line: int) -> None:
        if target and target != module:
            edges.setdefault(target, line)

    def where(node: ast.AST) -> str:
        return f"{path.relative_to(root)}:{node.lineno}"

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in packages:
                    add_edge(owning_module(alias.name), node.lineno)
                    # `import a.b` is then read as `a.b.<attr>`: _dotted gives the whole chain.
                    module_aliases[alias.asname or alias.name] = alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = own_package.split(".")[: len(own_package.split(".")) - node.level + 1]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            if source.split(".")[0] not in packages:
                continue
            inside_source = module == source or module.startswith(source + ".")
            for alias in node.names:
                submodule = f"{source}.{alias.name}"
                if submodule in graph.files:
                    add_edge(submodule, node.lineno)
                    module_aliases[alias.asname or alias.name] = submodule
                else:
                    add_edge(owning_module(source), node.lineno)
                # A package's private submodule is its own business, nobody else's.
                if _is_private(alias.name) and not (submodule in graph.files and inside_source):
                    graph.private_uses.append(
                        f"{where(node)}: from {source} import {alias.name}")
        elif isinstance(node, ast.Call) and _dotted(node.func) in IMPORT_BY_NAME and node.args:
            name = node.args[0]
            if not (isinstance(name, ast.Constant) and isinstance(name.value, str)):
                graph.hidden_imports.append(f"{where(node)}: {ast.unparse(node)}")
            elif name.value.split(".")[0] in packages:
                add_edge(owning_module(name.value), node.lineno)

    for node in ast.walk(tree):  # `module._name`, once every alias is known
        if isinstance(node, ast.Attribute) and _is_private(node.attr):
            owner = _dotted(node.value)
            if owner in module_aliases:
                graph.private_uses.append(
                    f"{where(node)}: {owner}.{node.attr} ({module_aliases[owner]})")


def import_cycles(edges: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), sorted."""
    index: dict[str, int] = {}
    lowlink: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = lowlink[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in edges.get(node, {}):
            if target not in index:
                visit(target)
                lowlink[node] = min(lowlink[node], lowlink[target])
            elif target in on_stack:
                lowlink[node] = min(lowlink[node], index[target])
        if lowlink[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return sorted(cycles)


def upward_imports(graph: ImportGraph, lower: tuple[str, ...] = LOWER_LAYERS,
                   upper: tuple[str, ...] = UPPER_LAYERS) -> list[str]:
    """`module:line -> target` for every arrow from a lower layer into an upper one."""
    found = []
    for module, targets in sorted(graph.edges.items()):
        if module.split(".")[0] not in lower:
            continue
        for target, line in sorted(targets.items()):
            if target.split(".")[0] in upper:
                found.append(f"{module}:{line} -> {target}")
    return found


def _describe_cycle(cycle: list[str], edges: dict[str, dict[str, int]]) -> str:
    members = set(cycle)
    arrows = [f"{source}:{line} -> {target}" for source in cycle
              for target, line in sorted(edges[source].items()) if target in members]
    return "; ".join(arrows)


def package_of(module: str, root: Path) -> str:
    """The package node of a module: `components.<pkg>` for a package of components/,
    `components` for the components/*.py leaves, else the top-level package."""
    parts = module.split(".")
    if parts[0] == "components" and len(parts) > 1 and (root / "components" / parts[1]).is_dir():
        return f"components.{parts[1]}"
    return parts[0]


def package_edges(graph: ImportGraph, root: Path) -> dict[str, dict[str, str]]:
    """package -> {package it imports: the first `module:line -> target` that does}."""
    edges: dict[str, dict[str, str]] = {}
    for module, targets in sorted(graph.edges.items()):
        source = package_of(module, root)
        found = edges.setdefault(source, {})
        for target, line in sorted(targets.items()):
            imported = package_of(target, root)
            if imported != source:
                found.setdefault(imported, f"{module}:{line} -> {target}")
    return edges


def unlisted_imports(edges: dict[str, dict[str, str]],
                     allowed: dict[str, set[str]]) -> list[str]:
    """Every arrow from a listed package into components/ or models/ that is neither the
    base nor in its allow-list (a package not listed at all may import nothing beyond it)."""
    found = []
    for source, targets in sorted(edges.items()):
        if source not in allowed:
            continue
        for target, example in sorted(targets.items()):
            lower = target.split(".")[0] in LOWER_LAYERS
            base = BASE if source != "components" else set()
            if lower and target not in base | allowed[source]:
                found.append(f"{source} -> {target} ({example})")
    return found


def documented_imports(text: str) -> dict[str, set[str]]:
    """The allow-list as docs/ARCHITECTURE.md's table states it: package -> the packages
    its second column names (`components/x/` -> components.x, `models/` -> models), less
    the base (`components/core/`, `components/*.py`), which the table may name too."""
    def node(name: str) -> str:
        name = name.strip("/")
        return "components" if name == "components/*.py" else name.replace("/", ".")

    section = text.split(PACKAGE_TABLE, 1)[1].split("\n#", 1)[0]
    table = {}
    for row in section.splitlines():
        cells = [cell.strip() for cell in row.strip().strip("|").split("|")]
        if len(cells) < 3 or not cells[0].startswith("`"):
            continue
        named = {node(name) for name in cells[1].split("`")[1::2]}
        table[node(cells[0].strip("`"))] = named - BASE
    return table


# --- the project's own code ---------------------------------------------------------------

@functools.cache
def project_graph() -> ImportGraph:
    """The graph of this checkout, read once for all the tests below (none changes it)."""
    return build_graph(REPO, PACKAGES)


def test_the_graph_covers_every_package_and_sees_imports_inside_functions():
    graph = project_graph()
    assert {name.split(".")[0] for name in graph.files} == set(PACKAGES)
    assert len(graph.files) > 100
    # cli imports its command modules; retrain imports run_command inside a function.
    assert "pipelines.retrain" in graph.edges["pipelines.cli"]
    assert "pipelines.run_command" in graph.edges["pipelines.retrain"]


def test_no_module_imports_a_private_name_of_another():
    graph = project_graph()
    assert graph.private_uses == [], (
        "private names imported across modules; give them a public name in the module "
        "that owns them:\n  " + "\n  ".join(graph.private_uses))


def test_there_is_no_import_cycle():
    graph = project_graph()
    # A module imported by a computed name is an arrow this test cannot see: import it by
    # name (inside the function, if it must stay lazy) so the cycle check covers it.
    hidden = graph.hidden_imports
    assert hidden == [], "imports by a computed name:\n  " + "\n  ".join(hidden)
    cycles = import_cycles(graph.edges)
    assert cycles == [], "import cycles (move what both sides need into a lower module):\n  " \
        + "\n  ".join(_describe_cycle(cycle, graph.edges) for cycle in cycles)


def test_there_is_no_cycle_between_packages():
    edges = package_edges(project_graph(), REPO)
    cycles = import_cycles({source: dict.fromkeys(targets) for source, targets in edges.items()})
    assert cycles == [], (
        "packages that import each other (decide a direction; move what breaks it):\n  "
        + "\n  ".join("; ".join(edges[a][b] for a in cycle for b in cycle if b in edges[a])
                       for cycle in cycles))


def test_components_core_imports_no_other_component():
    edges = package_edges(project_graph(), REPO)
    assert set(edges["components.core"]) <= {"components"}, edges["components.core"]


def test_component_packages_import_only_the_siblings_listed():
    edges = package_edges(project_graph(), REPO)
    packages = {package_of(module, REPO) for module in discover(REPO, LOWER_LAYERS)}
    assert packages == set(COMPONENT_IMPORTS), "list every package in COMPONENT_IMPORTS"
    found = unlisted_imports(edges, COMPONENT_IMPORTS)
    assert found == [], ("imports between packages that docs/ARCHITECTURE.md does not list; "
                         "move the code, or list the arrow there and in COMPONENT_IMPORTS "
                         "with its reason:\n  " + "\n  ".join(found))
    unused = [f"{source} -> {target}" for source, targets in COMPONENT_IMPORTS.items()
              for target in targets if target not in edges.get(source, {})]
    assert unused == [], f"listed but no longer imported (drop them from both lists): {unused}"


def test_the_architecture_table_is_the_allow_list():
    assert documented_imports(ARCHITECTURE.read_text()) == COMPONENT_IMPORTS


def test_components_and_models_import_nothing_from_pipelines_or_benchmarks():
    found = upward_imports(project_graph())
    assert found == [], ("components/ and models/ import from a layer above them; move what "
                         "they need down:\n  " + "\n  ".join(found))


def test_nothing_installed_imports_the_developer_lab():
    graph = project_graph()
    assert any(module.startswith("tools.lab") for module in graph.files)
    assert "benchmarks.runner" in graph.edges["tools.lab.__main__"]  # the lab reuses the bench
    found = upward_imports(graph, INSTALLED, CHECKOUT_ONLY)
    assert found == [], ("installed code imports tools/ (the checkout-only lab); move what "
                         "it needs into benchmarks/:\n  " + "\n  ".join(found))


# --- the checker itself, on a small package that breaks every rule -------------------------

def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_the_checker_finds_private_names_cycles_and_upward_imports(tmp_path):
    _write(tmp_path, {
        "pipelines/__init__.py": "",
        "pipelines/cli.py": "import importlib\nNAMES = ['pipelines.errors']\n"
                            "def main():\n    importlib.import_module('pipelines.cmd')\n"
                            "    for name in NAMES:\n        importlib.import_module(name)\n",
        "pipelines/cmd.py": "def run():\n    from pipelines.cli import _helper\n",
        "pipelines/errors.py": "",
        "components/__init__.py": "",
        "components/tool.py": "from pipelines import errors\nerrors._code\n"
                              "from components.pkg import _impl\n",
        "components/pkg/__init__.py": "from .sub import thing\nfrom . import _impl\n",
        "components/pkg/_impl.py": "",
        "components/pkg/sub.py": "from components.pkg import other\n",
    })
    graph = build_graph(tmp_path, ("pipelines", "components"))

    assert graph.hidden_imports == ["pipelines/cli.py:6: importlib.import_module(name)"]
    assert graph.private_uses == [
        "pipelines/cmd.py:2: from pipelines.cli import _helper",
        "components/tool.py:3: from components.pkg import _impl",
        "components/tool.py:2: errors._code (pipelines.errors)",
    ]
    assert import_cycles(graph.edges) == [
        ["components.pkg", "components.pkg.sub"],
        ["pipelines.cli", "pipelines.cmd"],
    ]
    assert upward_imports(graph) == ["components.tool:1 -> pipelines.errors"]


def test_the_checker_finds_package_cycles_and_unlisted_sibling_imports(tmp_path):
    _write(tmp_path, {
        "components/__init__.py": "",
        "components/errors.py": "",
        "components/core/__init__.py": "",
        "components/core/text.py": "from components import errors\n",
        "components/a/__init__.py": "",
        "components/a/x.py": "from components.core import text\nfrom components.b import y\n",
        "components/b/__init__.py": "",
        "components/b/y.py": "def f():\n    from components.a import x\n",
        "components/c/__init__.py": "",
        "components/c/z.py": "from components.b import y\n",
    })
    graph = build_graph(tmp_path, ("components",))
    edges = package_edges(graph, tmp_path)

    assert import_cycles(graph.edges) == [["components.a.x", "components.b.y"]]
    assert import_cycles({s: dict.fromkeys(t) for s, t in edges.items()}) == [
        ["components.a", "components.b"]]
    allowed = {"components.a": {"components.b"}, "components.b": set(),
               "components.c": set(), "components.core": set()}
    assert unlisted_imports(edges, allowed) == [
        "components.b -> components.a (components.b.y:2 -> components.a.x)",
        "components.c -> components.b (components.c.z:1 -> components.b.y)",
    ]


def test_the_table_is_read_as_the_allow_list():
    text = (f"{PACKAGE_TABLE}\n\n| package | may import | why |\n|---|---|---|\n"
            "| `components/core/` | `components/*.py` only | the base |\n"
            "| `components/trainer/` | `models/`, `components/serving/` | labels |\n"
            "\n## Next\n| `components/x/` | `components/y/` | not this table |\n")
    assert documented_imports(text) == {
        "components.core": set(),
        "components.trainer": {"models", "components.serving"}}


def test_a_package_importing_its_own_submodules_is_no_cycle(tmp_path):
    _write(tmp_path, {
        "components/__init__.py": "",
        "components/pkg/__init__.py": "from components.pkg.sub import thing\n"
                                      "from components.pkg import other as other_lib\n",
        "components/pkg/sub.py": "from components.pkg.other import helper\n",
        "components/pkg/other.py": "",
    })
    graph = build_graph(tmp_path, ("components",))

    assert graph.edges["components.pkg"] == {"components.pkg.sub": 1,
                                             "components.pkg.other": 2}
    assert import_cycles(graph.edges) == []
