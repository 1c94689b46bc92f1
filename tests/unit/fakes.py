"""Stand-ins for the operator's collaborators, shared by unit modules."""

from __future__ import annotations

from typing import Any


class RecordingClient:
    """Records the writes the executor sends (the executor's API surface only; no server semantics)."""

    def __init__(self) -> None:
        self.writes: list[tuple[str, str]] = []

    async def create(self, path: str, obj: Any, **_: Any) -> Any:
        self.writes.append(("POST", path))
        return obj

    async def merge_patch(self, path: str, patch: Any, **_: Any) -> Any:
        self.writes.append(("PATCH", path))
        return {}

    async def delete(self, path: str, options: Any = None, **_: Any) -> Any:
        self.writes.append(("DELETE", path))
        return {}

    async def get(self, path: str) -> Any:
        return {}
