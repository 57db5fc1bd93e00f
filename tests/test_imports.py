"""The package's import graph, lazy imports inside functions included, has no cycle."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "augsbert_ray"


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    modules = {module_name(path): path for path in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        targets = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("augsbert_ray"):
                targets.add(node.module)
                targets.update(f"{node.module}.{alias.name}" for alias in node.names)  # submodules imported by name
            elif isinstance(node, ast.Import):
                targets.update(alias.name for alias in node.names if alias.name.startswith("augsbert_ray"))
        # importing a.b.c runs a/__init__ and a/b/__init__ first: those are edges too
        targets |= {".".join(target.split(".")[:depth]) for target in targets for depth in range(2, target.count(".") + 1)}
        graph[name] = {target for target in targets if target in modules and target != name and not name.startswith(target + ".")}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for target in sorted(graph[node]):
            if state.get(target) == 1:
                return stack[stack.index(target):] + [target]
            if target not in state and (cycle := visit(target)):
                return cycle
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_the_import_graph_has_no_cycle() -> None:
    graph = import_graph()
    assert "augsbert_ray.pipeline" in graph and graph["augsbert_ray.pipeline"]
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph) or [])


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


STAGE_PACKAGES = ("config", "data", "sampling", "scoring", "labeling", "selection", "training", "tuning", "evaluation", "runtime")


def test_stage_folders_never_import_the_pipeline_or_the_cli() -> None:
    graph = import_graph()
    for name, targets in graph.items():
        if name.split(".")[1:2] and name.split(".")[1] in STAGE_PACKAGES:
            reaching_up = sorted(t for t in targets if t.startswith(("augsbert_ray.pipeline", "augsbert_ray.cli")))
            assert not reaching_up, f"{name} imports {reaching_up}"


def test_the_cli_calls_only_the_public_api() -> None:
    for path in (PACKAGE / "cli").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            modules = ([node.module] if isinstance(node, ast.ImportFrom) and node.module and node.level == 0
                       else [alias.name for alias in node.names] if isinstance(node, ast.Import) else [])
            for module in modules:
                if module.startswith("augsbert_ray"):
                    assert module == "augsbert_ray" or module.startswith("augsbert_ray.cli"), f"{path.name} imports {module}"


BENCH = PACKAGE.parent / "bench"


def public_names(module: str) -> set[str]:
    """``__all__`` of augsbert_ray or of a namespace right below it (a subpackage, or a module such as files); a
    deeper module is private, whatever it lists."""
    import importlib

    if module != "augsbert_ray" and module.count(".") != 1:
        return set()
    return set(getattr(importlib.import_module(module), "__all__", ()))


def test_experiments_use_only_public_names() -> None:
    """bench/ runs as a package (`python -m bench.<script>`) on the public API: every name it takes from augsbert_ray
    is in the ``__all__`` of augsbert_ray or of one of its subpackages, and nothing edits sys.path."""
    scripts = sorted(BENCH.glob("*.py"))
    assert (BENCH / "__init__.py") in scripts and (BENCH / "reproduce.py") in scripts
    for path in scripts:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == "augsbert_ray":
                private = [alias.name for alias in node.names if alias.name not in public_names(node.module)]
                assert not private, f"bench/{path.name}: from {node.module} import {', '.join(private)}: not in an __all__"
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.split(".")[0] == "augsbert_ray":
                        assert alias.name == "augsbert_ray", f"bench/{path.name}: import {alias.name}"
            elif isinstance(node, ast.Attribute) and node.attr == "path" and isinstance(node.value, ast.Name) and node.value.id == "sys":
                raise AssertionError(f"bench/{path.name}:{node.lineno}: sys.path (import siblings as bench.<script>)")
    for script in BENCH.glob("*.sh"):
        assert "sys.path" not in script.read_text(encoding="utf-8"), f"bench/{script.name} edits sys.path"


def test_the_package_finds_no_checkout_paths_from_its_own_location() -> None:
    """jobs/, docs/ and bench/ belong to the source checkout, not to an installed package: nothing under augsbert_ray/
    walks up from its own file (``Path(__file__).parents[...]``) to reach them."""
    for path in PACKAGE.rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        assert "parents[" not in text, f"{path.relative_to(PACKAGE.parent)} walks up the checkout (parents[...])"
