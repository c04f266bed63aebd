"""Capture off (the default): the recorders are no-ops with the same API, and touch nothing."""

from __future__ import annotations

import asyncio
import builtins
import os
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from reasoning_flow_sdk import (
    AsyncNoOpRecorder,
    AsyncReasoningFlowRecorder,
    BaseRecorder,
    NoOpRecorder,
    ReasoningFlowRecorder,
)
from support import run_in_thread

CAPTURE = "REASONING_FLOW_CAPTURE_ENABLED"
RESPONSE = {
    "model": "qwen3-max",
    "choices": [{"message": {"content": "answer", "reasoning_content": "Step 1, step 2."}}],
    "usage": {"prompt_tokens": 3, "completion_tokens": 4},
}


@pytest.fixture
def configured(monkeypatch: pytest.MonkeyPatch, spool_dir: Path) -> Path:
    """The environment of an agent in production, the capture flag aside; returns its spool."""
    monkeypatch.setenv("REASONING_FLOW_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("REASONING_FLOW_TOKEN", "sdk-test")
    monkeypatch.setenv("REASONING_FLOW_SPOOL_DIR", str(spool_dir))
    return spool_dir


@contextmanager
def no_io(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Every socket made or connected and every file opened inside the block, by name; each
    attempt also fails, so nothing can happen behind the test's back."""
    attempts: list[str] = []

    def refuse(name: str) -> Any:
        def refused(*args: Any, **kwargs: Any) -> Any:
            attempts.append(name)
            raise OSError(f"{name} is not allowed in this test")

        return refused

    with monkeypatch.context() as patch:
        patch.setattr(socket.socket, "__init__", refuse("socket"))
        patch.setattr(socket.socket, "connect", refuse("connect"))
        patch.setattr(builtins, "open", refuse("open"))
        patch.setattr(os, "open", refuse("os.open"))
        patch.setattr(os, "mkdir", refuse("mkdir"))
        yield attempts


def use_the_whole_api(recorder: BaseRecorder) -> None:
    with recorder.flow("user_question", "chat/1", agent="researcher", session_id="s") as flow:
        with flow.step("retrieval", "Looked up the evidence", confidence=0.9) as parent:
            parent.step("aggregation", "Combined the findings")
        flow.llm_step(RESPONSE, thinking=True)
        flow.set_outcome("claim_created", outcome_metrics={"composite_k": 0.7})
    decided = recorder.decision("triage", "escalate", "Two red flags", confidence=0.8, inputs={"q": "x"})
    assert isinstance(decided, str) and decided
    assert recorder.record_outcome(decided, "escalated", correct=True) is True
    assert recorder.record_outcome(decided, "escalated", correct=True) is False
    summary = recorder.session_summary()
    assert summary["with_outcome"] == 1 and summary["correct"] == 1


@pytest.mark.parametrize("flag", [None, "0", "false"])
def test_capture_off_makes_no_op_recorders(monkeypatch: pytest.MonkeyPatch, configured: Path, flag: str | None) -> None:
    if flag is None:
        monkeypatch.delenv(CAPTURE, raising=False)
    else:
        monkeypatch.setenv(CAPTURE, flag)

    # Typed as the capturing class (the constructor picks the class at run time).
    recorder: BaseRecorder = ReasoningFlowRecorder()
    async_recorder: BaseRecorder = AsyncReasoningFlowRecorder()
    assert type(recorder) is NoOpRecorder
    assert type(async_recorder) is AsyncNoOpRecorder


def test_the_no_op_recorder_opens_no_socket_writes_no_file_starts_no_thread(
    monkeypatch: pytest.MonkeyPatch, configured: Path
) -> None:
    monkeypatch.delenv(CAPTURE, raising=False)
    threads = set(threading.enumerate())

    with no_io(monkeypatch) as attempts:
        recorder = ReasoningFlowRecorder()
        use_the_whole_api(recorder)
        stats = recorder.stats()
        assert recorder.flush() is True
        assert recorder.close() is True
        with ReasoningFlowRecorder(spool_dir=configured) as scoped:
            scoped.flow("user_question").step("retrieval", "Looked it up")

    assert attempts == []
    assert not configured.exists()
    assert set(threading.enumerate()) == threads
    assert stats["sent"] == stats["spooled"] == stats["dropped"] == stats["rejected"] == 0


def test_the_async_no_op_recorder_opens_no_socket_writes_no_file_starts_no_thread(
    monkeypatch: pytest.MonkeyPatch, configured: Path
) -> None:
    monkeypatch.delenv(CAPTURE, raising=False)

    def body() -> None:  # in a thread of its own: one without a running event loop
        loop = asyncio.new_event_loop()  # its self-pipe is a socket pair: made before the check starts
        threads = set(threading.enumerate())

        async def agent() -> tuple[bool, bool]:
            recorder = AsyncReasoningFlowRecorder(spool_dir=configured)
            use_the_whole_api(recorder)
            async with recorder.flow("user_question") as flow:
                flow.step("retrieval", "Looked it up")
            async with AsyncReasoningFlowRecorder() as scoped:
                scoped.flow("user_question").step("retrieval", "Looked it up")
            return await recorder.flush(), await recorder.close()

        try:
            with no_io(monkeypatch) as attempts:
                assert loop.run_until_complete(agent()) == (True, True)
        finally:
            loop.close()

        assert attempts == []
        assert not configured.exists()
        assert set(threading.enumerate()) == threads

    run_in_thread(body)


def test_the_no_op_recorder_keeps_the_session_summary(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(CAPTURE, raising=False)
    recorder = ReasoningFlowRecorder()
    first = recorder.decision("triage", "escalate", "Two red flags")
    recorder.decision("triage", "discharge", "No red flags")
    recorder.record_outcome(first, "escalated", correct=False)

    assert recorder.session_summary() == {
        "total_decisions": 2,
        "with_outcome": 1,
        "correct": 0,
        "incorrect": 1,
        "accuracy": 0.0,
        "decision_types": {"escalate": 1, "discharge": 1},
    }


@pytest.mark.parametrize("flag", ["1", "true", "on"])
def test_capture_on_makes_capturing_recorders(monkeypatch: pytest.MonkeyPatch, configured: Path, flag: str) -> None:
    monkeypatch.setenv(CAPTURE, flag)

    recorder = ReasoningFlowRecorder()
    try:
        assert type(recorder) is ReasoningFlowRecorder
        assert recorder.enabled is True
        assert recorder.base_url == "http://127.0.0.1:9"
    finally:
        recorder.close(timeout=0.1)

    async def make_and_close() -> AsyncReasoningFlowRecorder:
        made = AsyncReasoningFlowRecorder()
        await made.close(timeout=0.1)
        return made

    assert type(run_in_thread(lambda: asyncio.run(make_and_close()))) is AsyncReasoningFlowRecorder


def test_enabled_false_wins_over_the_environment(monkeypatch: pytest.MonkeyPatch, configured: Path) -> None:
    monkeypatch.setenv(CAPTURE, "1")

    recorder: BaseRecorder = ReasoningFlowRecorder(enabled=False)
    async_recorder: BaseRecorder = AsyncReasoningFlowRecorder(enabled=False)
    assert type(recorder) is NoOpRecorder
    assert type(async_recorder) is AsyncNoOpRecorder


@pytest.mark.parametrize(
    ("flag", "enabled", "captures"),
    [
        (None, None, True),  # the quick start: a URL and a token in the code mean "record"
        ("0", None, False),  # switched off in the environment: off, and said once
        ("1", None, True),
        (None, False, False),  # switched off in the code
    ],
)
def test_a_recorder_given_a_url_and_a_token_captures_unless_switched_off(
    monkeypatch: pytest.MonkeyPatch, spool_dir: Path, flag: str | None, enabled: bool | None, captures: bool
) -> None:
    monkeypatch.setenv("REASONING_FLOW_SPOOL_DIR", str(spool_dir))
    if flag is None:
        monkeypatch.delenv(CAPTURE, raising=False)
    else:
        monkeypatch.setenv(CAPTURE, flag)
    options = {} if enabled is None else {"enabled": enabled}

    recorder: BaseRecorder = ReasoningFlowRecorder("http://127.0.0.1:9", "sdk-test", **options)
    async_recorder: BaseRecorder = AsyncReasoningFlowRecorder("http://127.0.0.1:9", "sdk-test", **options)
    try:
        assert isinstance(recorder, ReasoningFlowRecorder) is captures
        assert isinstance(async_recorder, AsyncReasoningFlowRecorder) is captures
    finally:
        if isinstance(recorder, ReasoningFlowRecorder):
            recorder.close(timeout=0.1)
