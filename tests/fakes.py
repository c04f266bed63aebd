"""Small stand-ins shared by test modules (the fixtures that hand them out are in conftest)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Sleeps:
    """Records the back-off waits of a retrying HTTP client instead of sleeping."""

    waits: list[float] = field(default_factory=list)

    def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)
