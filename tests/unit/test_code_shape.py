"""The developers' guide: functions short enough to read at once (<= 80 lines) in the operator package, and
test helpers in helper modules (conftest.py or named ones), never imported from another test module."""

from __future__ import annotations

import ast
from pathlib import Path

import mpijob

LIMIT = 80
TESTS = Path(__file__).resolve().parents[1]


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


def imported_test_modules(source: str) -> list[str]:
    """The test modules (`test_*`) that `source` imports, in any form: `import test_x`, `from test_x import`,
    `from .test_x import`, `from . import test_x`, at the top or inside a function. A test function imported
    from a helper module (to run it on another module's fixtures) is not a test module."""

    def test_module(dotted: str) -> str | None:
        return next((part for part in dotted.split(".") if part.startswith("test_")), None)

    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [m for alias in node.names if (m := test_module(alias.name))]
        elif isinstance(node, ast.ImportFrom):
            if node.module is not None:  # `from reference_e2e import test_x` imports a test, not a module
                found += [m] if (m := test_module(node.module)) else []
            else:
                found += [m for alias in node.names if (m := test_module(alias.name))]
    return found


def test_the_import_check_sees_every_form_of_importing_a_test_module_and_nothing_else() -> None:
    source = (
        "import test_a\nfrom test_b import x\nfrom .test_c import y\nfrom . import test_d\n"
        "def f():\n    from test_e import z\n"
        "import kube\nfrom .builders import mpijob\nfrom mpijob.api import constants\n"
        "from reference_e2e import test_run_on_this_testbed\n"
    )
    assert sorted(imported_test_modules(source)) == ["test_a", "test_b", "test_c", "test_d", "test_e"]


def test_no_test_module_imports_another_test_module() -> None:
    # pytest finds conftest.py fixtures without an import; shared helpers live in named helper modules, so a
    # test module's tests are collected (and its module-scoped fixtures made) in that module only.
    offenders = [
        f"{path.relative_to(TESTS)}: {module}"
        for path in sorted(TESTS.rglob("*.py"))
        for module in imported_test_modules(path.read_text())
    ]
    assert not offenders, offenders
