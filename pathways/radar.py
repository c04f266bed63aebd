"""Decision Dimensions for pathways: every match candidate's radar, and what the library
tells a flow's radar (registered with ``reasoning.radar`` at start-up).

A candidate's inputs: its seed flow's weakest-step confidence, the seed's evidence hits
and the pathway's distinct step kinds (Coverage), its hit count and its trigger family's
maturity (Maturity), days since the last reuse or creation (Recency), the seed flow's
verdicts (Consensus), and demotion plus aborted flows with the same trigger (Risk).
Candidates are scored in two queries, whatever their number.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Collection, Sequence
from datetime import datetime
from typing import Any

from django.utils import timezone

from core.bulk import opaque_array, sql_constant, text_array
from core.replica import reading_connection
from pathways.models import MATURE_ACTIVE, MATURE_HIT_COUNT, Maturity, Pathway, maturity
from reasoning.dimensions import LOW_CONFIDENCE, DimensionInputs, radar
from reasoning.models import ReasoningFlow
from reasoning.radar import (
    ABORTED_SIBLINGS_SQL,
    VERDICT_KIND,
    LibraryFacts,
    aborted_siblings_from,
    aborted_siblings_params,
    evidence_hits_of,
    verdicts_of,
)

# Each trigger family's active pathways (counted up to MATURE_ACTIVE) and whether one was reused
# MATURE_HIT_COUNT times: probes that stop early (both walk the (trigger_type, -hit_count) index of
# active pathways), so a family of 10,000 pathways costs what a family of 5 does; the second is a
# LIMIT 1 probe, not EXISTS, which PostgreSQL may run as one hashed pass over every active pathway
# reused three times when it guesses many families. The thresholds are constants of the text, the
# types' array opaque to the planner, so that PostgreSQL plans it once per connection (core.bulk's
# sql_constant and opaque_array). Parameter: the trigger types.
_FAMILY_COLUMNS = f"""
    (SELECT count(*) FROM (SELECT 1 FROM pathways_pathway p
                           WHERE p.trigger_type = t.kind AND p.demoted_at IS NULL
                           LIMIT {sql_constant(MATURE_ACTIVE)}) s),
    coalesce((SELECT true FROM pathways_pathway p
              WHERE p.trigger_type = t.kind AND p.demoted_at IS NULL
                AND p.hit_count >= {sql_constant(MATURE_HIT_COUNT)} LIMIT 1), false)
"""  # noqa: S608 (constants)
_FAMILIES = f"unnest({opaque_array('text[]')}) AS t(kind)"
FAMILY_MATURITY_SQL = f"SELECT t.kind, {_FAMILY_COLUMNS} FROM {_FAMILIES}"  # noqa: S608 (constants)
# The families' maturity and the flows' aborted siblings (reasoning.radar's statement) in one: a
# family's row has no trigger ref, a trigger's row no maturity.
_FACTS_SQL = (
    f"SELECT t.kind, NULL::text, NULL::bigint, NULL::uuid[], {_FAMILY_COLUMNS} FROM {_FAMILIES} "  # noqa: S608
    f"UNION ALL SELECT a.*, NULL::bigint, NULL::boolean FROM ({ABORTED_SIBLINGS_SQL}) a"
)


def family_maturity(trigger_types: Sequence[str]) -> dict[str, Maturity]:
    """Maturity of each trigger family, in one query whose cost does not grow with the family."""
    types = sorted(set(trigger_types))
    if not types:
        return {}
    with reading_connection().cursor() as cursor:
        cursor.execute(FAMILY_MATURITY_SQL, [text_array(types)])
        return {kind: maturity(active, int(high_hit)) for kind, active, high_hit in cursor.fetchall()}


def _families_and_siblings(flows: Sequence[ReasoningFlow]) -> tuple[dict[str, Maturity], dict[uuid.UUID, int]]:
    """Each flow's trigger family's maturity and its aborted siblings, in one statement."""
    types = sorted({flow.trigger_type for flow in flows})
    siblings_params = aborted_siblings_params(flows)
    if not types or siblings_params is None:
        return {}, {}
    with reading_connection().cursor() as cursor:
        cursor.execute(_FACTS_SQL, [text_array(types), *siblings_params])
        rows = cursor.fetchall()
    families = {kind: maturity(active, int(high_hit)) for kind, ref, _, _, active, high_hit in rows if ref is None}
    triggers = [(kind, ref, count, own) for kind, ref, count, own, _, _ in rows if ref is not None]
    return families, aborted_siblings_from(flows, triggers)


# Every radar input of the given pathways in one statement: the pathway's own fields,
# its seed flow's metrics, the seed's verdict steps (agent and verdict label, in order)
# and the aborted flows with its trigger (the partial index reasoning_flow_aborted_trigger, which a
# generic plan reads only with the state a constant of the text). Parameter: the pathways' ids.
RADAR_INPUTS_SQL = f"""
SELECT p.id, p.trigger_type, p.trigger_ref, p.hit_count, p.confidence, p.step_kinds,
       p.last_hit_at, p.created_at, p.demoted_at, p.seed_flow_id, f.outcome_metrics,
       (SELECT coalesce(json_agg(json_build_array(s.agent, s.outputs -> 'verdict') ORDER BY s.position), '[]')
          FROM reasoning_step s WHERE s.flow_id = p.seed_flow_id AND s.kind = {sql_constant(VERDICT_KIND)}) AS verdicts,
       (SELECT count(*) FROM reasoning_flow a
         WHERE a.trigger_type = p.trigger_type AND a.trigger_ref = p.trigger_ref
           AND a.flow_state = {sql_constant(ReasoningFlow.State.ABORTED.value)}) AS aborted
  FROM pathways_pathway p LEFT JOIN reasoning_flow f ON f.id = p.seed_flow_id
 WHERE p.id = ANY(%s)
"""  # noqa: S608 (constants)
# Filled in on the given pathways, so callers that show them (last_hit_at, step_kinds)
# do not fetch them one pathway at a time.
RADAR_ATTRIBUTES = (
    "trigger_type",
    "trigger_ref",
    "hit_count",
    "confidence",
    "step_kinds",
    "last_hit_at",
    "created_at",
    "demoted_at",
    "seed_flow_id",
)


def library_facts(flows: Sequence[ReasoningFlow], new: Collection[uuid.UUID] = ()) -> dict[uuid.UUID, LibraryFacts]:
    """Each flow's trigger family's maturity, its aborted siblings and the pathway it seeded, if
    any: two queries (one when every flow is ``new``, being created now: no pathway can have come
    from it)."""
    stored = [flow.id for flow in flows if flow.id not in new]
    seeded = (
        {
            row["seed_flow_id"]: row
            for row in Pathway.objects.filter(seed_flow_id__in=stored).values("seed_flow_id", "hit_count", "demoted_at")
        }
        if stored
        else {}
    )
    families, siblings = _families_and_siblings(flows)
    facts = {}
    for flow in flows:
        row = seeded.get(flow.id)
        facts[flow.id] = LibraryFacts(
            family_maturity=families.get(flow.trigger_type, Maturity.SPARSE),
            hit_count=row["hit_count"] if row else 0,
            demoted=bool(row and row["demoted_at"]),
            aborted_siblings=siblings.get(flow.id, 0),
        )
    return facts


def candidate_radars(pathways: Sequence[Pathway], *, now: datetime | None = None) -> list[dict[str, dict[str, Any]]]:
    """One radar per pathway, in order, in two queries whatever their number (the inputs,
    then the families' maturity). The given pathways get the radar fields filled in."""
    if not pathways:
        return []
    now = now or timezone.now()
    with reading_connection().cursor() as cursor:
        cursor.execute(RADAR_INPUTS_SQL, [[p.pk for p in pathways]])
        columns = [column.name for column in cursor.description or ()]
        rows = {row["id"]: row for row in (dict(zip(columns, values, strict=True)) for values in cursor.fetchall())}
    for row in rows.values():
        # Django has psycopg hand JSON over as text (JSONField parses it); so do we.
        for name in ("outcome_metrics", "verdicts"):
            if isinstance(row[name], str):
                row[name] = json.loads(row[name])
    for given in pathways:
        for name in RADAR_ATTRIBUTES:
            setattr(given, name, rows[given.pk][name])
    families = family_maturity([p.trigger_type for p in pathways])
    radars = []
    for p in pathways:
        row = rows[p.pk]
        last_used = p.last_hit_at or p.created_at
        radars.append(
            radar(
                DimensionInputs(
                    step_confidences=[p.confidence],
                    evidence_hits=evidence_hits_of(row["outcome_metrics"]),
                    distinct_step_kinds=len(set(p.step_kinds)),
                    hit_count=p.hit_count,
                    family_maturity=families.get(p.trigger_type, Maturity.SPARSE),
                    age_days=max(0.0, (now - last_used).total_seconds() / 86400),
                    verdicts=verdicts_of((agent, {"verdict": label}) for agent, label in row["verdicts"]),
                    aborted_siblings=row["aborted"],
                    demoted=p.demoted_at is not None,
                    low_confidence_steps=int(p.confidence < LOW_CONFIDENCE),
                    guard_failed=False,  # only guard-passed flows seed pathways
                )
            )
        )
    return radars
