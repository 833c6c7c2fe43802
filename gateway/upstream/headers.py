"""Response headers as the adapters read them: case-insensitive, built only when read."""

from __future__ import annotations

from collections.abc import Iterator, Mapping


class ResponseHeaders(Mapping[str, str]):
    """Case-insensitive view of the raw header list, built on first access (error paths only)."""

    __slots__ = ("_map", "_raw")

    def __init__(self, raw: list[tuple[bytes, bytes]]) -> None:
        self._raw = raw
        self._map: dict[str, str] | None = None

    def _built(self) -> dict[str, str]:
        if self._map is None:
            built: dict[str, str] = {}
            for name, value in self._raw:
                key = name.decode("latin-1").lower()
                text = value.decode("latin-1")
                built[key] = f"{built[key]}, {text}" if key in built else text
            self._map = built
        return self._map

    def __getitem__(self, key: str) -> str:
        return self._built()[key.lower()]

    def get(self, key: str, default: object = None) -> object:  # type: ignore[override]
        return self._built().get(key.lower(), default)

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and key.lower() in self._built()

    def __iter__(self) -> Iterator[str]:
        return iter(self._built())

    def __len__(self) -> int:
        return len(self._built())
