"""Sizes of the operator's decision code: the longest functions and classes, and the modules, in lines.

Used for issue 9's before/after table (a reader's measure, not a speed one):
    .venv/bin/python bench/code_sizes.py src/mpijob/planner src/mpijob/executor
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path


def sizes(paths: list[Path]) -> tuple[list[tuple[int, str]], list[tuple[int, str]], list[tuple[int, str]]]:
    functions: list[tuple[int, str]] = []
    classes: list[tuple[int, str]] = []
    modules: list[tuple[int, str]] = []
    for root in paths:
        for path in sorted(root.rglob("*.py")):
            text = path.read_text()
            modules.append((len(text.splitlines()), str(path)))
            for node in ast.walk(ast.parse(text)):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                    lines = (node.end_lineno or node.lineno) - node.lineno + 1
                    where = f"{path.name}:{node.name}"
                    if isinstance(node, ast.ClassDef):
                        methods = sum(isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) for n in node.body)
                        classes.append((lines, f"{where} ({methods} methods)"))
                    else:
                        functions.append((lines, where))
    return sorted(functions, reverse=True), sorted(classes, reverse=True), sorted(modules, reverse=True)


def main() -> None:
    paths = [Path(p) for p in sys.argv[1:]] or [Path("src/mpijob/planner"), Path("src/mpijob/executor")]
    functions, classes, modules = sizes(paths)
    for title, rows in (("functions", functions[:10]), ("classes", classes[:5]), ("modules", modules[:8])):
        print(f"| largest {title} | lines |\n|---|---|")
        for lines, name in rows:
            print(f"| {name} | {lines} |")
        print()


if __name__ == "__main__":
    main()
