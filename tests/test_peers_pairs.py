"""bench/peers_pairs.py: what it reads from the peers' harness's output and how it sums the pairs up.
Pure functions: no harness, no server, no database."""

from __future__ import annotations

from types import ModuleType

import pytest

from tests.scripts import BENCH, load_script

# Lines as the harness (../shared/peers/bench_common.py) logs them: a time, then JSON.
RUN_LOG = """\
11:17:20 postgres pid=12015 uri=postgresql://postgres:@/postgres?host=/tmp/peers/pg (started_here=False)
11:17:35 {"run": 1, "spans": 12000, "ok_spans": 12000, "durable_spans_per_s": 3849.8, "background_cpu_share": 0.027}
11:17:36 wrote /tmp/peers/results/rft-postgres-111736.json
peer=rft store=postgres accepted_spans_per_s=3900.1 durable_spans_per_s=3849.8 lost_after_kill=na
"""
KILL_LOG = """\
11:34:50 kill probe: acked 1002/1002 spans, errors={}, killed 0.41 ms after last ack, group gone=True
11:34:50 {"warmup_spans": 120, "sent_spans": 1002, "acked_spans": 1002, "visible_after_restart": 1000, \
"lost_after_kill": 2, "kill_after_last_ack_ms": 0.41}
peer=mlflow store=postgres accepted_spans_per_s=None durable_spans_per_s=None lost_after_kill=2
"""


@pytest.fixture(scope="module")
def pairs() -> ModuleType:
    return load_script(BENCH / "peers_pairs.py", "peers_pairs_under_test")


def test_a_measured_run_is_read_from_the_harness_s_json_line(pairs: ModuleType) -> None:
    assert pairs.measured_run(RUN_LOG) == pairs.Run(durable_spans_per_s=3849.8, background_cpu_share=0.027)
    with pytest.raises(ValueError, match="no measured run"):
        pairs.measured_run(KILL_LOG)


def test_the_kill_probe_s_losses_are_read_from_its_line(pairs: ModuleType) -> None:
    assert pairs.lost_after_kill(KILL_LOG) == 2
    with pytest.raises(ValueError, match="no kill -9 probe"):
        pairs.lost_after_kill(RUN_LOG)


def test_the_summary_gives_both_medians_and_the_spread_of_the_pairs_ratios(pairs: ModuleType) -> None:
    run = pairs.Run
    measured = [
        (run(4000.0, 0.0), run(1000.0, 0.0)),  # 4x
        (run(3000.0, 0.0), run(500.0, 0.3)),  # 6x: the peer's run on a busy machine
        (run(1500.0, 0.4), run(750.0, 0.0)),  # 2x: ours on a busy machine
    ]
    assert pairs.summary(measured) == {
        "ours_median": 3000.0,
        "peer_median": 750.0,
        "ratio_of_medians": 4.0,
        "pair_ratio_median": 4.0,
        "pair_ratio_min": 2.0,
        "pair_ratio_max": 6.0,
        "quiet_pairs": 1,
        "quiet_pair_ratio_median": 4.0,
    }


def test_quiet_pairs_are_those_whose_runs_both_had_the_machine_to_themselves(pairs: ModuleType) -> None:
    run = pairs.Run
    measured = [
        (run(3000.0, 0.05), run(1000.0, 0.10)),  # 3x, quiet: at most 10 % taken elsewhere
        (run(3500.0, 0.03), run(700.0, 0.07)),  # 5x, quiet
        (run(4000.0, 0.02), run(400.0, 0.20)),  # 10x: the peer's run disturbed
        (run(4000.0, 0.11), run(1000.0, 0.02)),  # 4x: ours disturbed
    ]
    figures = pairs.summary(measured)

    assert (figures["quiet_pairs"], figures["quiet_pair_ratio_median"]) == (2, 4.0)
    assert figures["pair_ratio_median"] == 4.5
    disturbed = pairs.summary(measured[2:])
    assert (disturbed["quiet_pairs"], disturbed["quiet_pair_ratio_median"]) == (0, None)
