"""The package's shape: no module imports one that imports it back, and each says what its one job is."""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "rloo_kit"


def imports(path: Path) -> set[str]:
    """The rloo_kit modules a file imports, at top level or inside a function."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            found |= {node.module.split(".")[0]} if node.module else {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("rloo_kit."):
            found.add(node.module.split(".")[1])
        elif isinstance(node, ast.Import):
            found |= {a.name.split(".")[1] for a in node.names if a.name.startswith("rloo_kit.")}
    return found


def test_no_import_circle():
    modules = {p.stem: p for p in PACKAGE.glob("*.py") if p.stem != "__init__"}
    graph = {m: imports(p) & set(modules) - {m} for m, p in modules.items()}

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
    for path in PACKAGE.glob("*.py"):
        doc = ast.get_docstring(ast.parse(path.read_text()))
        assert doc and len(doc.split()) >= 5, f"{path.name} has no opening docstring naming its job"


def test_one_source_for_each_constant():
    """The CLI's choices are read from the modules that own them, not restated."""
    from rloo_kit.cli import build_parser
    from rloo_kit.models import BACKENDS
    from rloo_kit.tasks import TASKS

    parser = build_parser()
    train = parser._subparsers._group_actions[0].choices["train"]
    choices = {a.dest: a.choices for a in train._actions if a.choices}
    assert tuple(choices["task"]) == ("auto", *TASKS) and tuple(choices["backend"]) == BACKENDS
