"""The disk spool: bounded, oldest dropped first and counted, whole files only, one deliverer."""

from __future__ import annotations

import json
from pathlib import Path

from reasoning_flow_sdk import ReasoningFlowRecorder
from reasoning_flow_sdk._core import next_seq
from reasoning_flow_sdk._spool import Spool


def test_a_full_spool_drops_the_oldest_batches_and_counts_them(dead_url: str, spool_dir: Path) -> None:
    limit = 2**16
    rec = ReasoningFlowRecorder(
        dead_url, "token", spool_dir, enabled=True, spool_max_bytes=limit, batch_steps=10, flush_interval=0.01
    )
    for n in range(60):
        with rec.flow("user_question", f"sdk/full/{n:03d}", agent="researcher") as flow:
            for m in range(10):
                flow.step("retrieval", f"Reviewed source {m} " + "of the long evidence list " * 4)
    rec.flush(timeout=2)
    rec.close(timeout=0.5)

    stats = rec.stats()
    files = sorted(spool_dir.glob("*.json"))
    kept = [item["trigger_ref"] for path in files for item in json.loads(path.read_bytes())["flows"]]
    assert sum(path.stat().st_size for path in files) <= limit
    assert stats["dropped"] > 0
    assert (
        stats["dropped"]
        + sum(len(item.get("steps", [])) for p in files for item in json.loads(p.read_bytes())["flows"])
        == 600
    )
    # What is left is the newest: a contiguous run ending with the last flow.
    assert kept[-1] == "sdk/full/059"
    assert kept == sorted(kept)
    assert "sdk/full/000" not in kept


def test_files_are_read_in_creation_order_and_partial_writes_are_ignored(tmp_path: Path) -> None:
    spool = Spool(tmp_path, 2**20)
    first, second = next_seq(), next_seq()
    spool.write(second, b'{"flows": [2]}', 1, 1)
    spool.write(first, b'{"flows": [1]}', 1, 1)
    (tmp_path / ".tmp-00000000000000000000-1-1.s1.f1.json").write_bytes(b'{"flo')  # a crash mid-write

    assert [Spool.read(spooled) for spooled in spool.files()] == [b'{"flows": [1]}', b'{"flows": [2]}']


def test_only_one_deliverer_drains_a_shared_spool(tmp_path: Path) -> None:
    one, other = Spool(tmp_path, 2**20), Spool(tmp_path, 2**20)

    assert one.try_acquire()
    assert not other.try_acquire()
    one.release()
    assert other.try_acquire()
    other.release()
