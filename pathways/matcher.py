"""Rank library pathways against a new question's (trigger_type, trigger_ref).

Scores:
  structural   exact_ref 1.0 (same type, same ref) · prefix_ref 0.7 (same type, one ref
               a path prefix of the other, or both under the same parent path) ·
               trigger_type_only 0.3 · none 0.0
  composite    when the query and the candidate carry embeddings of the same model:
               0.3 * structural + 0.7 * max(cosine, 0); the reason gains "+semantic".
               Cross-model or un-embedded candidates keep the structural score.
Demoted pathways never match. Ties break on hit_count (established beats cold).

Candidates come from indexes, never from loading the library: exact and prefix refs
(b-tree on trigger_type, trigger_ref), the most reused pathways of the type (b-tree on
trigger_type, hit_count) and the nearest embeddings of the type (HNSW, cosine, with
``hnsw.iterative_scan`` so the trigger_type/model/demoted filter cannot starve the
result list).
"""

from __future__ import annotations

import functools
import logging
import re
from dataclasses import dataclass

from django.db import connection, transaction

from core.errors import InvalidInput
from core.labels import LABEL_PATTERN
from pathways.embeddings import EmbeddingClient, EmbeddingError, build_embedding_client, pathway_text
from pathways.models import Pathway, parent_ref

logger = logging.getLogger(__name__)

LABEL = re.compile(LABEL_PATTERN)
STRUCTURAL_WEIGHT = 0.3
SEMANTIC_WEIGHT = 0.7
# Candidates fetched per source before ranking; the answer is cut to ``limit`` after.
CANDIDATES_PER_SOURCE = 50
# HNSW search breadth; with iterative scan, the index keeps searching until enough
# rows pass the filter.
EF_SEARCH = 100


@functools.cache
def active_client() -> EmbeddingClient:
    """The process's request-path embedding client, from PATHWAY_EMBEDDING_MODEL (built at start-up)."""
    return build_embedding_client(interactive=True)


@dataclass(frozen=True)
class Candidate:
    pathway: Pathway
    score: float
    reason: str
    structural: float
    semantic: float | None


# Why a trigger type is refused, in words an operator can act on ("user question" → user_question).
LABEL_ONLY = "must be a label: letters, digits and _ . : / - only, starting with a letter or digit (e.g. user_question)"


def check_query(trigger_type: str, trigger_ref: str) -> None:
    """Raise InvalidInput (naming the field) unless the pair is a valid match query."""
    if not trigger_type:
        raise InvalidInput("is required", field="trigger_type")
    if len(trigger_type) > 100:
        raise InvalidInput("must be at most 100 characters", field="trigger_type")
    if not LABEL.match(trigger_type):
        raise InvalidInput(LABEL_ONLY, field="trigger_type")
    if len(trigger_ref) > 500 or "\x00" in trigger_ref:
        raise InvalidInput("must be at most 500 characters, without NUL", field="trigger_ref")


def structural_score(query_type: str, query_ref: str, pathway_type: str, pathway_ref: str) -> tuple[float, str]:
    if query_type != pathway_type:
        return 0.0, "none"
    if query_ref and query_ref == pathway_ref:
        return 1.0, "exact_ref"
    if query_ref and pathway_ref:
        a, b = query_ref.rstrip("/"), pathway_ref.rstrip("/")
        if a.startswith(b + "/") or b.startswith(a + "/") or (parent_ref(a) and parent_ref(a) == parent_ref(b)):
            return 0.7, "prefix_ref"
    return 0.3, "trigger_type_only"


def composite_score(structural: float, semantic: float) -> float:
    return STRUCTURAL_WEIGHT * structural + SEMANTIC_WEIGHT * max(semantic, 0.0)


def match(trigger_type: str, trigger_ref: str, *, client: EmbeddingClient | None, limit: int = 10) -> list[Candidate]:
    """Ranked candidates, best first. ``client`` None means structural matching only."""
    query_vector = None
    if client is not None:
        try:
            query_vector = client.embed([pathway_text(trigger_type, trigger_ref)])[0]
        except EmbeddingError as exc:
            # A vendor outage degrades matching to structural; it does not fail the request.
            logger.warning("query embedding failed (%s); matching structurally", type(exc).__name__)
    model_name = client.model_name if (client is not None and query_vector is not None) else None
    pathways, similarity = _structural_candidates(trigger_type, trigger_ref, model_name, query_vector)
    if query_vector is not None and model_name is not None:
        for pathway, cosine in _semantic_candidates(trigger_type, model_name, query_vector):
            pathways.setdefault(pathway.pk, pathway)
            similarity[pathway.pk] = cosine
    ranked = []
    for pk, pathway in pathways.items():
        structural, reason = structural_score(trigger_type, trigger_ref, pathway.trigger_type, pathway.trigger_ref)
        if pk not in similarity:
            ranked.append(Candidate(pathway, structural, reason, structural, None))
        else:
            cosine = similarity[pk]
            ranked.append(
                Candidate(pathway, composite_score(structural, cosine), f"{reason}+semantic", structural, cosine)
            )
    ranked.sort(key=lambda c: (-c.score, -c.pathway.hit_count, str(c.pathway.pk)))
    return ranked[:limit]


# What ranking and the route need; the vector and the rest stay in the database (the
# candidates' radars load their inputs for the final few in one query: pathways.radar).
CANDIDATE_COLUMNS = "id, trigger_type, trigger_ref, hit_count, embedding_model, demoted_at"
_ACTIVE_OF_TYPE = "FROM pathways_pathway WHERE trigger_type = %s AND demoted_at IS NULL"


def _structural_candidates(
    trigger_type: str, trigger_ref: str, model_name: str | None, vector: list[float] | None
) -> tuple[dict[object, Pathway], dict[object, float]]:
    """Pathways related by ref or reuse, each with its cosine to ``vector`` when it has a
    same-model embedding (computed in the same statement: no second round trip).

    One statement, UNION ALL of: the type's most reused; with a ref, the ref and its
    ancestors, its siblings and its children (all prefix_ref or better). Raw SQL: the ORM
    spent longer compiling the four parts (each with the 256-d vector) than Postgres
    spent running them.
    """
    if model_name is not None and vector is not None:
        cosine = "CASE WHEN embedding_model = %s AND embedding IS NOT NULL THEN 1 - (embedding <=> %s::vector) END"
        cosine_params: list[object] = [model_name, _literal(vector)]
    else:
        cosine, cosine_params = "NULL::double precision", []
    select = f"SELECT {CANDIDATE_COLUMNS}, {cosine} AS cosine {_ACTIVE_OF_TYPE}"
    parts = [f"({select} ORDER BY hit_count DESC LIMIT %s)"]
    params: list[object] = [*cosine_params, trigger_type, CANDIDATES_PER_SOURCE]
    if trigger_ref:
        ref = trigger_ref.rstrip("/")
        pieces = ref.split("/")
        lineage = [trigger_ref] + ["/".join(pieces[:n]) for n in range(1, len(pieces))]
        parts += [
            f"({select} AND trigger_ref = ANY(%s))",
            f"({select} AND parent_ref = %s ORDER BY hit_count DESC LIMIT %s)",
            f"({select} AND parent_ref = %s ORDER BY hit_count DESC LIMIT %s)",
        ]
        params += [*cosine_params, trigger_type, lineage]
        params += [*cosine_params, trigger_type, parent_ref(ref), CANDIDATES_PER_SOURCE]
        params += [*cosine_params, trigger_type, ref, CANDIDATES_PER_SOURCE]
    found: dict[object, Pathway] = {}
    similarity: dict[object, float] = {}
    for pathway in Pathway.objects.raw(" UNION ALL ".join(parts), params):
        found.setdefault(pathway.pk, pathway)
        value = getattr(pathway, "cosine", None)
        if value is not None:
            similarity[pathway.pk] = float(value)
    return found, similarity


def _semantic_candidates(trigger_type: str, model_name: str, vector: list[float]) -> list[tuple[Pathway, float]]:
    with transaction.atomic(), connection.cursor() as cursor:
        # Transaction-local settings (SET LOCAL), so pooled connections are not affected.
        cursor.execute(
            "SELECT set_config('hnsw.ef_search', %s, true), set_config('hnsw.iterative_scan', 'relaxed_order', true)",
            [str(EF_SEARCH)],
        )
        rows = list(
            Pathway.objects.raw(
                """
                SELECT id, trigger_type, trigger_ref, hit_count, embedding_model, demoted_at,
                       1 - (embedding <=> %s::vector) AS cosine
                FROM pathways_pathway
                WHERE trigger_type = %s AND demoted_at IS NULL AND embedding_model = %s
                  AND embedding IS NOT NULL
                ORDER BY embedding <=> %s::vector
                LIMIT %s
                """,
                [_literal(vector), trigger_type, model_name, _literal(vector), CANDIDATES_PER_SOURCE],
            )
        )
    # relaxed_order may return rows slightly out of order; the caller re-sorts by score.
    return [(row, float(row.cosine)) for row in rows]  # type: ignore[attr-defined]


def _literal(vector: list[float]) -> str:
    return "[" + ",".join(f"{value:.7g}" for value in vector) + "]"
