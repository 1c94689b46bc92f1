"""Lazy stand-ins for `kubernetes_asyncio.client` and its `models` and `api` packages.

Importing `kubernetes_asyncio.client` imports every one of its ~770 generated model classes and ~60 API
classes (the package's `__init__` lists them all), which costs ~34 MiB of RSS: a third of the operator's
memory at start. The library's own ApiClient imports it too (to deserialise responses into models). This
operator never uses a model: it exchanges plain JSON (`kube/client.py`, `_preload_content=False`), and
only leader election touches four model classes (V1Lease and friends).

`install()` registers, before anything imports them, three package objects that stand for the real ones:
the same directory (so every submodule, e.g. `kubernetes_asyncio.client.api_client`, is the library's own
file, imported as usual), and every name the real `__init__` would import, resolved from the real
`__init__`'s own import list on first use (PEP 562 module `__getattr__`). `from kubernetes_asyncio.client
import V1Lease` imports only that model's module. Measured in docs/design.md; a unit test checks that
every name the real packages export resolves to the library's own object.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import re
import sys
import types
from pathlib import Path
from typing import Any

_ROOT = "kubernetes_asyncio"
CLIENT = "kubernetes_asyncio.client"
MODELS = "kubernetes_asyncio.client.models"
APIS = "kubernetes_asyncio.client.api"
_IMPORT = re.compile(r"^from (kubernetes_asyncio\.client(?:\.[\w]+)+) import (\w+)\s*$", re.MULTILINE)
_VERSION = re.compile(r"^__version__ = \"([^\"]+)\"", re.MULTILINE)


def exported_names(directory: Path) -> dict[str, str]:
    """name -> module, from the `from X import name` lines of a package's real `__init__.py`."""
    source = (directory / "__init__.py").read_text()
    return {attr: module for module, attr in _IMPORT.findall(source)}


def _lazy_package(name: str, directory: Path) -> types.ModuleType:
    where = exported_names(directory)
    module = types.ModuleType(name, f"lazy stand-in for {name} (mpijob.lazyk8s)")
    spec = importlib.machinery.ModuleSpec(name, None, is_package=True)
    spec.submodule_search_locations = [str(directory)]
    module.__spec__ = spec
    module.__path__ = [str(directory)]
    module.__package__ = name
    module.__all__ = list(where)  # type: ignore[attr-defined]

    def __getattr__(attr: str) -> Any:
        target = where.get(attr)
        if target is None:
            raise AttributeError(f"module {name!r} has no attribute {attr!r}")
        if _ROOT not in sys.modules:
            # The package's own __init__ first, in its own order (client, config, ...): otherwise it would
            # start half-way through the import of api_client, and config's import of ApiClient would find
            # that module half-initialised.
            importlib.import_module(_ROOT)
            if attr in module.__dict__:
                return module.__dict__[attr]
        value = getattr(importlib.import_module(target), attr)
        setattr(module, attr, value)  # once: later lookups are plain attribute reads
        return value

    def __dir__() -> list[str]:
        return sorted(set(module.__dict__) | set(where))

    module.__getattr__ = __getattr__  # type: ignore[method-assign]
    module.__dir__ = __dir__  # type: ignore[method-assign]
    return module


def install() -> bool:
    """Registers the stand-ins unless the real packages are already imported (then nothing changes).
    Returns whether the stand-ins are in place."""
    if CLIENT in sys.modules:
        return isinstance(sys.modules[CLIENT].__spec__, importlib.machinery.ModuleSpec) and (
            sys.modules[CLIENT].__spec__.origin is None  # type: ignore[union-attr]
        )
    found = importlib.util.find_spec("kubernetes_asyncio")  # finds the package without running its __init__
    if found is None or not found.submodule_search_locations:
        return False
    root = Path(next(iter(found.submodule_search_locations))) / "client"
    if not all((root / sub / "__init__.py").exists() for sub in ("", "models", "api")):
        return False
    client = _lazy_package(CLIENT, root)
    version = _VERSION.search((root / "__init__.py").read_text())
    client.__version__ = version.group(1) if version else ""  # type: ignore[attr-defined]
    sys.modules[CLIENT] = client
    for name in (MODELS, APIS):
        package = _lazy_package(name, root / name.rsplit(".", 1)[1])
        setattr(client, name.rsplit(".", 1)[1], package)
        sys.modules[name] = package
    return True
