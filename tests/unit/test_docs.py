"""The docs match the code: generated pages are current, and every file, test and code pointer they name exists."""

from __future__ import annotations

import ast
import fnmatch
import os
import re
from pathlib import Path

from mpijob.api.crd import crd
from mpijob.api.reference import api_reference

REPO = Path(__file__).resolve().parents[2]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def test_api_reference_matches_the_models() -> None:
    committed = (REPO / "docs/api-reference.md").read_text()
    assert committed == api_reference(), "docs/api-reference.md is stale: run `make docs`"


def test_every_elastic_policy_field_is_in_the_api_reference() -> None:
    # The CRD's schema is the list (test_crd.py pins its names); the reference must document each.
    (version,) = crd()["spec"]["versions"]
    fields = version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["elasticPolicy"]["properties"]
    text = api_reference()
    for field in fields:
        assert f"| `{field}` |" in text, field
    assert "### `spec.elasticPolicy`" in text


def _bound(node: ast.AST) -> list[str]:
    """The names a statement binds at its own level: a def, a class, `x = ...`, `x: T = ...`."""
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return [node.name]
    targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
    return [target.id for target in targets if isinstance(target, ast.Name)]


def _members(scope: ast.Module | ast.ClassDef) -> dict[str, ast.AST]:
    """A module's or class's functions, classes and assigned names; a class's `self.x` attributes too."""
    out: dict[str, ast.AST] = {name: node for node in scope.body for name in _bound(node)}
    if isinstance(scope, ast.ClassDef):
        stored = [n for n in ast.walk(scope) if isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store)]
        for node in stored:
            if isinstance(node.value, ast.Name) and node.value.id == "self":
                out.setdefault(node.attr, node)
    return out


def _defines(path: Path, dotted: str) -> bool:
    """Whether the module at `path` defines `dotted`: a function, class or assignment, or `Class.member`."""
    scope: ast.AST = ast.parse(path.read_text())
    for part in dotted.split("."):
        if not isinstance(scope, ast.Module | ast.ClassDef) or part not in _members(scope):
            return False
        scope = _members(scope)[part]
    return True


def test_every_code_pointer_in_the_design_names_an_existing_function() -> None:
    """docs/design.md's "Where each rule lives" names `module.py:Function` (or `Class.method`): each must
    exist, so the pointers cannot rot when code moves."""
    text = (REPO / "docs/design.md").read_text()
    section = text.split("## Where each rule lives", 1)[1].split("\n## ", 1)[0]
    pointers = re.findall(r"`([a-z_/]+\.py):([A-Za-z_.]+)`", section)
    assert len(pointers) > 20
    for path, dotted in pointers:
        assert _defines(REPO / "src/mpijob" / path, dotted), (
            f"docs/design.md points to {path}:{dotted}, which does not exist"
        )


def test_every_module_py_colon_name_pointer_in_the_docs_exists() -> None:
    missing = [
        f"{doc.name}: {path}:{dotted}"
        for doc in DOCS
        for path, dotted in re.findall(r"`([a-z_/]+\.py):([A-Za-z_.]+)`", doc.read_text())
        if not _defines(REPO / "src/mpijob" / path, dotted)
    ]
    assert not missing, "\n".join(missing)


def _where(first: str) -> list[Path]:
    """The operator's modules `first` may mean: a module of that name (the planner's first), else the modules
    defining a class of that name."""
    layers = ("planner", "api", "executor", "runtime", "cli")
    modules = [REPO / "src/mpijob" / layer / f"{first}.py" for layer in layers]
    named = [m for m in modules if m.exists()][:1]
    if named:
        return named
    return [
        m for m in sorted((REPO / "src/mpijob").rglob("*.py")) if re.search(rf"^class {first}\b", m.read_text(), re.M)
    ]


API_OBJECT_PARTS = ("spec", "status", "metadata")  # `status.lastWorkerIndex` is a field, not planner/status.py


def test_every_code_pointer_in_the_reliability_guarantees_exists() -> None:
    """The guarantees table of docs/reliability.md says where each rule lives (`module.function`,
    `Class.method`): each must exist."""
    rows = [line.split(" | ") for line in (REPO / "docs/reliability.md").read_text().splitlines()]
    how = [cols[2] for cols in rows if len(cols) > 3 and re.match(r"\| \d+$", cols[0])]
    pointers = [m for cell in how for m in re.findall(r"`([A-Za-z_]+)\.([A-Za-z_]+)(?:\([^`]*\))?`", cell)]
    checked = [(first, name) for first, name in pointers if first not in API_OBJECT_PARTS and _where(first)]
    assert len(checked) > 20, checked
    missing = [
        f"{a}.{b}" for a, b in checked if not any(_defines(m, f"{a}.{b}" if m.stem != a else b) for m in _where(a))
    ]
    assert not missing, missing


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped (backticks too), spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    in_code = False
    for line in path.read_text().splitlines():
        if line.startswith("```"):
            in_code = not in_code
        if in_code or not line.startswith("#"):
            continue
        slug = _slug(line.lstrip("#"))
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def test_every_relative_link_in_the_readme_and_docs_points_to_a_file_and_heading_that_exist() -> None:
    broken = []
    checked = 0
    for doc in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        text = re.sub(r"```.*?```", "", doc.read_text(), flags=re.S)
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):
                continue  # https:, mailto:
            checked += 1
            path_part, _, anchor = target.partition("#")
            dest = (doc.parent / path_part).resolve() if path_part else doc
            if not dest.exists():
                broken.append(f"{doc.relative_to(REPO)}: {target} (no such file)")
            elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
                broken.append(f"{doc.relative_to(REPO)}: {target} (no such heading)")
    assert checked > 20, checked  # the pattern still finds the links
    assert not broken, "\n".join(broken)


# Paths in the reference operator's repository (and kubectl's `deploy/NAME`) that the docs quote as such.
ELSEWHERE = ("deploy/v2beta1/", "examples/v2beta1/", "deploy/mpijob-operator")
# A path under one of our top-level folders; a module path relative to src/mpijob; a bare file name.
REPO_PATH = re.compile(r"(?<![\w./-])((?:src/mpijob\w*|tests|deploy|bench|testbed|examples|docs)/[\w./*-]*[\w*])")
MODULE_PATH = re.compile(r"(?<![\w./-])((?:api|planner|executor|runtime|cli)/\w+\.py)\b")
FILE_NAME = re.compile(r"(?<![\w/.*-])([\w-]+\.py)\b")
TEST_NAME = re.compile(r"(?<![\w/.*])(test_\w+)(?![\w.*])")


def _named(pattern: re.Pattern[str], text: str) -> set[str]:
    return {m.rstrip("/.") for m in pattern.findall(text)}


def _repository_files() -> list[str]:
    """Every path under the checkout, relative to it; hidden directories (.git, .venv, .cache) and build
    output left out, since the docs must not rely on them."""
    out = []
    for root, dirs, names in os.walk(REPO):
        dirs[:] = [d for d in dirs if not d.startswith(".") and d not in ("build", "__pycache__")]
        here = Path(root).relative_to(REPO)
        out += [(here / name).as_posix() for name in dirs + names]
    return out


def test_every_file_and_test_named_in_the_readme_and_docs_exists() -> None:
    """Paths (`src/...`, `tests/...`, `deploy/...`, a glob like `tests/unit/test_safety_*.py`), modules
    (`planner/regrow.py`), file names (`test_rbac.py`) and test functions named in prose must exist, so a
    rename or removal cannot leave a doc pointing at nothing. Code blocks are left out for bare file names (a
    user's `train.py`)."""
    files = _repository_files()
    names = {Path(f).name for f in files}
    tests = set()
    for path in REPO.glob("tests/**/*.py"):
        tests |= set(re.findall(r"def (test_\w+)", path.read_text()))
    missing = []
    checked = 0
    for doc in DOCS:
        text = doc.read_text()
        prose = re.sub(r"```.*?```", "", text, flags=re.S)
        paths = {p for p in _named(REPO_PATH, text) if not p.startswith(ELSEWHERE)}
        paths |= {f"src/mpijob/{m}" for m in _named(MODULE_PATH, text)}
        checked += len(paths)
        missing += [f"{doc.name}: {p}" for p in paths if not any(fnmatch.fnmatch(f, p) for f in files)]
        missing += [f"{doc.name}: {n}" for n in _named(FILE_NAME, prose) if n not in names]
        missing += [f"{doc.name}: {t}" for t in _named(TEST_NAME, text) if t not in tests]
    assert checked > 100, checked  # the pattern still finds the paths
    assert not missing, "\n".join(sorted(missing))
