"""Operator routes of the pathway library (``reasoning.admin``)."""

from __future__ import annotations

from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiExample, OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework.request import Request
from rest_framework.response import Response

from core.actors import actor_for
from core.api_views import ERRORS, ApiView, limit_parameter, parse_limit, parse_uuid
from core.labels import label_schema
from core.scopes import IsAdmin
from pathways import services
from pathways.matcher import Candidate
from pathways.serializers import HitResponseSerializer, MatchResponseSerializer, PathwayStatsSerializer

MAX_MATCH_LIMIT = 50
NOT_FOUND = OpenApiResponse(OpenApiTypes.OBJECT, description="No pathway with this id.")
DEMOTED = OpenApiResponse(OpenApiTypes.OBJECT, description="The pathway is demoted: it can no longer be reused.")
PATHWAY_ID = "5b0e7f4e-2f55-4f0c-9a8e-2a3c1c7d9e11"
EXAMPLE_RADAR = {
    "confidence": {"score": 7, "bucket": "high"},
    "coverage": {"score": 4, "bucket": "medium"},
    "maturity": {"score": 6, "bucket": "high"},
    "recency": {"score": 5, "bucket": "medium"},
    "consensus": {"score": 3, "bucket": "medium"},
    "risk": {"score": 1, "bucket": "low"},
}


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
            OpenApiParameter("trigger_type", label_schema(), required=True),
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
        responses={200: MatchResponseSerializer, **ERRORS},
        examples=[
            OpenApiExample(
                "One prefix match",
                response_only=True,
                value={
                    "candidates": [
                        {
                            "id": PATHWAY_ID,
                            "trigger_type": "user_question",
                            "trigger_ref": "bp-treatment/followup",
                            "score": 0.7,
                            "reason": "prefix_ref",
                            "structural_score": 0.7,
                            "semantic_score": None,
                            "hit_count": 4,
                            "embedding_model": "hash_bucket_v1",
                            "last_hit_at": "2026-11-30T14:02:11Z",
                            "dimensions": EXAMPLE_RADAR,
                        }
                    ]
                },
            )
        ],
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
        responses={200: HitResponseSerializer, 404: NOT_FOUND, 409: DEMOTED, **ERRORS},
        examples=[
            OpenApiExample(
                "Reused",
                response_only=True,
                value={"id": PATHWAY_ID, "hit_count": 5, "last_hit_at": "2026-12-01T09:15:00Z"},
            )
        ],
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
        responses={200: PathwayStatsSerializer, **ERRORS},
        examples=[
            OpenApiExample(
                "A small library",
                response_only=True,
                value={
                    "total": 12,
                    "active": 10,
                    "embedded": 10,
                    "by_model": {"hash_bucket_v1": 10},
                    "by_trigger_type": {"claim_check": 3, "user_question": 7},
                    "maturity_by_trigger_type": {"claim_check": "growing", "user_question": "mature"},
                    "demoted": {"total": 2, "by_reason": {"cold": 1, "stale": 1}},
                    "top_hits": [{"id": PATHWAY_ID, "trigger_type": "user_question", "hit_count": 5}],
                },
            )
        ],
    )
    def get(self, request: Request) -> Response:
        return Response(services.read_stats(actor=actor_for(request)))
