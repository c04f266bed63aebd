"""``make bench``'s regression guard (bench/bench_common.py): each figure line is compared with the
accepted line measured the same way in bench/baseline.txt, and a figure more than 15 % worse is
called out. Pure functions: no server, no database."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest

from tests.scripts import BENCH, load_script


@pytest.fixture(scope="module")
def common() -> ModuleType:
    return load_script(BENCH / "bench_common.py", "bench_common_under_test")


def test_a_rate_or_a_time_more_than_15_percent_worse_is_called_out(common: ModuleType, tmp_path: Path) -> None:
    baseline = tmp_path / "baseline.txt"
    baseline.write_text(
        "# accepted 2026-12-04, dev VM\n"
        "ingest_spans_per_s=2500 ratio=0.045 flows_per_request=10\n"
        "ingest_server_cpu_ms_per_span=1.0 flows_per_request=10  # web + pg + chainer\n"
    )
    accepted = common.baseline_lines(baseline)

    said = common.regressions("ingest_spans_per_s=2000 ratio=0.044 flows_per_request=10", accepted)
    assert said == [
        "REGRESSION ingest_spans_per_s=2000: 20% worse than the baseline's 2500 (bench/baseline.txt; tolerance 15%)"
    ]
    assert common.regressions("ingest_server_cpu_ms_per_span=1.2 flows_per_request=10", accepted)  # a time: up is worse
    assert common.regressions("ingest_server_cpu_ms_per_span=1.1 flows_per_request=10", accepted) == []
    assert common.regressions("ingest_spans_per_s=3100 flows_per_request=10", accepted) == []  # better is fine


def test_a_figure_is_compared_only_with_the_line_measured_the_same_way(common: ModuleType, tmp_path: Path) -> None:
    baseline = tmp_path / "baseline.txt"
    baseline.write_text("ingest_spans_per_s=2500 flows_per_request=10\nflow_list_p95_ms=30 flows=1000000\n")
    accepted = common.baseline_lines(baseline)

    assert common.regressions("ingest_spans_per_s=900 flows_per_request=1", accepted) == []  # another shape
    assert common.regressions("flow_list_p95_ms=300 flows=1000", accepted) == []  # another size
    assert common.regressions("flow_list_p95_ms=40 flows=1000000", accepted)
    assert common.regressions("drift_agents_per_s=1 sessions=5000", accepted) == []  # no baseline yet


def test_the_committed_baseline_reads(common: ModuleType) -> None:
    lines = common.baseline_lines()
    assert lines, "bench/baseline.txt holds the accepted figures"
    assert all(figures for figures, _ in lines)
