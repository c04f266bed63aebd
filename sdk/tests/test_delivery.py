"""How the sender treats each answer: retry (with Retry-After), drop, spool; and that flush and
close keep their timeouts whatever the server does."""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

import pytest
from conftest import Answer, FakeIngest
from reasoning_flow_sdk import ReasoningFlowRecorder


def recorder(url: str | None, spool_dir: Path, **options: object) -> ReasoningFlowRecorder:
    options.setdefault("flush_interval", 0.02)
    return ReasoningFlowRecorder(url, "token", spool_dir, enabled=True, **options)


def record_flow(rec: ReasoningFlowRecorder, steps: int = 2) -> str:
    with rec.flow("user_question", "sdk/test", agent="researcher") as flow:
        for n in range(steps):
            flow.step("retrieval", f"Reviewed source {n}")
    return flow.id


@pytest.mark.parametrize("status", [503, 429, 408, 500])
def test_a_busy_server_is_retried_after_its_retry_after(ingest: FakeIngest, spool_dir: Path, status: int) -> None:
    ingest.script.append(Answer(status, {"Retry-After": "1"}, {"error": "busy"}))
    rec = recorder(ingest.url, spool_dir)
    flow_id = record_flow(rec)

    assert rec.flush(timeout=10)
    rec.close()
    assert len(ingest.times) == 2
    assert ingest.times[1] - ingest.times[0] >= 0.9
    assert [item["id"] for body in ingest.bodies for item in body["flows"]] == [flow_id]
    assert rec.stats()["retried"] == 1
    assert rec.stats()["sent"] == 2


@pytest.mark.parametrize("status", [400, 401, 403, 404, 413, 422])
def test_another_client_error_drops_the_batch_and_says_why(
    ingest: FakeIngest, spool_dir: Path, status: int, caplog: pytest.LogCaptureFixture
) -> None:
    ingest.script.append(Answer(status, {}, {"detail": "the server's reason"}))
    rec = recorder(ingest.url, spool_dir)
    with caplog.at_level(logging.WARNING, logger="reasoning_flow_sdk"):
        record_flow(rec, steps=3)
        assert rec.flush(timeout=10)
    rec.close()

    stats = rec.stats()
    assert (stats["sent"], stats["rejected"], stats["retried"], stats["spooled"]) == (0, 3, 0, 0)
    assert f"HTTP {status}" in caplog.text and "the server's reason" in caplog.text
    assert len(ingest.times) == 1


def test_an_unreachable_server_spools_and_never_raises(dead_url: str, spool_dir: Path) -> None:
    rec = recorder(dead_url, spool_dir)
    record_flow(rec, steps=5)

    assert rec.flush(timeout=1) is False
    rec.close(timeout=1)
    assert rec.stats()["spooled"] == 5
    assert rec.stats()["dropped"] == 0
    assert len(list(spool_dir.glob("*.json"))) >= 1


def test_without_a_url_everything_waits_in_the_spool(
    spool_dir: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.delenv("REASONING_FLOW_URL", raising=False)
    with caplog.at_level(logging.WARNING, logger="reasoning_flow_sdk"):
        rec = recorder(None, spool_dir)
        record_flow(rec)
        rec.flush(timeout=0.5)
        rec.close(timeout=0.5)

    assert "REASONING_FLOW_URL is not set" in caplog.text
    assert rec.stats()["spooled"] == 2


def test_flush_and_close_keep_their_timeouts_when_the_server_hangs(ingest: FakeIngest, spool_dir: Path) -> None:
    ingest.hang = threading.Event()
    ingest.hang.set()
    rec = recorder(ingest.url, spool_dir, timeout=30)
    record_flow(rec)

    started = time.monotonic()
    assert rec.flush(timeout=0.5) is False
    assert rec.close(timeout=0.5) is False
    assert time.monotonic() - started < 2.5
    # What was in flight is spooled, so a later recorder delivers it (a replay if it did arrive).
    assert list(spool_dir.glob("*.json"))


def test_bad_settings_fall_back_to_defaults_with_a_warning(
    spool_dir: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("REASONING_FLOW_BATCH_STEPS", "many")
    with caplog.at_level(logging.WARNING, logger="reasoning_flow_sdk"):
        rec = ReasoningFlowRecorder("http://127.0.0.1:9", "token", spool_dir, enabled=True)
    rec.close(timeout=0.1)

    assert rec.settings.batch_steps == 100
    assert "REASONING_FLOW_BATCH_STEPS='many' is not a number" in caplog.text


def test_settings_come_from_the_environment(spool_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REASONING_FLOW_CAPTURE_ENABLED", "1")
    monkeypatch.setenv("REASONING_FLOW_URL", "http://127.0.0.1:9/")
    monkeypatch.setenv("REASONING_FLOW_TOKEN", "from-env")
    monkeypatch.setenv("REASONING_FLOW_SPOOL_DIR", str(spool_dir))
    rec = ReasoningFlowRecorder()
    rec.close(timeout=0.1)

    assert isinstance(rec, ReasoningFlowRecorder)
    assert (rec.settings.base_url, rec.settings.token, rec.settings.spool_dir) == (
        "http://127.0.0.1:9",
        "from-env",
        spool_dir,
    )


def test_batches_follow_the_size_setting(ingest: FakeIngest, spool_dir: Path) -> None:
    rec = recorder(ingest.url, spool_dir, batch_steps=10)
    with rec.flow("user_question", "sdk/batches", agent="researcher") as flow:
        for n in range(35):
            flow.step("retrieval", f"Reviewed source {n}")
    assert rec.flush(timeout=10)
    rec.close()

    sizes = [sum(len(item.get("steps", [])) for item in body["flows"]) for body in ingest.bodies]
    assert max(sizes) <= 10 and sum(sizes) == 35
    # Every piece carries the flow's opening fields, so no piece depends on another's arrival.
    assert all(item["trigger_type"] == "user_question" for body in ingest.bodies for item in body["flows"])
    assert [step["summary_text"] for step in ingest.steps()] == [f"Reviewed source {n}" for n in range(35)]
    assert "close" in ingest.bodies[-1]["flows"][-1]
