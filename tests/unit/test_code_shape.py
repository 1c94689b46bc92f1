"""The developers' guide: functions short enough to read at once (<= 80 lines) in the operator package."""

from __future__ import annotations

import ast
from pathlib import Path

import mpijob

LIMIT = 80


def test_no_function_of_the_operator_is_longer_than_80_lines() -> None:
    root = Path(mpijob.__file__).parent
    too_long = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > LIMIT:
                    too_long.append(f"{path.relative_to(root)}:{node.lineno} {node.name} ({length} lines)")
    assert not too_long, too_long
