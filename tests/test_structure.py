"""The package's shape: no module imports one that imports it back, and each says what its one job is."""

import ast
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "rloo_kit"


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in PACKAGE.rglob("*.py")}


def imports(path: Path) -> set[str]:
    """The rloo_kit modules a file imports, at top level or inside a function, relative imports resolved."""
    here = module_name(path).split(".")
    package = here if path.name == "__init__.py" else here[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = ".".join(package[:len(package) - node.level + 1]) if node.level else ""
            module = ".".join(filter(None, (base, node.module)))
            found |= {f"{module}.{a.name}" for a in node.names if f"{module}.{a.name}" in MODULES} or {module}
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
    return {m for m in found if m in MODULES}


def test_no_import_circle():
    """A package imports its own modules (its __init__ re-exports them): that is not a circle; anything else
    that comes back to where it started is."""
    graph = {m: {i for i in imports(p) if i != m and not m.startswith(i + ".")} for m, p in MODULES.items()}

    def reachable(start: str) -> set[str]:
        seen, todo = set(), [start]
        while todo:
            for nxt in graph[todo.pop()] - seen:
                seen.add(nxt)
                todo.append(nxt)
        return seen

    circles = sorted(m for m in graph if m in reachable(m))
    assert not circles, f"modules that import themselves back through others: {circles}"


def test_every_module_opens_with_its_job():
    for name, path in MODULES.items():
        doc = ast.get_docstring(ast.parse(path.read_text()))
        assert doc and len(doc.split()) >= 5, f"{name} has no opening docstring naming its job"


def test_the_module_map_is_the_tree():
    """docs/python.md's module map names every module of the package, and nothing that is not there."""
    documented = set(re.findall(r"^\| `([\w./]+)` \|", (PACKAGE.parent / "docs/python.md").read_text(), re.M))
    tree = {m.removeprefix("rloo_kit.").replace(".", "/") for m in MODULES if m != "rloo_kit"}
    packages = {m.removeprefix("rloo_kit.") for m, p in MODULES.items() if p.name == "__init__.py" and m != "rloo_kit"}
    undocumented = sorted(tree - packages - documented)
    assert not undocumented and documented <= tree, (f"documented, not in the tree: {sorted(documented - tree)}; "
                                                     f"in the tree, not documented: {undocumented}")


def test_one_name_one_meaning():
    """No public name of the package is also the name of one of its modules (`rloo_kit.preflight` is the function)."""
    import rloo_kit

    clashes = sorted(set(rloo_kit.__all__) & {m.removeprefix("rloo_kit.") for m in MODULES})
    assert not clashes, f"names that are both a function and a module: {clashes}"


def test_one_source_for_each_constant():
    """The CLI's choices are read from the modules that own them, not restated."""
    from rloo_kit.cli import build_parser
    from rloo_kit.models import BACKENDS
    from rloo_kit.tasks import TASKS

    parser = build_parser()
    train = parser._subparsers._group_actions[0].choices["train"]
    choices = {a.dest: a.choices for a in train._actions if a.choices}
    assert tuple(choices["task"]) == ("auto", *TASKS) and tuple(choices["backend"]) == BACKENDS


def test_the_wheel_holds_every_subpackage():
    """What setuptools packs (pyproject's package discovery) is the whole tree: a wheel without rloo_kit.tools
    installed from git imports, then fails at the first tool."""
    from setuptools import find_packages

    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    config = tomllib.loads((PACKAGE.parent / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    found = set(find_packages(str(PACKAGE.parent), include=config["include"]))
    packages = {m for m, p in MODULES.items() if p.name == "__init__.py"}
    assert found == packages, f"packed: {sorted(found)}; in the tree: {sorted(packages)}"
