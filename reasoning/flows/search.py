"""Finding flows: one query builder for the admin flow list route and the operators' flow list page.

``FlowSearch.parse(params)`` reads the query parameters (the API's names; a bad value is an
``InvalidInput`` naming the parameter), ``page()`` returns one keyset page in the chosen order,
``summary()`` the counts and duration percentiles of the whole filtered set in one query.

Orders (each ends on ``created_at, id`` so that equal keys still page stably):

| ``sort`` | order | key |
|---|---|---|
| ``newest`` (default) | newest first | ``created_at`` (index ``reasoning_flow_created``) |
| ``duration`` | longest first; active flows last | ``closed_at - created_at`` in seconds |
| ``steps`` | most steps first | ``step_count`` |
| ``confidence`` | lowest outcome confidence first; none last | ``outcome_confidence`` |
| ``cost`` | most expensive first; no known cost last | ``cost_usd`` |
| ``tokens`` | most tokens (in + out) first; none reported last | ``input_tokens + output_tokens`` |

The cursor is the last row's key, ``created_at`` and id, base64url JSON: opaque to clients,
and keyset-based, so flows written between two page reads never shift the next page.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from django.db.models import (
    Aggregate,
    BooleanField,
    Case,
    Count,
    DurationField,
    Exists,
    ExpressionWrapper,
    F,
    FloatField,
    OuterRef,
    Q,
    QuerySet,
    Value,
    When,
)
from django.db.models.expressions import RawSQL
from django.db.models.functions import Cast, Coalesce, Extract
from django.utils import timezone

from core.api_views import parse_instant
from core.cursors import decode_cursor, encode_cursor, moment
from core.errors import InvalidInput
from core.labels import LABEL_PATTERN, label_validator
from core.replica import reading_connection
from reasoning.models import ReasoningFlow, ReasoningStep, total_tokens, user_pseudonym

LABEL_RE = re.compile(LABEL_PATTERN)
MAX_TEXT = 100
PERIODS = {"1h": timedelta(hours=1), "24h": timedelta(hours=24), "7d": timedelta(days=7)}
SORTS = ("newest", "duration", "steps", "confidence", "cost", "tokens")
# What ``guard`` accepts (``_guard_rule``): published as the parameter's pattern; blank is no filter.
GUARD_PATTERN = r"^(?:safe|blocked|blocked:[A-Za-z0-9][A-Za-z0-9_.:/-]{0,63})?$"
# Exact-match filters on text columns: (query parameter, model field).
TEXT_FILTERS = (("trace_id", "trace_id"), ("agent", "agent"), ("session_id", "session_id"))
LABEL_FILTERS = (("trigger_type", "trigger_type"), ("outcome_type", "outcome_type"))
# Every parameter the search reads (the routes add ``limit``).
PARAMETERS = (
    "q",
    *(name for name, _ in TEXT_FILTERS),
    *(name for name, _ in LABEL_FILTERS),
    "flow_state",
    "guard",
    "has_patient",
    "failed",
    "model",
    "user_id",
    "period",
    "created_after",
    "created_before",
    "sort",
    "cursor",
)
_NO_DURATION = -1.0  # active flows sort after every closed one (longest first)
_NO_CONFIDENCE = 2.0  # flows without a confidence sort after every real one (lowest first)
_NO_USAGE = -1.0  # flows without a cost (or tokens) sort after every real one (most first)


class _Percentile(Aggregate):
    """``percentile_cont(fraction) WITHIN GROUP (ORDER BY expression)`` (PostgreSQL); nulls ignored."""

    function = "percentile_cont"
    template = "%(function)s(%(fraction)s) WITHIN GROUP (ORDER BY %(expressions)s)"
    output_field = FloatField()

    def __init__(self, expression: str, fraction: float) -> None:
        super().__init__(expression, fraction=float(fraction))


# The word search of ``q`` (websearch syntax: words, "a phrase", -not), over plain-text fields
# only; each side matches its GIN expression index (migration 0022).
_WORD = re.compile(r"[^\W\d_]")
# A ref, a path or a number ("bench/42/", "labs:7", "case_12", "2026"): a prefix, not words.
_REF_LIKE = re.compile(r"[/:_\d]")


# The same test, inline: the flow's own words, else any of its steps' (by the flow's steps index).
_WORDS_INLINE = (
    "(to_tsvector('english', reasoning_flow.trigger_summary || ' ' || reasoning_flow.trigger_ref)"
    " @@ websearch_to_tsquery('english', %s)"
    " OR EXISTS (SELECT 1 FROM reasoning_step s WHERE s.flow_id = reasoning_flow.id"
    " AND to_tsvector('english', s.summary_text) @@ websearch_to_tsquery('english', %s)))"
)
# How many flows make words "common": past this, testing flows in page order finds a page sooner
# than collecting every match through the indexes (bench/bench_flow_list.py: both kinds).
COMMON_WORD_FLOWS = 500
_COMMON = (
    "SELECT count(*) FROM (SELECT 1 FROM reasoning_flow WHERE to_tsvector('english', trigger_summary || ' ' ||"
    " trigger_ref) @@ websearch_to_tsquery('english', %s) LIMIT %s) AS hits"
)


def _common(q: str) -> bool:
    """Whether at least ``COMMON_WORD_FLOWS`` flows hold ``q``'s words (one bounded index query)."""
    with reading_connection().cursor() as cursor:
        cursor.execute(_COMMON, [q, COMMON_WORD_FLOWS])
        row = cursor.fetchone()
    return bool(row and row[0] >= COMMON_WORD_FLOWS)


def _is_words(q: str, compact: str) -> bool:
    """Whether ``q`` reads as words ("lab results", "rash") rather than a ref, a trace id
    ("turn-abc": one hyphenated token) or a flow id's hex digits."""
    if not _WORD.search(q) or _REF_LIKE.search(q) or re.fullmatch(r"[0-9a-f]{4,32}", compact):
        return False
    return " " in q.strip() or "-" not in q


_WORDS = (
    "SELECT id FROM reasoning_flow"
    " WHERE to_tsvector('english', trigger_summary || ' ' || trigger_ref) @@ websearch_to_tsquery('english', %s)"
    " UNION SELECT flow_id FROM reasoning_step"
    " WHERE to_tsvector('english', summary_text) @@ websearch_to_tsquery('english', %s)"
)


@dataclass(frozen=True)
class FlowSearch:
    q: str = ""
    exact: dict[str, str] = field(default_factory=dict)  # model field → value
    flow_state: str = ""
    guard: str = ""  # "", "safe", "blocked" or "blocked:<rule>"
    has_patient: bool | None = None
    # Flows with (True) or without (False) a step whose work failed (outcome error).
    failed: bool | None = None
    # Flows with a step that named this model (exactly, as the steps report it).
    model: str = ""
    # Flows of this end user (``user.id`` in traces, ``user_id`` on the JSON routes): matched by
    # its pseudonym, the id is never stored.
    user_id: str = ""
    period: str = ""
    created_after: datetime | None = None
    created_before: datetime | None = None
    sort: str = "newest"
    cursor: str = ""

    # --- parsing ---------------------------------------------------------------------------
    @classmethod
    def parse(cls, params: Mapping[str, str]) -> FlowSearch:
        exact: dict[str, str] = {}
        for name, column in TEXT_FILTERS:
            if value := params.get(name, "").strip():
                exact[column] = _text(value, name)
        for name, column in LABEL_FILTERS:
            if value := params.get(name, "").strip():
                if len(value) > MAX_TEXT or not LABEL_RE.match(value):
                    raise InvalidInput(str(label_validator.message), field=name)
                exact[column] = value
        state = params.get("flow_state", "").strip()
        if state and state not in ReasoningFlow.State.values:
            raise InvalidInput(f"must be one of {', '.join(ReasoningFlow.State.values)}", field="flow_state")
        guard = params.get("guard", "").strip()
        if guard and guard not in ("safe", "blocked") and not _guard_rule(guard):
            raise InvalidInput("must be safe, blocked, or blocked:<rule>", field="guard")
        period = params.get("period", "").strip()
        if period and period not in PERIODS:
            raise InvalidInput(f"must be one of {', '.join(PERIODS)}", field="period")
        sort = params.get("sort", "").strip() or "newest"
        if sort not in SORTS:
            raise InvalidInput(f"must be one of {', '.join(SORTS)}", field="sort")
        search = cls(
            q=_text(params.get("q", "").strip(), "q"),
            exact=exact,
            flow_state=state,
            guard=guard,
            has_patient=_boolean(params.get("has_patient", "").strip(), "has_patient"),
            failed=_boolean(params.get("failed", "").strip(), "failed"),
            model=_text(params.get("model", "").strip(), "model"),
            user_id=_text(params.get("user_id", "").strip(), "user_id"),
            period=period,
            created_after=parse_instant(params.get("created_after"), "created_after"),
            created_before=parse_instant(params.get("created_before"), "created_before"),
            sort=sort,
            cursor=params.get("cursor", "").strip(),
        )
        if search.cursor:
            search._cursor_values()  # a bad cursor is a 400 now, not at the query
        return search

    def params(self, **changes: Any) -> dict[str, str]:
        """The query parameters that give this search (with ``changes``), without empty ones."""
        search = replace(self, **changes)
        names = {column: name for name, column in (*TEXT_FILTERS, *LABEL_FILTERS)}
        out = {"q": search.q, **{names[column]: value for column, value in search.exact.items()}}
        out.update(
            flow_state=search.flow_state,
            guard=search.guard,
            model=search.model,
            user_id=search.user_id,
            period=search.period,
        )
        if search.has_patient is not None:
            out["has_patient"] = "true" if search.has_patient else "false"
        if search.failed is not None:
            out["failed"] = "true" if search.failed else "false"
        for name in ("created_after", "created_before"):
            moment = getattr(search, name)
            if moment is not None:
                out[name] = moment.isoformat()
        if search.sort != "newest":
            out["sort"] = search.sort
        out["cursor"] = search.cursor
        return {name: value for name, value in out.items() if value}

    @property
    def filtered(self) -> bool:
        return any(value for name, value in self.params().items() if name not in ("sort", "cursor"))

    # --- querying ----------------------------------------------------------------------------
    def queryset(self) -> QuerySet[ReasoningFlow]:
        """The filtered flows, unordered."""
        flows: QuerySet[ReasoningFlow] = ReasoningFlow.objects.filter(**self.exact)
        if self.q:
            flows = flows.filter(self._text_match())
        if self.flow_state:
            flows = flows.filter(flow_state=self.flow_state)
        if self.guard == "safe":
            flows = flows.filter(patient_safe_summary=True)
        elif self.guard == "blocked":
            flows = flows.filter(patient_safe_summary=False)
        elif rule := _guard_rule(self.guard):
            flows = flows.filter(patient_safe_summary=False, summary_guard_rule=rule)
        if self.has_patient is not None:
            flows = flows.filter(patient__isnull=not self.has_patient)
        if self.failed is not None:
            # Index reasoning_step_failed: the few failed steps, by flow.
            failing = ReasoningStep.objects.filter(flow_id=OuterRef("pk"), outcome=ReasoningStep.Outcome.ERROR)
            flows = flows.filter(Exists(failing)) if self.failed else flows.exclude(Exists(failing))
        if self.model:
            flows = flows.filter(model_names__contains=[self.model])
        if self.user_id:
            # Index reasoning_flow_user_created.
            flows = flows.filter(user_ref=user_pseudonym(self.user_id))
        if self.period:
            flows = flows.filter(created_at__gte=timezone.now() - PERIODS[self.period])
        if self.created_after is not None:
            flows = flows.filter(created_at__gte=self.created_after)
        if self.created_before is not None:
            flows = flows.filter(created_at__lt=self.created_before)
        return flows

    def _text_match(self) -> Q:
        """Words (``_is_words``): every word in the
        flow's trigger summary and ref or in one of its steps' summaries, full-text with English
        stemming, as one ``id IN (…)`` over the indexes reasoning_flow_words and
        reasoning_step_words, so a rare word is an index lookup, not a scan. Anything else: a
        prefix of the trace id or trigger ref, or a whole UUID (or its prefix) of the flow id."""
        compact = self.q.replace("-", "").lower()
        if _is_words(self.q, compact):
            if _common(self.q):
                # Many flows hold the words: walk the flows in page order and test each (an early stop).
                inline = RawSQL(_WORDS_INLINE, [self.q, self.q], output_field=BooleanField())  # noqa: S611 (q: a parameter)
                return Q(inline)
            # Few do: find them through the word indexes.
            return Q(id__in=RawSQL(_WORDS, [self.q, self.q]))  # noqa: S611 (a constant statement; q is a parameter)
        match = Q(trace_id__startswith=self.q) | Q(trigger_ref__startswith=self.q)
        if re.fullmatch(r"[0-9a-f]{32}", compact):
            match |= Q(id=uuid.UUID(compact))
        elif re.fullmatch(r"[0-9a-f]{4,31}", compact):
            # A short id as the list shows it: the UUID's leading hex digits.
            low, high = compact.ljust(32, "0"), compact.ljust(32, "f")
            match |= Q(id__gte=uuid.UUID(low), id__lte=uuid.UUID(high))
        return match

    def _ordered(self) -> QuerySet[ReasoningFlow]:
        flows = self.queryset()
        if self.sort == "newest":
            return flows.order_by("-created_at", "-id")
        flows = flows.annotate(sort_key=self._key())
        direction = "sort_key" if self.sort == "confidence" else "-sort_key"
        return flows.order_by(direction, "-created_at", "-id")

    def _key(self) -> Any:
        if self.sort == "duration":
            seconds = Extract(
                ExpressionWrapper(F("closed_at") - F("created_at"), output_field=DurationField()), "epoch"
            )
            return Coalesce(seconds, Value(_NO_DURATION), output_field=FloatField())
        if self.sort == "steps":
            return F("step_count")
        if self.sort == "cost":
            return Coalesce(Cast("cost_usd", FloatField()), Value(_NO_USAGE), output_field=FloatField())
        if self.sort == "tokens":
            used = Cast(Coalesce("input_tokens", 0) + Coalesce("output_tokens", 0), FloatField())
            reported = Q(input_tokens__isnull=False) | Q(output_tokens__isnull=False)
            return Case(When(reported, then=used), default=Value(_NO_USAGE), output_field=FloatField())
        return Coalesce(F("outcome_confidence"), Value(_NO_CONFIDENCE), output_field=FloatField())

    def page(self, limit: int) -> tuple[list[ReasoningFlow], str | None]:
        """One page of at most ``limit`` flows after the cursor, and the next page's cursor."""
        flows = self._ordered()
        if self.cursor:
            flows = flows.filter(self._after())
        # One row more than the page says whether there is a next page, in the same query.
        rows = list(flows[: limit + 1])
        if len(rows) <= limit:
            return rows, None
        return rows[:limit], self._cursor_of(rows[limit - 1])

    def _cursor_of(self, flow: ReasoningFlow) -> str:
        key = None if self.sort == "newest" else getattr(flow, "sort_key", None)
        return encode_cursor(key, flow.created_at.isoformat(), str(flow.id))

    def _cursor_values(self) -> tuple[float | None, datetime, uuid.UUID]:
        key, created_at, flow_id = decode_cursor(self.cursor, _optional_float, moment, uuid.UUID)
        if (key is None) != (self.sort == "newest"):
            raise InvalidInput("is not a cursor this route issued (with this sort)", field="cursor")
        return key, created_at, flow_id

    def _after(self) -> Q:
        key, created_at, flow_id = self._cursor_values()
        older = Q(created_at__lt=created_at) | Q(created_at=created_at, id__lt=flow_id)
        if self.sort == "newest":
            return older
        beyond = Q(sort_key__gt=key) if self.sort == "confidence" else Q(sort_key__lt=key)
        return beyond | (Q(sort_key=key) & older)

    def summary(self) -> FlowSummary:
        """Counts by state, the guard-blocked share and duration percentiles of the filtered set."""
        duration = Extract(ExpressionWrapper(F("closed_at") - F("created_at"), output_field=DurationField()), "epoch")
        row = (
            self.queryset()
            .annotate(duration_s=duration)
            .aggregate(
                total=Count("id"),
                completed=Count("id", filter=Q(flow_state=ReasoningFlow.State.COMPLETED)),
                aborted=Count("id", filter=Q(flow_state=ReasoningFlow.State.ABORTED)),
                active=Count("id", filter=Q(flow_state=ReasoningFlow.State.ACTIVE)),
                blocked=Count("id", filter=Q(patient_safe_summary=False)),
                p50=_Percentile("duration_s", 0.5),
                p95=_Percentile("duration_s", 0.95),
            )
        )
        return FlowSummary(**row)


@dataclass(frozen=True)
class FlowSummary:
    total: int
    completed: int
    aborted: int
    active: int
    blocked: int
    p50: float | None  # seconds, over closed flows
    p95: float | None

    @property
    def blocked_share(self) -> float | None:
        """Of the closed flows (the guard runs at close), the share it blocked for patients."""
        closed = self.completed + self.aborted
        return self.blocked / closed if closed else None

    @property
    def blocked_percent(self) -> float | None:
        share = self.blocked_share
        return None if share is None else share * 100


def _optional_float(value: Any) -> float | None:
    return None if value is None else float(value)


def _text(value: str, name: str) -> str:
    if len(value) > MAX_TEXT or "\x00" in value:
        raise InvalidInput(f"must be at most {MAX_TEXT} characters, without NUL", field=name)
    return value


def _boolean(value: str, name: str) -> bool | None:
    if not value:
        return None
    if value in ("true", "1", "yes"):
        return True
    if value in ("false", "0", "no"):
        return False
    raise InvalidInput("must be true or false", field=name)


def _guard_rule(guard: str) -> str:
    """The rule of ``blocked:<rule>``, else ''."""
    if guard.startswith("blocked:"):
        rule = guard.removeprefix("blocked:")
        if rule and len(rule) <= 64 and LABEL_RE.match(rule):
            return rule
    return ""


def flow_row(flow: ReasoningFlow, now: datetime) -> dict[str, Any]:
    """A flow as the flow list and the turn page show it: short id, duration (so far, while active)."""
    end = flow.closed_at or now
    return {
        "flow": flow,
        "short_id": flow.id.hex[:8],
        "duration": (end - flow.created_at).total_seconds(),
        "running": flow.closed_at is None,
        # In and out, as the tokens sort counts them; None when no step reported either.
        "tokens": total_tokens(flow.input_tokens, flow.output_tokens),
    }
