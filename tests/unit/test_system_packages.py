"""The fresh-machine path: every external command the build and image scripts (and the testbed's own
subprocess calls) use is either on a stock machine or provided by a package of testbed/system-packages.txt,
which `make test` and `make demo` install first (testbed/install-system-deps.sh). A command added to a script
without its package fails here, not on a newcomer's machine."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# Scripts that run on the host. testbed/mpi/ is not among them: those files run inside the images.
SCRIPTS = [
    *sorted((ROOT / "testbed").glob("*.sh")),
    ROOT / "testbed" / "extras" / "build.sh",
    ROOT / "testbed" / "helm" / "build.sh",
    ROOT / "deploy" / "image" / "build-offline.sh",
    ROOT / "deploy" / "krew" / "build-archive.sh",
]
PYTHON = sorted((ROOT / "src" / "mpijob_testbed").glob("*.py"))

# What a stock machine has (Debian 12 with its essential and standard packages, plus the toolchains the
# README asks for: Go, Python 3.11 with venv and headers, gcc/g++, git, curl): each name is a command the
# scripts call; the comment says where it comes from.
_STOCK = [
    "bash sh cat cp mv rm ln mkdir mktemp chmod chown touch ls find xargs sort uniq cut tr head tail wc tee pwd",
    "sed awk grep date sleep basename dirname readlink realpath sha256sum du df id env nice timeout test install",
    "printf echo true false kill tar gzip unshare mount umount nproc uname stat",  # coreutils, util-linux, ...
    "dpkg dpkg-query apt-get",  # Debian's package tools
    "sudo",  # only when not root; install-system-deps.sh says so when it is missing
    "ip",  # iproute2
    "go",  # the Go toolchain (README: a fresh machine has Go)
    "python3 git curl cmake g++",
]
STOCK = {word for entry in _STOCK for word in entry.split()}

_BUILTINS = set(
    [
        "if",
        "then",
        "else",
        "elif",
        "fi",
        "for",
        "while",
        "until",
        "do",
        "done",
        "case",
        "esac",
        "in",
        "function",
        "return",
        "exit",
        "break",
        "continue",
        "local",
        "export",
        "readonly",
        "declare",
        "set",
        "unset",
        "shift",
        "source",
        ".",
        ":",
        "cd",
        "pushd",
        "popd",
        "trap",
        "wait",
        "eval",
        "exec",
        "command",
        "type",
        "read",
        "mapfile",
        "printf",
        "echo",
        "test",
        "[",
        "[[",
        "]]",
        "time",
        "let",
        "true",
        "false",
        "getopts",
        "umask",
        "ulimit",
        "shopt",
        "select",
    ]
)
# Wrappers whose argument is the command that runs (after their own options).
_WRAPPERS = {"nice", "exec", "env", "sudo", "timeout", "xargs", "time"}
_SEPARATORS = re.compile(r"\|\||&&|[;|&(){}!`\n]")
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\[[^]]*\])?\+?=")
_WORD = re.compile(r"^[a-z][a-z0-9_.+-]*$")


def _strip_heredocs(text: str) -> str:
    out, end = [], None
    for line in text.splitlines():
        if end is not None:
            if line.strip() == end:
                end = None
            continue
        match = re.search(r"<<-?\s*['\"]?([A-Za-z_][A-Za-z0-9_]*)['\"]?", line)
        if match:
            end = match.group(1)
        out.append(line)
    return "\n".join(out)


def _command_text(text: str) -> str:
    """The text with comments and quoted strings removed (each string becomes the word Q, so a command named
    by a variable, `"${pip[@]}" install`, is not mistaken for `install`), keeping what `$(...)` runs, also
    inside double quotes."""
    out: list[str] = []
    stack = ["code"]  # code | dq (inside "...") ; parens counts plain ( ) per code context
    parens = [0]
    i = 0
    while i < len(text):
        ch, top = text[i], stack[-1]
        if top == "dq":
            if ch == "\\":
                i += 1
            elif ch == '"':
                stack.pop()
            elif text.startswith("$(", i):
                stack.append("code")
                parens.append(0)
                out.append("\n")
                i += 1
        elif ch == "'":
            end = text.find("'", i + 1)
            i = len(text) if end < 0 else end
            out.append(" Q ")
        elif ch == '"':
            stack.append("dq")
            out.append(" Q ")
        elif ch == "#" and (i == 0 or text[i - 1] in " \t\n;"):
            while i < len(text) and text[i] != "\n":
                i += 1
            continue
        elif ch == "(":
            parens[-1] += 1
            out.append(ch)
        elif ch == ")" and parens[-1] == 0 and len(stack) > 1:
            stack.pop()
            parens.pop()
            out.append("\n")
        else:
            if ch == ")":
                parens[-1] -= 1
            out.append(ch)
        i += 1
    return "".join(out)


_LEADING = {"then", "do", "else", "elif", "if", "while", "until", "time"}


def _first_command(tokens: list[str]) -> str | None:
    while tokens and (tokens[0] in _LEADING or _ASSIGNMENT.match(tokens[0])):
        tokens = tokens[1:]
    while tokens and tokens[0] in _WRAPPERS:
        wrapper, tokens = tokens[0], tokens[1:]
        while tokens and (tokens[0].startswith("-") or _ASSIGNMENT.match(tokens[0]) or tokens[0].isdigit()):
            tokens = tokens[1:]
        if wrapper == "timeout" and tokens and re.match(r"^\d+[smh]?$", tokens[0]):
            tokens = tokens[1:]
    if not tokens or tokens[0] == "chroot":  # what a chroot runs is the image's, not the host's
        return None
    if tokens[0] == "command" and len(tokens) > 1 and tokens[1] == "-v":
        return None
    return tokens[0]


def commands_of_script(text: str, extra_functions: tuple[str, ...] = ()) -> set[str]:
    """External command names a bash script runs (heuristic: enough for these scripts, checked below)."""
    text = _strip_heredocs(text)
    functions = set(re.findall(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*\(\)\s*\{", text, re.MULTILINE)) | set(extra_functions)
    # Array assignments (`names=(a b)`, `declare -A x=([k]=v)`) hold words, not commands.
    text = re.sub(r"\b[A-Za-z_][A-Za-z0-9_]*\+?=\([^)]*\)", " ", text)
    text = re.sub(r"\$\(\(.*?\)\)", "0", text)  # arithmetic
    # `case` patterns (`kueue)`) are not commands.
    text = re.sub(r"^\s*[^\s()]+\)", " ", text, flags=re.MULTILINE)
    found = set()
    for segment in _SEPARATORS.split(_command_text(text)):
        tokens = [t for t in segment.split() if not t.startswith("<") and not t.startswith(">")]
        name = _first_command(tokens)
        if name and _WORD.match(name) and name not in _BUILTINS and name not in functions:
            found.add(name)
    return found


def commands_of_python(text: str) -> set[str]:
    """argv[0] of the subprocess calls in the testbed's Python (always a literal list there)."""
    return set(re.findall(r"(?:run|call|Popen|check_output|_run)\(\s*\[\s*\"([a-z][\w.+-]*)\"", text))


def provided() -> dict[str, str]:
    """command -> package, from testbed/system-packages.txt."""
    out = {}
    for line in (ROOT / "testbed" / "system-packages.txt").read_text().splitlines():
        fields = line.split("#")[0].split()
        if len(fields) >= 2 and fields[1] != "-":
            for command in fields[1].split(","):
                out[command] = fields[0]
    return out


def unprovided(commands: set[str]) -> set[str]:
    return commands - STOCK - set(provided())


def test_every_command_the_build_and_image_scripts_call_is_stock_or_in_the_package_list() -> None:
    missing = {}
    # The functions of testbed/lib.sh, which the testbed's scripts source.
    shared = tuple(re.findall(r"^([a-z_0-9]+)\(\) \{", (ROOT / "testbed" / "lib.sh").read_text(), re.MULTILINE))
    for script in SCRIPTS:
        left = unprovided(commands_of_script(script.read_text(), shared))
        if left:
            missing[str(script.relative_to(ROOT))] = sorted(left)
    for module in PYTHON:
        left = unprovided(commands_of_python(module.read_text()))
        if left:
            missing[str(module.relative_to(ROOT))] = sorted(left)
    assert not missing, f"commands neither stock nor in testbed/system-packages.txt: {missing}"


def test_the_check_finds_the_commands_of_a_script() -> None:
    script = """#!/usr/bin/env bash
# frobnicate is only mentioned here
set -euo pipefail
step() { echo "$*"; }
want="$(cat a | sha256sum | frobnicate -x)"
if [[ -f x ]]; then nice -n 10 mmdebstrap --quiet bookworm "$out"; fi
case "$t" in
  kueue) build kueue ;;
esac
FOO=1 env BAR=2 umoci init --layout x && chroot "$root" apt-get purge -y gcc
cat > f <<'EOF'
quux --not-a-command
EOF
step "done"
"""
    assert commands_of_script(script) == {"cat", "sha256sum", "frobnicate", "mmdebstrap", "umoci", "build"}
    assert unprovided(commands_of_script(script)) == {"frobnicate", "build"}
    assert commands_of_python('subprocess.run(["iptables", "-t"], check=False)\n_run(["ip", "link"])') == {
        "iptables",
        "ip",
    }


def test_every_listed_package_is_installed_by_the_one_install_step() -> None:
    install = (ROOT / "testbed" / "install-system-deps.sh").read_text()
    assert "system-packages.txt" in install
    makefile = (ROOT / "Makefile").read_text()
    for target in ("test:", "demo:"):
        line = next(line for line in makefile.splitlines() if line.startswith(target))
        assert line.split(":", 1)[1].split()[0] == "system-deps", line
