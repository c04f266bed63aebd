"""reasoning-flow-sdk: record an agent's reasoning in Reasoning Flow Tracker.

    from reasoning_flow_sdk import ReasoningFlowRecorder

    recorder = ReasoningFlowRecorder()  # REASONING_FLOW_URL / _TOKEN / _SPOOL_DIR
    with recorder.flow(trigger_type="user_question", trigger_ref="chat/42", agent="researcher") as flow:
        flow.step(kind="retrieval", summary_text="Looked up recent lab results", confidence=0.9)

Recording never blocks and never raises; a background sender batches flows onto
``POST /api/reasoning/ingest`` and spools them to disk while the server is unreachable.
"""

from reasoning_flow_sdk._flow import Flow, Step
from reasoning_flow_sdk._turn import current_turn, new_turn, turn
from reasoning_flow_sdk.aio import AsyncNoOpRecorder, AsyncReasoningFlowRecorder
from reasoning_flow_sdk.reasoning import extract_reasoning
from reasoning_flow_sdk.recorder import BaseRecorder, NoOpRecorder, ReasoningFlowRecorder
from reasoning_flow_sdk.research import ResearchLoopClient

__all__ = [
    "AsyncNoOpRecorder",
    "AsyncReasoningFlowRecorder",
    "BaseRecorder",
    "Flow",
    "NoOpRecorder",
    "ReasoningFlowRecorder",
    "ResearchLoopClient",
    "Step",
    "current_turn",
    "extract_reasoning",
    "new_turn",
    "turn",
]

__version__ = "0.1.0"
