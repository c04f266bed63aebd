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
from dataclasses import dataclass

from django.db import connection, transaction

from pathways.embeddings import EmbeddingClient, EmbeddingError, build_embedding_client, pathway_text
from pathways.models import Pathway

logger = logging.getLogger(__name__)

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


def _parent(ref: str) -> str:
    return ref.rsplit("/", 1)[0] if "/" in ref else ""


def structural_score(query_type: str, query_ref: str, pathway_type: str, pathway_ref: str) -> tuple[float, str]:
    if query_type != pathway_type:
        return 0.0, "none"
    if query_ref and query_ref == pathway_ref:
        return 1.0, "exact_ref"
    if query_ref and pathway_ref:
        a, b = query_ref.rstrip("/"), pathway_ref.rstrip("/")
        if a.startswith(b + "/") or b.startswith(a + "/") or (_parent(a) and _parent(a) == _parent(b)):
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
    pathways = _structural_candidates(trigger_type, trigger_ref)
    similarity: dict[object, float] = {}
    if query_vector is not None and client is not None:
        semantic = _semantic_candidates(trigger_type, client.model_name, query_vector)
        for pathway, cosine in semantic:
            pathways.setdefault(pathway.pk, pathway)
            similarity[pathway.pk] = cosine
        missing = [
            pk
            for pk, pathway in pathways.items()
            if pk not in similarity and pathway.embedding_model == client.model_name
        ]
        similarity.update(_cosines(missing, query_vector))
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


def _structural_candidates(trigger_type: str, trigger_ref: str) -> dict[object, Pathway]:
    active = Pathway.objects.active().filter(trigger_type=trigger_type).defer("embedding")
    found: dict[object, Pathway] = {}
    if trigger_ref:
        ref = trigger_ref.rstrip("/")
        parts = ref.split("/")
        # The ref itself and its ancestors (exact lookups), then siblings and descendants
        # (a prefix range scan), the most reused first.
        lineage = [trigger_ref] + ["/".join(parts[:n]) for n in range(1, len(parts))]
        related = active.filter(trigger_ref__startswith=(_parent(ref) or ref) + "/").order_by("-hit_count")
        for pathway in [*active.filter(trigger_ref__in=lineage), *related[:CANDIDATES_PER_SOURCE]]:
            found.setdefault(pathway.pk, pathway)
    for pathway in active.order_by("-hit_count")[:CANDIDATES_PER_SOURCE]:
        found.setdefault(pathway.pk, pathway)
    return found


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


def _cosines(ids: list[object], vector: list[float]) -> dict[object, float]:
    if not ids:
        return {}
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT id, 1 - (embedding <=> %s::vector) FROM pathways_pathway "
            "WHERE id = ANY(%s) AND embedding IS NOT NULL",
            [_literal(vector), ids],
        )
        return {row[0]: float(row[1]) for row in cursor.fetchall()}


def _literal(vector: list[float]) -> str:
    return "[" + ",".join(f"{value:.7g}" for value in vector) + "]"
