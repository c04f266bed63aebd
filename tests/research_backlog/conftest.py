"""Fixtures shared by the self-improvement loop's route tests (reasoning.admin), one module per route.

What a dispatcher or an operator checks: status codes, bodies, the rows, the audit trail,
that a rejected request writes nothing, that free text is encrypted at rest and stays out
of the trail, and that concurrent pullers never share a row.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import time_machine

from tests.factories import NOW


@pytest.fixture
def clock() -> Iterator[time_machine.Coordinates]:
    """Time frozen at ``tests.factories.NOW``. test_jobs and test_console define their own ``clock``."""
    with time_machine.travel(NOW, tick=False) as traveller:
        yield traveller
