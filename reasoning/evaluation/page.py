"""The evaluation page's data: the latest recorded gate runs, and drift share over time.

Runs come from ``reasoning_signature_check --record`` and ``reasoning_replay --record``
(``EvaluationRun``): labels, ids and counts only. The drift chart plots, for the last
``HISTORY`` runs of a kind, each trigger type's share of drifting results (drifting /
(total - skipped); no point when every result of that trigger type was skipped).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from django.db.models import Window
from django.db.models.functions import RowNumber
from django.urls import NoReverseMatch, reverse
from django.utils import timezone

from core import charts, svg
from core.charts import Panel, Table
from reasoning.models import EvaluationRun

HISTORY = 20  # runs of each kind on the drift chart
SERIES_KEYS = 8  # trigger types get colours t1..t8 in the order they first appear, then repeat


@dataclass(frozen=True)
class KindView:
    kind: str
    title: str
    latest: EvaluationRun | None
    history: Panel  # the drift-share chart and its table
    # The latest run's trigger types: (trigger type, total, drifting, skipped, share as "25%" or "—")
    by_trigger_type: tuple[tuple[str, int, int, int, str], ...]
    findings: tuple[tuple[str, str, str, str], ...]  # (id, trigger type, status, link or "")


TITLES: dict[str, str] = {
    EvaluationRun.Kind.SIGNATURE_CHECK: "Golden-signature check",
    EvaluationRun.Kind.REPLAY: "Replay",
}


def evaluation_page() -> list[KindView]:
    """One query: the last HISTORY runs of each kind, newest first within each kind."""
    ranked = EvaluationRun.objects.annotate(
        rank=Window(RowNumber(), partition_by="kind", order_by=("-created_at", "-id"))
    ).order_by("kind", "-created_at", "-id")
    runs: dict[str, list[EvaluationRun]] = {kind: [] for kind in TITLES}
    for run in ranked:
        if run.rank <= HISTORY:  # the window annotation
            runs[run.kind].append(run)
    return [_kind_view(kind, runs[kind]) for kind in TITLES]


def share(entry: dict[str, int]) -> float | None:
    checked = entry.get("total", 0) - entry.get("skipped", 0)
    return entry.get("drifting", 0) / checked if checked > 0 else None


def _kind_view(kind: str, newest_first: Sequence[EvaluationRun]) -> KindView:
    latest = newest_first[0] if newest_first else None
    by_trigger = (
        tuple(
            (trigger, e.get("total", 0), e.get("drifting", 0), e.get("skipped", 0), _percent(share(e)))
            for trigger, e in sorted(latest.by_trigger_type.items())
        )
        if latest
        else ()
    )
    findings = (
        tuple(
            (str(f.get("id", "")), str(f.get("trigger_type", "")), str(f.get("status", "")), _link(kind, f))
            for f in latest.findings
        )
        if latest
        else ()
    )
    return KindView(kind, TITLES[kind], latest, _history(kind, list(reversed(newest_first))), by_trigger, findings)


def _link(kind: str, finding: dict[str, str]) -> str:
    """A signature check's findings are flows: link each to its page. Replay cases are files."""
    if kind != EvaluationRun.Kind.SIGNATURE_CHECK:
        return ""
    try:
        return reverse("admin-flow-page", args=[finding["id"]])
    except NoReverseMatch:  # an id that is not a uuid (a hand-made input): no link
        return ""


def _history(kind: str, oldest_first: Sequence[EvaluationRun]) -> Panel:
    triggers: list[str] = []
    for run in oldest_first:
        triggers.extend(t for t in sorted(run.by_trigger_type) if t not in triggers)
    labels = [
        f"{timezone.localtime(run.created_at):%b} {timezone.localtime(run.created_at).day}, "
        f"{timezone.localtime(run.created_at):%H:%M}"
        for run in oldest_first
    ]
    series = [
        charts.Series(trigger, f"t{i % SERIES_KEYS + 1}", [_share_of(run, trigger) for run in oldest_first])
        for i, trigger in enumerate(triggers)
    ]
    drawable = any(v is not None for s in series for v in s.values)
    step = max(1, len(labels) // 5)
    axis = [label if (len(labels) - 1 - i) % step == 0 else "" for i, label in enumerate(labels)]
    title = TITLES[kind]
    table = Table(
        ("Run", *triggers),
        tuple(
            (label, *(svg.percent(v) if v is not None else "—" for v in _column(series, i)))
            for i, label in enumerate(labels)
        ),
    )
    return Panel(
        slug=f"drift-{kind.replace('_', '-')}",
        title=f"{title}: drift share per trigger type, last {HISTORY} recorded runs",
        summary=_summary(oldest_first),
        kind="line",
        # A trigger type skipped in every run (no signature) has no line; the table still lists it.
        chart=charts.line_chart(
            labels, [s for s in series if any(v is not None for v in s.values)], axis_labels=axis, fmt=svg.percent
        )
        if drawable
        else None,
        empty="No recorded runs yet." if not oldest_first else "Every result of these runs was skipped.",
        table=table,
    )


def _percent(value: float | None) -> str:
    return "—" if value is None else svg.percent(100 * value)


def _share_of(run: EvaluationRun, trigger: str) -> float | None:
    """The trigger type's drift share in this run, in percent (None: not in the run, or all skipped)."""
    entry = run.by_trigger_type.get(trigger)
    value = share(entry) if entry else None
    return None if value is None else 100 * value


def _column(series: Sequence[charts.Series], i: int) -> list[float | None]:
    return [s.values[i] for s in series]


def _summary(oldest_first: Sequence[EvaluationRun]) -> str:
    if not oldest_first:
        return "No recorded runs."
    latest = oldest_first[-1]
    failed = sum(not run.passed for run in oldest_first)
    return (
        f"{len(oldest_first)} recorded runs, {failed} over their threshold; the latest drifted "
        f"{latest.drift_share:.0%} ({latest.drifting} of {latest.total - latest.skipped} checked)."
    )
