"""The figures ``make load`` (bench/load.py) judges by: per-route errors and percentiles, and
whether a process's memory stayed flat. Pure functions: no server, no database."""

from __future__ import annotations

from types import ModuleType

import pytest

from tests.scripts import BENCH, load_script


@pytest.fixture(scope="module")
def load() -> ModuleType:
    return load_script(BENCH / "load.py", "load_script")  # it imports bench_common beside it


def test_any_answer_but_2xx_or_3xx_is_an_error_and_counts_over_the_whole_run(load: ModuleType) -> None:
    records = [
        ["POST /api/reasoning/ingest", 5.0, 900.0, 429],  # during warm-up: an error, not a latency
        *[["POST /api/reasoning/ingest", 20.0 + i, float(i + 1), 200] for i in range(100)],
        ["POST /api/reasoning/ingest", 130.0, 7.0, 0],  # no answer
        ["GET /dashboard/admin/reasoning/", 20.0, 3.0, 302],
    ]
    by_route = {row.route: row for row in load.route_figures(records, since=10.0)}
    ingest = by_route["POST /api/reasoning/ingest"]
    assert (ingest.requests, ingest.errors) == (102, 2)
    assert (ingest.p50_ms, ingest.p95_ms, ingest.p99_ms) == (50.0, 95.0, 99.0)  # the 900 ms is before `since`
    page = by_route["GET /dashboard/admin/reasoning/"]
    assert (page.requests, page.errors) == (1, 0)


def test_memory_is_flat_when_the_last_third_stays_within_the_margin_of_the_first(load: ModuleType) -> None:
    mib = 1024
    warm_up = [(0.0, 10 * mib)]  # left out: before `since`
    steady = [(10.0 + i, 100 * mib + (i % 2) * mib) for i in range(9)]
    flat = load.flatness(warm_up + steady, since=10.0, margin_pct=10, margin_kib=8 * mib)
    assert flat.flat and flat.first_kib == 100 * mib and flat.allowed_kib == 10 * mib

    growing = [(10.0 + i, 100 * mib + i * 2 * mib) for i in range(9)]  # 2 MiB a sample
    grew = load.flatness(growing, since=10.0, margin_pct=10, margin_kib=8 * mib)
    assert not grew.flat and grew.growth_kib == 12 * mib

    assert load.flatness(steady[:2], since=10.0, margin_pct=10, margin_kib=8 * mib) is None
