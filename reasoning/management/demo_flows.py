"""The demo's flows for ``load_demo``: five agents at work over the last 30 days (idempotent).

1. ``AGENTS``: each agent's trigger type, models, step plan and topics (what it was asked, what
   its steps looked at, what it decided), so that two flows about one patient read differently.
2. ``main_flows(anchor, …)``: ``FLOW_COUNT`` flows over the 29 days before ``anchor`` (the
   start of the current hour): more on weekdays than at weekends and more lately, the youngest
   few still active. Days 11 to 13 ago hold a model provider's incident: slow, rate-limited
   calls, so more failed steps and aborts. Mixed in everywhere: failed steps (``outcome``
   ``error`` with an ``error_type`` label) that are retried or stop the flow (``tool_error``),
   timeouts, agents giving up, escalations, summaries the guard blocks and a few merge steps.
   A flow's content and its day follow from its index alone (a ``random.Random`` seeded with
   its name), its hour from its day's own draw, so its fixed id (``demo_id``) always names the
   same flow, placed the same way relative to the day of the run.
3. ``write_flows(flows)``: each flow whole (open, steps, close) in one ``ingest.Item``, through
   ``ingest.write``, the write path of ``POST /api/reasoning/ingest``, with its own times as an
   agent sends them there: ``Item.created_at`` and ``closed_at`` (the route's ``started_at`` and
   ``close.ended_at``) and each step's ``started_at``. Being a trusted caller, the demo also
   dates each step's ``created_at`` (when it was recorded: its end) so narratives and charts
   show steps on their flow's day. Audited like any write, in the same transaction (the events
   carry the time of the run). A flow already stored is skipped whole, so a second run writes
   nothing, whatever the day.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from django.core.management.base import CommandError
from django.utils import timezone

from patients.models import Patient
from reasoning.models import ReasoningFlow
from reasoning.recording import ingest

ACTOR = "system:demo"
NAMESPACE = uuid.UUID("6f1d2c3e-8a4b-4c5d-9e6f-7a8b9c0d1e2f")


def demo_id(name: str) -> uuid.UUID:
    return uuid.uuid5(NAMESPACE, name)


def anchor_hour(now: datetime | None = None) -> datetime:
    """The demo's "now": the start of the current hour, so every flow is in the past."""
    return (now or timezone.now()).replace(minute=0, second=0, microsecond=0)


@dataclass(frozen=True)
class Topic:
    trigger: str  # the trigger summary: what a patient's "Your decisions" card shows
    focus: str  # what the steps looked at, in their summaries
    verdict: str  # the verdict step's summary
    outcome: str  # the outcome summary
    outcome_type: str = ""  # when not the agent's usual one


@dataclass(frozen=True)
class Step:
    kind: str
    summary: str  # may name the topic's {focus}
    tool: str = ""  # the tool a tool step runs
    model: bool = False  # a model call: it carries a model and its token counts
    optional: bool = False  # in about half of the flows


@dataclass(frozen=True)
class Agent:
    trigger_type: str
    outcome_type: str
    models: tuple[str, ...]  # the first answers most calls
    input_tokens: tuple[int, int]  # the range of a call's prompt size
    plan: tuple[Step, ...]  # then the verdict, worded by the topic
    topics: tuple[Topic, ...]


# The private model no public price list knows: its calls have tokens but no list price.
PRIVATE_MODEL = "clinic-llm-7b"
# Typical latency of one call, in ms; each call varies around it.
MODEL_LATENCY_MS = {
    "gpt-4o": 1800,
    "gpt-4o-mini": 700,
    "claude-3-5-sonnet-20241022": 2400,
    "o3-mini": 5200,
    PRIVATE_MODEL: 1100,
}
# Providers that report prompt-cache hits (cached_tokens).
CACHING_MODELS = frozenset({"gpt-4o", "gpt-4o-mini", "claude-3-5-sonnet-20241022"})
REASONING_MODELS = frozenset({"o3-mini"})

AGENTS: dict[str, Agent] = {
    "researcher": Agent(
        trigger_type="user_question",
        outcome_type="recommendation_delivered",
        models=("gpt-4o", "claude-3-5-sonnet-20241022", "gpt-4o-mini"),
        input_tokens=(1200, 4200),
        plan=(
            Step("retrieval", "Retrieved the recent {focus} and the current guideline", tool="lookup_guideline"),
            Step("llm_prompt", "Compared the {focus} with the guideline targets", model=True),
            Step("llm_prompt", "Checked the answer against a second source", model=True, optional=True),
        ),
        topics=(
            Topic(
                "Asked whether a change in blood pressure treatment is needed",
                "blood pressure readings",
                "Concluded that a follow-up visit is the right next step",
                "Recommended a follow-up visit with the care team",
            ),
            Topic(
                "Asked whether short nights explain higher morning readings",
                "sleep records and morning readings",
                "Found that short nights and higher readings often come together",
                "Suggested a steadier bedtime and a recheck in two weeks",
            ),
            Topic(
                "Asked what the latest cholesterol results mean",
                "cholesterol results",
                "Concluded that the results are close to the usual target",
                "Explained the results and suggested going over them at the next visit",
            ),
            Topic(
                "Asked whether a new rash needs to be seen",
                "description of the rash",
                "Found signs that a clinician should look at it",
                "Recommended booking an appointment this week",
            ),
            Topic(
                "Asked how much walking is safe during recovery",
                "recovery plan and activity records",
                "Concluded that a gradual increase fits the recovery plan",
                "Suggested a gradual walking plan to agree with the care team",
            ),
        ),
    ),
    "critic": Agent(
        trigger_type="claim_review",
        outcome_type="claim_created",
        models=("claude-3-5-sonnet-20241022", "gpt-4o"),
        input_tokens=(1500, 5000),
        plan=(
            Step("graph_walk", "Walked the evidence graph around the {focus}"),
            Step("tool_call", "Searched the literature index for independent sources", tool="search_literature"),
            Step("llm_prompt", "Asked whether the evidence supports the {focus}", model=True),
        ),
        topics=(
            Topic(
                "Checked a drafted claim against the evidence graph",
                "drafted claim",
                "Found enough independent support to keep the claim",
                "Kept the claim after checking its evidence",
            ),
            Topic(
                "Checked a drafted claim about salt and blood pressure",
                "claim about salt",
                "Found enough independent support to keep the claim",
                "Kept the claim after checking its evidence",
            ),
            Topic(
                "Checked a drafted claim about screen time and sleep",
                "claim about screen time",
                "Found that the sources disagree about the claim",
                "Rejected the claim: its sources did not agree",
                outcome_type="claim_rejected",
            ),
            Topic(
                "Checked a drafted claim about walking after meals",
                "claim about walking after meals",
                "Found two independent studies that support the claim",
                "Kept the claim with both studies attached",
            ),
        ),
    ),
    "correlator": Agent(
        trigger_type="correlation_scan",
        outcome_type="recommendation_delivered",
        models=("o3-mini", "gpt-4o"),
        input_tokens=(800, 3000),
        plan=(
            Step("aggregation", "Combined the {focus} over recent weeks"),
            Step("llm_prompt", "Asked whether the {focus} move together", model=True),
        ),
        topics=(
            Topic(
                "Looked for patterns across recent measurements",
                "activity and sleep trends",
                "Found a weak pattern worth watching",
                "Suggested keeping an eye on sleep and activity together",
            ),
            Topic(
                "Looked for patterns between meals and glucose readings",
                "meal logs and glucose readings",
                "Found that late meals go with higher morning readings",
                "Suggested moving the evening meal earlier for a week",
            ),
            Topic(
                "Looked for patterns between stress check-ins and heart rate",
                "stress check-ins and resting heart rate",
                "Found no pattern that stands out",
                "Reported that nothing needs to change for now",
            ),
            Topic(
                "Looked for patterns between weather and joint pain",
                "pain scores and local weather",
                "Found a mild link between cold days and pain",
                "Suggested noting pain on cold days for the next visit",
            ),
        ),
    ),
    "triage": Agent(
        trigger_type="patient_message",
        outcome_type="routed_to_care_team",
        models=("gpt-4o-mini", PRIVATE_MODEL),
        input_tokens=(250, 900),
        plan=(
            Step("llm_prompt", "Read the {focus} and rated how urgent it is", model=True),
            Step("rule_check", "Checked the rating against the triage rules"),
        ),
        topics=(
            Topic(
                "Sorted a message about feeling dizzy when standing up",
                "message",
                "Rated it as needing a call back today",
                "Asked the care team to call back today",
            ),
            Topic(
                "Sorted a message asking to renew a prescription",
                "renewal request",
                "Rated it as routine",
                "Passed the renewal request to the pharmacy team",
                outcome_type="routed_to_pharmacy",
            ),
            Topic(
                "Sorted a message about chest tightness",
                "message",
                "Rated it as urgent",
                "Escalated the message to the on-call clinician",
                outcome_type="escalated",
            ),
            Topic(
                "Sorted a message about a missed appointment",
                "message",
                "Rated it as routine",
                "Offered new appointment times",
                outcome_type="appointment_offered",
            ),
        ),
    ),
    "summarizer": Agent(
        trigger_type="visit_summary",
        outcome_type="summary_shared",
        models=(PRIVATE_MODEL, "gpt-4o-mini"),
        input_tokens=(2000, 6000),
        plan=(
            Step("retrieval", "Retrieved the notes of the {focus}", tool="fetch_visit_notes"),
            Step("llm_prompt", "Drafted a summary of the {focus}", model=True),
            Step("llm_prompt", "Rewrote the draft in plain language", model=True, optional=True),
            Step("rule_check", "Checked that every follow-up action is in the summary"),
        ),
        topics=(
            Topic(
                "Wrote a plain-language summary of a check-up visit",
                "check-up visit",
                "Approved the summary for sharing",
                "Shared a plain-language summary of the check-up",
            ),
            Topic(
                "Wrote a plain-language summary of a physiotherapy session",
                "physiotherapy session",
                "Approved the summary for sharing",
                "Shared the exercises agreed in the session",
            ),
            Topic(
                "Wrote a plain-language summary of a video consultation",
                "video consultation",
                "Approved the summary for sharing",
                "Shared the next steps agreed in the consultation",
            ),
        ),
    ),
}
ESCALATION = Step("escalation", "Handed the message to the on-call clinician")
# Summaries the guard rejects (a medication with a dose; a measured value), for guard-blocked flows.
UNSAFE_SUMMARY = "Reviewed metformin 500mg twice daily"
UNSAFE_VALUE_SUMMARY = "Noted a reading of 150/95 mmHg at the last visit"


@dataclass(frozen=True)
class DemoFlow:
    """One flow, whole: what it was opened with, its steps, its close (None: still active)."""

    name: str  # its id is demo_id(name)
    opened_at: datetime
    create: dict[str, Any]
    steps: list[dict[str, Any]]
    close: dict[str, Any] | None
    closed_at: datetime | None

    @property
    def id(self) -> uuid.UUID:
        return demo_id(self.name)


def write_flows(flows: Sequence[DemoFlow], *, batch: int = 25) -> int:
    """Write the flows not stored yet (see the module); returns how many were new."""
    stored = set(ReasoningFlow.objects.filter(pk__in=[flow.id for flow in flows]).values_list("pk", flat=True))
    missing = [flow for flow in flows if flow.id not in stored]
    for start in range(0, len(missing), batch):
        chunk = missing[start : start + batch]
        items = [
            ingest.Item(
                flow_id=flow.id,
                create=flow.create,
                steps=flow.steps,
                close=flow.close,
                created_at=flow.opened_at,
                closed_at=flow.closed_at,
            )
            for flow in chunk
        ]
        for flow, result in zip(chunk, ingest.write(items, actor=ACTOR), strict=True):
            if result.error is not None:
                raise CommandError(f"demo flow {flow.name} refused: {result.error}")
    return len(missing)


# --- The steps of one flow ---------------------------------------------------------------------


@dataclass(frozen=True)
class Course:
    """How a flow goes: its confidence, its failure, how slow its model calls are, where it stops."""

    confidence: tuple[float, float] = (0.9, 0.99)  # each step's, drawn from this range
    failure: str = ""  # "", "retried" (a step fails, its retry works) or "fatal" (the flow stops there)
    slow: float = 1.0  # a factor on public models' latency (the incident)
    unsafe: str = ""  # a summary the guard rejects, in place of the second step's
    stop_before_verdict: int = 0  # steps left out at the end (a timeout, an agent giving up)


def build_steps(
    name: str, agent_name: str, topic: Topic, start: datetime, rng: random.Random, course: Course
) -> tuple[list[dict[str, Any]], datetime]:
    """The step bodies of a flow opened at ``start``, and when its last step ended."""
    agent = AGENTS[agent_name]
    plan = [step for step in agent.plan if not step.optional or rng.random() < 0.5]
    plan.append(Step("verdict", topic.verdict))
    if topic.outcome_type == "escalated":
        plan.append(ESCALATION)
    if course.stop_before_verdict:
        plan = plan[: max(1, len(plan) - course.stop_before_verdict)]
    fallible = [index for index, step in enumerate(plan) if step.tool or step.model]
    failing = rng.choice(fallible) if course.failure and fallible else -1
    bodies: list[dict[str, Any]] = []
    clock = start + timedelta(milliseconds=rng.randint(20, 200))
    parent: uuid.UUID | None = None
    for index, step in enumerate(plan):
        for attempt in range(2 if index == failing and course.failure == "retried" else 1):
            failed = index == failing and attempt == 0
            summary = step.summary.format(focus=topic.focus)
            if index == 1 and course.unsafe:
                summary = course.unsafe
            body = _step_body(f"{name}-step-{len(bodies) + 1}", agent_name, step, summary, rng, course, failed=failed)
            latency = body["latency_ms"]
            body.update(parent_step_id=parent, started_at=clock, created_at=clock + timedelta(milliseconds=latency))
            bodies.append(body)
            parent = body["id"]
            # The next step starts after this one ends; a retry waits out a back-off first.
            clock += timedelta(milliseconds=latency + (rng.randint(1000, 4000) if failed else rng.randint(15, 400)))
            if failed and course.failure == "fatal":
                return bodies, clock
    return bodies, clock


def _step_body(
    name: str, agent_name: str, step: Step, summary: str, rng: random.Random, course: Course, *, failed: bool
) -> dict[str, Any]:
    agent = AGENTS[agent_name]
    model = ""
    if step.model:
        model = agent.models[0] if len(agent.models) == 1 or rng.random() < 0.7 else rng.choice(agent.models[1:])
        typical = MODEL_LATENCY_MS[model] * (1.0 if model == PRIVATE_MODEL else course.slow)
    elif step.tool:
        typical = 450.0
    elif step.kind in ("graph_walk", "aggregation"):
        typical = 300.0
    else:
        typical = 25.0
    latency = typical * rng.lognormvariate(0.0, 0.4) * (3.0 if failed else 1.0)
    body: dict[str, Any] = {
        "id": demo_id(name),
        "kind": step.kind,
        "agent": agent_name,
        "summary_text": f"Called {step.tool}, which failed" if failed and step.tool else summary,
        "confidence": round(rng.uniform(*course.confidence), 2),
        "latency_ms": max(1, int(latency)),
    }
    if step.tool:
        body["tool"] = step.tool
    if failed:
        body["outcome"] = "error"
        if step.model:
            body["summary_text"] = "Asked the model, which did not answer"
            rate_limited = course.slow > 1.0 and model != PRIVATE_MODEL
            body["error_type"] = "http_429" if rate_limited else rng.choice(["APITimeoutError", "http_500"])
        else:
            body["error_type"] = rng.choice(["http_503", "TimeoutError", "ConnectionResetError"])
        body["confidence"] = None
    if model:
        body["model"] = model
        body["llm_call_log_ref"] = f"demo-llm-{name}"
        if not failed:
            prompt = rng.randint(*agent.input_tokens)
            body["input_tokens"] = prompt
            body["output_tokens"] = rng.randint(60, 700)
            if model in CACHING_MODELS and rng.random() < 0.4:
                body["cached_tokens"] = int(prompt * rng.uniform(0.3, 0.8))
            if model in REASONING_MODELS:
                body["reasoning_tokens"] = rng.randint(300, 2500)
            body["reasoning_content"] = f"Demo chain-of-thought for {name}."
    return body


# --- The main flows: the last 30 days ---------------------------------------------------------

DAYS = 29  # day 0 is the last 24 hours; day 28 the oldest
INCIDENT_DAYS = range(11, 14)  # a provider's slow, rate-limited days
ACTIVE = 4  # the youngest flows are still running
# Which agent opens the n-th flow: the researcher most, the summarizer least.
ROTATION = (
    "researcher",
    "triage",
    "critic",
    "researcher",
    "correlator",
    "summarizer",
    "researcher",
    "triage",
    "critic",
    "correlator",
)


def flows_on_day(day: int) -> int:
    """How many flows open on ``day`` (days ago): fewer at "weekends", more lately."""
    if day % 7 in (2, 3):
        return 2 + day % 2
    return 5 + (28 - day) // 9 + (day * 5) % 3


# Oldest first: the n-th flow's day.
FLOW_DAYS = tuple(day for day in range(DAYS - 1, -1, -1) for _ in range(flows_on_day(day)))
FLOW_COUNT = len(FLOW_DAYS)


def opening_times(anchor: datetime) -> list[datetime]:
    """When each main flow opened, oldest first: in the working hours (6:00 to 23:00, in
    ``TIME_ZONE``) of its day; on day 0 within the last day, the last ``ACTIVE`` in the last
    hours before ``anchor`` (young enough that the 24-hour timeout has not hit them)."""
    midnight = timezone.localtime(anchor).replace(hour=0, minute=0, second=0, microsecond=0)
    times: list[datetime] = []
    for day in range(DAYS - 1, -1, -1):
        count = flows_on_day(day)
        rng = random.Random(f"demo-day-{day}")
        if day == 0:
            ages = sorted((rng.uniform(4, 23) for _ in range(count - ACTIVE)), reverse=True)
            times.extend(anchor - timedelta(hours=age) for age in [*ages, 2.7, 1.4, 0.6, 0.2])
        else:
            hours = sorted(rng.uniform(6, 23) for _ in range(count))
            times.extend(midnight - timedelta(days=day) + timedelta(hours=hour) for hour in hours)
    return times


def main_flows(anchor: datetime, consenting: Patient, not_consenting: Patient) -> list[DemoFlow]:
    """The ``FLOW_COUNT`` main flows (see the module). Every seventh flow (and the youngest) is
    about the consenting patient, every seventh but one about the other; the critic's are about
    no one (it checks claims)."""
    flows = []
    # Flows so far per agent and patient: each takes the agent's next topic, so one patient's
    # flows by one agent go through all its topics before any comes back.
    seen: dict[tuple[str, uuid.UUID | None], int] = {}
    for index, (day, opened) in enumerate(zip(FLOW_DAYS, opening_times(anchor), strict=True)):
        agent_name = ROTATION[index % len(ROTATION)]
        agent = AGENTS[agent_name]
        patient: Patient | None = None
        if agent_name != "critic":
            if index % 7 == 0 or index == FLOW_COUNT - 1:
                patient = consenting
            elif index % 7 == 1:
                patient = not_consenting
        key = (agent_name, patient.pk if patient else None)
        topic = agent.topics[seen.get(key, 0) % len(agent.topics)]
        seen[key] = seen.get(key, 0) + 1
        name = f"flow-{index}"
        rng = random.Random(name)
        active = index >= FLOW_COUNT - ACTIVE
        course, abort_reason = _course(index, day, rng, active)
        steps, ended = build_steps(name, agent_name, topic, opened, rng, course)
        if index % 20 == 2 and len(steps) >= 3:  # a merge: the verdict also rests on the first step
            steps[-1]["extra_parent_ids"] = [steps[0]["id"]]
        close: dict[str, Any] | None = None
        closed_at: datetime | None = None
        if abort_reason:
            close = {"flow_state": "aborted", "abort_reason": abort_reason}
            # The decay job aborts a flow left active for 24 hours, at its next hourly run.
            closed_at = opened + timedelta(hours=24, minutes=rng.randint(1, 59)) if abort_reason == "timeout" else ended
        elif not active:
            close = {
                "flow_state": "completed",
                "outcome_type": topic.outcome_type or agent.outcome_type,
                "outcome_summary": topic.outcome,
            }
            closed_at = ended + timedelta(milliseconds=rng.randint(20, 300))
        create = {
            "trigger_type": agent.trigger_type,
            "trigger_ref": f"demo/{agent_name}/{index}",
            "trigger_summary": topic.trigger,
            "agent": agent_name,
            "trace_id": f"demo-trace-{index}",
            "patient_id": patient.pk if patient else None,
        }
        flows.append(DemoFlow(name, opened, create, steps, close, closed_at))
    return flows


def _course(index: int, day: int, rng: random.Random, active: bool) -> tuple[Course, str]:
    """How the ``index``-th flow goes, and its abort reason ("" unless aborted)."""
    incident = day in INCIDENT_DAYS
    strength = rng.random()
    confidence = (0.9, 0.99) if strength < 0.7 else (0.75, 0.9) if strength < 0.92 else (0.5, 0.75)
    course = Course(
        confidence=confidence,
        slow=rng.uniform(2.0, 3.5) if incident else 1.0,
        unsafe=(UNSAFE_SUMMARY if index % 2 == 0 else UNSAFE_VALUE_SUMMARY) if index % 13 == 4 else "",
    )
    if active:  # still at work: no verdict yet
        return replace(course, stop_before_verdict=1), ""
    if index == 3:  # demo/researcher/3 seeds the pathway the README and the MCP agent look up
        return Course(), ""
    fate = rng.random()
    failing = 0.3 if incident else 0.08
    if fate < failing:
        fatal = rng.random() < 0.3
        return replace(course, failure="fatal" if fatal else "retried"), "tool_error" if fatal else ""
    if fate < failing + 0.03 and day >= 2:
        return replace(course, stop_before_verdict=2), "timeout"
    if fate < failing + 0.05:
        return replace(course, stop_before_verdict=1), "insufficient_evidence"
    return course, ""
