"""OpenAPI parameters and answers of the routes that take a flow: its id, the flow list's filters."""

from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiExample, OpenApiParameter, OpenApiResponse
from rest_framework.exceptions import PermissionDenied
from rest_framework.request import Request

from core.api_views import (
    CURSOR_PARAMETER,
    limit_parameter,
    parse_flag,
)
from core.labels import LABEL_PATTERN
from reasoning.auth import TokenPrincipal
from reasoning.flows.search import GUARD_PATTERN, MAX_TEXT, PERIODS, SORTS
from reasoning.models import ApiToken, ReasoningFlow

FLOW_NOT_FOUND = OpenApiResponse(OpenApiTypes.OBJECT, description="No flow with this id.")


FLOW_ID = OpenApiParameter("flow_id", OpenApiTypes.UUID, OpenApiParameter.PATH, description="The flow's id.")


MAX_FLOW_LIST = 200


# The free-text filters as FlowSearch reads them: at most MAX_TEXT characters, no NUL.
_TEXT = {"type": "string", "maxLength": MAX_TEXT, "pattern": r"^[^\u0000]*$"}


# A blank filter is no filter (the operator page's form sends every field).
_LABEL = {"type": "string", "maxLength": MAX_TEXT, "pattern": f"^(?:{LABEL_PATTERN.strip('^$')})?$"}


FLOW_LIST_PARAMETERS = [
    OpenApiParameter("trace_id", _TEXT, description="Only flows of this correlation id (an agent turn)."),
    OpenApiParameter("flow_state", str, enum=ReasoningFlow.State.values),
    OpenApiParameter(
        "agent",
        _TEXT,
        description="Only flows of this agent label.",
        examples=[OpenApiExample("Critic", value="critic")],
    ),
    OpenApiParameter("session_id", _TEXT, description="Only flows of this session."),
    OpenApiParameter(
        "trigger_type",
        _LABEL,
        description="Only flows with this trigger type.",
        examples=[OpenApiExample("User question", value="user_question")],
    ),
    OpenApiParameter(
        "created_after",
        OpenApiTypes.DATETIME,
        description="Only flows created at or after this time (ISO 8601 with an offset; write `Z`, or `+` as %2B).",
        examples=[OpenApiExample("Start of March", value="2026-03-01T00:00:00Z")],
    ),
    OpenApiParameter(
        "created_before",
        OpenApiTypes.DATETIME,
        description="Only flows created before this time (exclusive, so consecutive windows do not overlap).",
        examples=[OpenApiExample("Start of April", value="2026-04-01T00:00:00Z")],
    ),
    OpenApiParameter(
        "q",
        _TEXT,
        description="Free text: words found in the trigger summary, the trigger ref or a step's summary (all of "
        'them; English stemming; "a phrase" and -word work), a prefix of the trace id or the trigger ref, or a '
        "flow id (whole, or its first hex digits as the flow list shows them). Plain-text fields only: never "
        "encrypted content.",
        examples=[
            OpenApiExample("Words", value="lab results"),
            OpenApiExample("A benchmark run", value="benchmark/run-7/"),
        ],
    ),
    OpenApiParameter("outcome_type", _LABEL, description="Only flows closed with this outcome type."),
    OpenApiParameter(
        "guard",
        {"type": "string", "pattern": GUARD_PATTERN},
        description="The summary guard's result: `safe` (shown to patients), `blocked`, or `blocked:<rule>` "
        "(e.g. `blocked:email`).",
    ),
    OpenApiParameter(
        "has_patient",
        str,
        enum=["", "true", "false", "1", "0", "yes", "no"],
        description="Only flows with (`true`) or without (`false`) a patient.",
    ),
    OpenApiParameter(
        "failed",
        str,
        enum=["", "true", "false", "1", "0", "yes", "no"],
        description="Only flows with (`true`) or without (`false`) a step whose work failed (`outcome` `error`: "
        "an OTLP span with status ERROR or an exception).",
    ),
    OpenApiParameter(
        "model",
        _TEXT,
        description="Only flows with a step that named this model, exactly as the steps report it "
        "(`gpt-4o-2024-08-06`); the flow's `model_names` lists them.",
    ),
    OpenApiParameter(
        "user_id",
        _TEXT,
        description="Only flows of this end user (`user.id` in traces, `user_id` on the JSON routes). Matched by "
        "its keyed pseudonym (`user_ref`): the id itself is never stored.",
    ),
    OpenApiParameter(
        "period", str, enum=["", *PERIODS], description="Only flows created in the last hour, day or week."
    ),
    OpenApiParameter(
        "sort",
        str,
        enum=["", *SORTS],
        description="`newest` (default), `duration` (longest first), `steps` (most first), `confidence` "
        "(lowest outcome confidence first), `cost` (most expensive first; no known cost last), `tokens` (most "
        "tokens in and out first; none reported last).",
    ),
    limit_parameter(default=50, maximum=MAX_FLOW_LIST),
    CURSOR_PARAMETER,
]


def _scoped_flag(request: Request, name: str, scope: ApiToken.Scope) -> bool:
    """``?<name>=true``, allowed only to a token with ``scope`` (403 naming both otherwise)."""
    wanted = parse_flag(request.query_params.get(name), name)
    if wanted:
        user = request.user
        if not (isinstance(user, TokenPrincipal) and user.has_scope(scope)):
            raise PermissionDenied(f"{name}=true needs the '{scope.value}' scope.")
    return wanted


def include_reasoning_of(request: Request) -> bool:
    """``?include_reasoning=true``, allowed only to a token with ``reasoning.cot.read`` (403 otherwise)."""
    return _scoped_flag(request, "include_reasoning", ApiToken.Scope.COT_READ)


def include_content_of(request: Request) -> bool:
    """``?include_content=true``, allowed only to a token with ``reasoning.content.read`` (403 otherwise)."""
    return _scoped_flag(request, "include_content", ApiToken.Scope.CONTENT_READ)
