"""extract_reasoning and usage_of on each provider's response shape; llm_step's use of them."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from types import GenericAlias
from typing import Any

import pytest
from reasoning_flow_sdk import BaseRecorder, extract_reasoning
from reasoning_flow_sdk._core import Record
from reasoning_flow_sdk.reasoning import usage_of

REASONING = "Step 1: compare the two trials. Step 2: the larger one wins."
WARNING_KEY = "reasoning_content_shape_unknown"


def completion(message: dict[str, Any], **top: Any) -> dict[str, Any]:
    return {"model": "qwen3-max", "choices": [{"index": 0, "message": {"role": "assistant", **message}}], **top}


def shape_warnings(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "reasoning_flow_sdk" and WARNING_KEY in r.getMessage()]


# --- dicts, as httpx/requests users get them ---------------------------------------------------
def test_message_reasoning_content() -> None:
    # DashScope, DeepSeek, vLLM.
    response = completion({"content": "Use the larger trial.", "reasoning_content": REASONING})
    assert extract_reasoning(response) == ("Use the larger trial.", REASONING)


def test_message_reasoning() -> None:
    # OpenRouter.
    response = completion({"content": "Use the larger trial.", "reasoning": REASONING})
    assert extract_reasoning(response) == ("Use the larger trial.", REASONING)


def test_top_level_reasoning_content() -> None:
    # Older DashScope responses.
    response = completion({"content": "Use the larger trial."}, reasoning_content=REASONING)
    assert extract_reasoning(response) == ("Use the larger trial.", REASONING)


def test_message_field_wins_over_the_top_level_one() -> None:
    response = completion({"content": "a", "reasoning_content": REASONING}, reasoning_content="older copy")
    assert extract_reasoning(response)[1] == REASONING


def test_content_as_a_list_of_text_parts() -> None:
    parts = [
        {"type": "text", "text": "Use the "},
        {"type": "image_url", "image_url": {}},
        {"type": "text", "text": "larger"},
    ]
    reasoning_parts = [{"type": "text", "text": "Step 1. "}, {"type": "text", "text": "Step 2."}]
    response = completion({"content": parts, "reasoning_content": reasoning_parts})
    assert extract_reasoning(response) == ("Use the larger", "Step 1. Step 2.")


def test_missing_reasoning_with_thinking_warns_once_per_process(caplog: pytest.LogCaptureFixture) -> None:
    response = completion({"content": "No thoughts shown."})
    with caplog.at_level(logging.WARNING, logger="reasoning_flow_sdk"):
        for _ in range(3):
            assert extract_reasoning(response, thinking=True) == ("No thoughts shown.", None)
    assert len(shape_warnings(caplog)) == 1


def test_missing_reasoning_without_thinking_does_not_warn(caplog: pytest.LogCaptureFixture) -> None:
    response = completion({"content": "No thoughts shown."})
    with caplog.at_level(logging.WARNING, logger="reasoning_flow_sdk"):
        assert extract_reasoning(response) == ("No thoughts shown.", None)
    assert shape_warnings(caplog) == []


@pytest.mark.parametrize("response", [None, {}, {"choices": []}, {"choices": "nonsense"}, 42])
def test_a_response_of_no_known_shape_gives_nothing(response: Any) -> None:
    assert extract_reasoning(response) == (None, None)


# --- SDK objects (attribute access) -------------------------------------------------------------
@dataclass
class Message:
    content: Any
    reasoning_content: str | None = None
    reasoning: str | None = None


@dataclass
class Choice:
    message: Message
    index: int = 0


@dataclass
class Response:
    choices: list[Choice]
    model: str = "deepseek-reasoner"
    reasoning_content: str | None = None
    usage: Any = None


class PydanticLike:
    """What a pydantic v2 model with ``extra="allow"`` looks like: unknown fields in ``model_extra``."""

    def __init__(self, known: dict[str, Any], extra: dict[str, Any]) -> None:
        self.__dict__.update(known)
        self.model_extra = extra


def test_objects_with_message_reasoning_content() -> None:
    response = Response([Choice(Message("answer", reasoning_content=REASONING))])
    assert extract_reasoning(response) == ("answer", REASONING)


def test_objects_with_message_reasoning() -> None:
    response = Response([Choice(Message("answer", reasoning=REASONING))])
    assert extract_reasoning(response) == ("answer", REASONING)


def test_objects_with_top_level_reasoning_content() -> None:
    response = Response([Choice(Message("answer"))], reasoning_content=REASONING)
    assert extract_reasoning(response) == ("answer", REASONING)


def test_objects_keeping_the_reasoning_in_model_extra() -> None:
    message = PydanticLike({"role": "assistant", "content": "answer"}, {"reasoning_content": REASONING})
    response = PydanticLike({"choices": [PydanticLike({"message": message}, {})]}, {})
    assert extract_reasoning(response) == ("answer", REASONING)


def test_pydantic_models_with_extra_fields() -> None:
    pydantic = pytest.importorskip("pydantic")

    extra = pydantic.ConfigDict(extra="allow")  # the openai package's models keep unknown fields
    message = pydantic.create_model("Message", __config__=extra, role=(str, ...), content=(str | None, None))
    choice = pydantic.create_model("Choice", __config__=extra, index=(int, ...), message=(message, ...))
    model = pydantic.create_model(
        "Completion", __config__=extra, model=(str, ...), choices=(GenericAlias(list, (choice,)), ...)
    )

    response = model.model_validate(
        completion({"content": "answer", "reasoning": REASONING}, usage={"prompt_tokens": 3})
    )
    assert extract_reasoning(response) == ("answer", REASONING)
    assert usage_of(response) == {"model": "qwen3-max", "input_tokens": 3}


# --- usage_of ---------------------------------------------------------------------------------------
def test_usage_of_chat_completion_token_fields() -> None:
    response = completion(
        {"content": "a"},
        usage={
            "prompt_tokens": 120,
            "completion_tokens": 80,
            "total_tokens": 200,
            "completion_tokens_details": {"reasoning_tokens": 64},
        },
    )
    assert usage_of(response) == {
        "model": "qwen3-max",
        "input_tokens": 120,
        "output_tokens": 80,
        "reasoning_tokens": 64,
    }


def test_usage_of_responses_api_token_fields() -> None:
    usage = PydanticLike(
        {"input_tokens": 7, "output_tokens": 9, "output_tokens_details": PydanticLike({"reasoning_tokens": 5}, {})}, {}
    )
    response = Response([Choice(Message("a"))], model="o3", usage=usage)
    assert usage_of(response) == {"model": "o3", "input_tokens": 7, "output_tokens": 9, "reasoning_tokens": 5}


def test_usage_of_ignores_counts_that_are_not_counts() -> None:
    response = {"usage": {"prompt_tokens": -1, "completion_tokens": True, "completion_tokens_details": None}}
    assert usage_of(response) == {}
    assert usage_of(None) == {}


# --- Flow.llm_step -----------------------------------------------------------------------------------
class Queued(BaseRecorder):
    """A recorder that keeps what it would queue, so a test reads the exact step record."""

    def __init__(self) -> None:
        super().__init__()
        self.records: list[Record] = []

    def _record(self, record: Record) -> None:
        self.records.append(record)

    def steps(self) -> list[dict[str, Any]]:
        """The step records queued so far, the newest (held back until the flow's next record or a
        flush) included, as a flush would send them."""
        self._release_held()
        return [fields for kind, _, fields in self.records if kind == "step"]


def test_llm_step_puts_the_reasoning_into_reasoning_content_only() -> None:
    recorder = Queued()
    response = completion(
        {"content": "Use the larger trial.", "reasoning_content": REASONING},
        usage={"prompt_tokens": 10, "completion_tokens": 20, "completion_tokens_details": {"reasoning_tokens": 15}},
    )
    flow = recorder.flow("user_question", agent="researcher")
    flow.llm_step(response, thinking=True, confidence=0.7)
    flow.complete()

    [step] = recorder.steps()
    assert step["kind"] == "llm_prompt"
    assert step["reasoning_content"] == REASONING
    assert step["summary_text"] == "Model call to qwen3-max"
    assert REASONING not in step["summary_text"] and "larger trial" not in step["summary_text"]
    assert (step["model"], step["input_tokens"], step["output_tokens"], step["reasoning_tokens"]) == (
        "qwen3-max",
        10,
        20,
        15,
    )
    assert step["confidence"] == 0.7


def test_llm_step_keeps_a_given_summary_and_the_reasoning_apart() -> None:
    recorder = Queued()
    flow = recorder.flow("user_question", agent="researcher")
    flow.llm_step(completion({"content": "a", "reasoning": REASONING}), summary_text="Weighed the two trials")

    [step] = recorder.steps()
    assert step["summary_text"] == "Weighed the two trials"
    assert step["reasoning_content"] == REASONING


def test_llm_step_without_reasoning_sends_no_reasoning_content() -> None:
    recorder = Queued()
    recorder.flow("user_question").llm_step(completion({"content": "a"}))

    [step] = recorder.steps()
    assert "reasoning_content" not in step
    assert step["summary_text"] == "Model call to qwen3-max"
