"""Operator routes of the pathway library (``reasoning.admin``)."""

from __future__ import annotations

from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework.request import Request
from rest_framework.response import Response

from core.actors import actor_for
from core.api_views import ERRORS, ApiView, limit_parameter, parse_limit, parse_uuid
from pathways import services
from pathways.matcher import Candidate
from reasoning.auth import IsAdmin

MAX_MATCH_LIMIT = 50


def candidate_representation(candidate: Candidate, dimensions: dict[str, Any]) -> dict[str, Any]:
    pathway = candidate.pathway
    return {
        "id": pathway.pk,
        "trigger_type": pathway.trigger_type,
        "trigger_ref": pathway.trigger_ref,
        "score": round(candidate.score, 4),
        "reason": candidate.reason,
        "structural_score": candidate.structural,
        "semantic_score": None if candidate.semantic is None else round(candidate.semantic, 4),
        "hit_count": pathway.hit_count,
        "embedding_model": pathway.embedding_model or None,
        "last_hit_at": pathway.last_hit_at,
        "dimensions": dimensions,
    }


class PathwayMatchView(ApiView):
    permission_classes = [IsAdmin]
    query_parameters = {
        "get": [
            OpenApiParameter("trigger_type", str, required=True),
            OpenApiParameter("trigger_ref", str),
            limit_parameter(default=10, maximum=MAX_MATCH_LIMIT),
        ]
    }

    @extend_schema(
        operation_id="pathways_match",
        summary="Rank library pathways for a (trigger_type, trigger_ref)",
        description="Needs `reasoning.admin`. Read-only (no hit is recorded). Structural score exact_ref 1.0 / "
        "prefix_ref 0.7 / trigger_type_only 0.3; blended 0.3 * structural + 0.7 * cosine when query and candidate "
        "have same-model embeddings (reason gains `+semantic`). Sorted by score, then hit_count. Demoted pathways "
        "never match. Each candidate carries its Decision Dimensions radar (`dimensions`: six axes, 0-7 with a "
        "low/medium/high bucket; Risk is the caution axis). Audits `reasoning.pathway.match_requested` (count "
        "and top reason only).",
        responses={200: OpenApiResponse(OpenApiTypes.OBJECT, description="`{candidates: [...]}`"), **ERRORS},
    )
    def get(self, request: Request) -> Response:
        params = request.query_params
        limit = parse_limit(params.get("limit"), default=10, maximum=MAX_MATCH_LIMIT)
        ranked = services.ranked_candidates(
            params.get("trigger_type", ""), params.get("trigger_ref", ""), actor=actor_for(request), limit=limit
        )
        body = [candidate_representation(candidate, radar) for candidate, radar in ranked]
        return Response({"candidates": body})


class PathwayHitView(ApiView):
    permission_classes = [IsAdmin]

    @extend_schema(
        operation_id="pathways_hit",
        summary="Record that a pathway was reused",
        description="Needs `reasoning.admin`. Atomically adds 1 to `hit_count` and stamps `last_hit_at`. "
        "404 unknown, 409 demoted. Audits `reasoning.pathway.matched`.",
        request=None,
        parameters=[OpenApiParameter("pathway_id", OpenApiTypes.UUID, OpenApiParameter.PATH)],
        responses={200: OpenApiResponse(OpenApiTypes.OBJECT), 404: ERRORS[400], 409: ERRORS[400], **ERRORS},
    )
    def post(self, request: Request, pathway_id: str) -> Response:
        pathway = services.record_hit(parse_uuid(pathway_id, "pathway_id"), actor=actor_for(request))
        return Response({"id": pathway.pk, "hit_count": pathway.hit_count, "last_hit_at": pathway.last_hit_at})


class PathwayStatsView(ApiView):
    permission_classes = [IsAdmin]

    @extend_schema(
        operation_id="pathways_stats",
        summary="Library statistics and maturity per trigger type",
        description="Needs `reasoning.admin`. total, active, embedded, by_model, by_trigger_type (active), "
        "maturity_by_trigger_type (mature: ≥ 5 active and ≥ 1 reused 3+ times; growing: ≥ 1 active; sparse), "
        "demoted, top_hits. Counts only. Audits `admin.reasoning.pathway.stats_read`.",
        responses={200: OpenApiResponse(OpenApiTypes.OBJECT), **ERRORS},
    )
    def get(self, request: Request) -> Response:
        return Response(services.read_stats(actor=actor_for(request)))
