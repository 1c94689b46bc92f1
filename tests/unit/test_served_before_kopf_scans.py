"""Right after a kube-apiserver restart, discovery answers for a moment without the CRD groups (measured on
the testbed); kopf scans discovery once at start, so an operator starting then never watched MPIJobs. The
operator now waits, before kopf starts, until discovery lists every kind whose CRD exists."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import aiohttp

from mpijob.executor.client import ApiError, Client
from mpijob.runtime.served import ABSENT, PENDING, SERVED, discovery_state, wait_until_served

CRD = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/mpijobs.kubeflow.org"
LISTED = {
    "groups": [
        {"name": "apps", "versions": [{"version": "v1"}]},
        {"name": "kubeflow.org", "versions": [{"version": "v2beta1"}]},
    ]
}
UNLISTED = {"groups": [{"name": "apps", "versions": [{"version": "v1"}]}]}
MPIJOBS = {"resources": [{"name": "mpijobs"}, {"name": "mpijobs/status"}]}
SERVED_CRD = {"spec": {"versions": [{"name": "v2beta1", "served": True}]}}


class _Discovery:
    """The API server's answers, path by path; a list is consumed one answer per request (the last repeats)."""

    def __init__(self, answers: dict[str, Any]) -> None:
        self.answers = answers
        self.requests: list[str] = []

    async def get(self, path: str) -> Any:
        self.requests.append(path)
        answer = self.answers.get(path, ApiError(404, "Not Found", ""))
        if isinstance(answer, list):
            answer = answer.pop(0) if len(answer) > 1 else answer[0]
        if isinstance(answer, BaseException):
            raise answer
        return answer


def _state(answers: dict[str, Any]) -> str:
    return asyncio.run(discovery_state(cast(Client, _Discovery(answers)), "kubeflow.org", "v2beta1", "mpijobs"))


def test_a_kind_discovery_lists_is_served() -> None:
    assert _state({"/apis": LISTED, "/apis/kubeflow.org/v2beta1": MPIJOBS}) == SERVED


def test_discovery_without_the_group_while_its_crd_exists_is_pending() -> None:
    # The moment after a restart: /apis answers 200 without kubeflow.org, the CRD is there.
    assert _state({"/apis": UNLISTED, CRD: SERVED_CRD}) == PENDING
    # ... or the group is listed and its version answers 503 / 404 before the handlers are installed.
    assert _state({"/apis": LISTED, "/apis/kubeflow.org/v2beta1": ApiError(503, "", ""), CRD: SERVED_CRD}) == PENDING
    assert _state({"/apis": LISTED, CRD: SERVED_CRD}) == PENDING


def test_an_unreachable_api_server_is_pending() -> None:
    refused = aiohttp.ClientConnectionError("connect call failed")
    assert _state({"/apis": refused}) == PENDING
    assert _state({"/apis": UNLISTED, CRD: ApiError(503, "", "")}) == PENDING


def test_a_built_in_kind_missing_from_discovery_is_pending() -> None:
    # Right after a restart an operator's scan missed batch/v1 (measured): built-ins have no CRD to ask.
    state = asyncio.run(discovery_state(cast(Client, _Discovery({"/apis": UNLISTED})), "batch", "v1", "jobs"))
    assert state == PENDING
    core = _Discovery({"/api": {"versions": ["v1"]}, "/api/v1": {"resources": [{"name": "pods"}]}})
    assert asyncio.run(discovery_state(cast(Client, core), "", "v1", "pods")) == SERVED


def test_a_kind_without_a_crd_is_left_to_kopf() -> None:
    assert _state({"/apis": UNLISTED}) == ABSENT  # CRD 404
    assert _state({"/apis": UNLISTED, CRD: ApiError(403, "Forbidden", "")}) == ABSENT
    assert _state({"/apis": UNLISTED, CRD: {"spec": {"versions": [{"name": "v1", "served": True}]}}}) == ABSENT


def test_the_wait_ends_only_once_discovery_lists_the_kind() -> None:
    api = _Discovery(
        {
            "/apis": [aiohttp.ClientConnectionError("refused"), UNLISTED, UNLISTED, LISTED],
            "/apis/kubeflow.org/v2beta1": MPIJOBS,
            CRD: SERVED_CRD,
        }
    )
    asyncio.run(wait_until_served(cast(Client, api), [("kubeflow.org", "v2beta1", "mpijobs")], pause=0.001))

    assert api.requests.count("/apis") == 4
    assert api.requests[-1] == "/apis/kubeflow.org/v2beta1"


def test_the_operator_waits_for_its_kinds_before_kopf_starts(monkeypatch: Any) -> None:
    import kopf

    from mpijob.runtime import operator

    calls: list[str] = []

    class _Api:
        configuration = None

        async def close(self) -> None:
            return None

    async def load(_: Any) -> Any:
        return _Api()

    waited: list[tuple[str, str, str]] = []
    registered: set[tuple[str, str, str]] = set()

    async def wait(_: Any, kinds: Any) -> None:
        calls.append("wait")
        waited.extend(kinds)

    async def kopf_operator(registry: Any, **_: Any) -> None:
        calls.append("kopf")
        # Every kind kopf is asked to index or watch (kopf's registry; private, pinned by this test).
        for selector in registry._indexing.get_all_selectors() | registry._watching.get_all_selectors():
            registered.add((selector.group or "", str(selector.version), str(selector.any_name or selector.plural)))

    async def version(*_: Any, **__: Any) -> Any:
        raise ApiError(503, "", "")

    monkeypatch.setattr(operator, "load_api_client", load)
    monkeypatch.setattr(operator, "wait_until_served", wait)
    monkeypatch.setattr(kopf, "operator", kopf_operator)
    monkeypatch.setattr(Client, "request", version)
    asyncio.run(operator.run(operator.OperatorOptions()))

    assert calls == ["wait", "kopf"]
    assert ("kubeflow.org", "v2beta1", "mpijobs") in waited
    assert len(registered) == 10 and registered <= set(waited), (registered, set(waited))
