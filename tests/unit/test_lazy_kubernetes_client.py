"""kubernetes_asyncio's generated models and API classes load on first use only (mpijob/lazyk8s.py):
starting the operator must not load them all, every name the library's packages export must still resolve to
the library's own object, and importing the library's packages without the programs changes nothing."""

from __future__ import annotations

import json
import subprocess
import sys

_PROBE = """
import json, sys
import mpijob.cli.operator  # noqa: F401 (what `mpijob operator` imports: the informers, the client, leader election)
import kubernetes_asyncio.leaderelection.resourcelock.leaselock  # noqa: F401
prefixes = ("kubernetes_asyncio.client.models.", "kubernetes_asyncio.client.api.")
loaded = [m for m in sys.modules if m.startswith(prefixes)]
print(json.dumps(loaded))
"""

_ALL = """
import importlib, json
from pathlib import Path
import mpijob.lazyk8s as lazy
lazy.install()
import kubernetes_asyncio.client as client
bad = []
for package in (lazy.CLIENT, lazy.MODELS, lazy.APIS):
    module = importlib.import_module(package)
    for name, where in lazy.exported_names(Path(module.__path__[0])).items():
        if getattr(module, name) is not getattr(importlib.import_module(where), name):
            bad.append(f"{package}.{name}")
print(json.dumps({"bad": bad, "models": len(dir(client.models)), "version": client.__version__}))
"""


def _run(code: str) -> object:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_importing_the_operator_loads_only_the_few_model_and_api_classes_it_uses() -> None:
    loaded = _run(_PROBE)

    assert isinstance(loaded, list)
    assert len(loaded) < 20, loaded  # the library has ~770 models and ~60 APIs


def test_importing_the_operators_packages_leaves_kubernetes_asyncio_as_it_is() -> None:
    # Only the programs (mpijob.cli) install the stand-ins; a library user gets the library's own package.
    real = _run(
        "import json, sys\n"
        "import mpijob.app.operator  # noqa: F401\n"
        "print(json.dumps(sys.modules['kubernetes_asyncio.client'].__spec__.origin is not None))"
    )

    assert real is True


def test_every_name_the_client_packages_export_resolves_to_the_library_object() -> None:
    found = _run(_ALL)

    assert isinstance(found, dict)
    assert found["bad"] == []
    assert found["models"] > 700
    assert found["version"]


def test_watch_events_decode_as_the_standard_library_decodes_them() -> None:
    # The informers decode every watch line with orjson (api/jsoncodec.py); same values, and the
    # standard library's answer for what orjson refuses.
    from mpijob.api.jsoncodec import loads

    for text in (
        '{"type": "MODIFIED", "object": {"metadata": {"resourceVersion": "42", "generation": 9223372036854775807}}}',
        '{"s": "\\u00e9\\ud83d\\ude00", "f": 1.5, "n": null, "b": [true, false]}',
        '{"lone": "\\ud800"}',
    ):
        assert loads(text.encode()) == json.loads(text)
