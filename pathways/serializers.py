"""Response shapes of the pathway routes: every field typed, so OpenAPI is exact."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from pathways.models import Maturity

BUCKETS = ["low", "medium", "high"]


class AxisScoreSerializer(serializers.Serializer[Any]):
    score = serializers.IntegerField(min_value=0, max_value=7)
    bucket = serializers.ChoiceField(choices=BUCKETS)


class RadarSerializer(serializers.Serializer[Any]):
    """The Decision Dimensions radar (``reasoning.dimensions``): six axes scored 0-7; Risk
    is the caution axis (high is worse)."""

    confidence = AxisScoreSerializer()
    coverage = AxisScoreSerializer()
    maturity = AxisScoreSerializer()
    recency = AxisScoreSerializer()
    consensus = AxisScoreSerializer()
    risk = AxisScoreSerializer()


class CandidateSerializer(serializers.Serializer[Any]):
    id = serializers.UUIDField()
    trigger_type = serializers.CharField()
    trigger_ref = serializers.CharField()
    score = serializers.FloatField(help_text="0-1, rounded to 4 places.")
    reason = serializers.CharField(help_text="`exact_ref`, `prefix_ref` or `trigger_type_only`, maybe `+semantic`.")
    structural_score = serializers.FloatField()
    semantic_score = serializers.FloatField(allow_null=True)
    hit_count = serializers.IntegerField()
    embedding_model = serializers.CharField(allow_null=True)
    last_hit_at = serializers.DateTimeField(allow_null=True)
    dimensions = RadarSerializer()


class MatchResponseSerializer(serializers.Serializer[Any]):
    candidates = CandidateSerializer(many=True)


class HitResponseSerializer(serializers.Serializer[Any]):
    id = serializers.UUIDField()
    hit_count = serializers.IntegerField()
    last_hit_at = serializers.DateTimeField()


class DemotedSerializer(serializers.Serializer[Any]):
    total = serializers.IntegerField()
    by_reason = serializers.DictField(child=serializers.IntegerField(), help_text="`cold` and `stale` counts.")


class TopHitSerializer(serializers.Serializer[Any]):
    id = serializers.UUIDField()
    trigger_type = serializers.CharField()
    hit_count = serializers.IntegerField()


class PathwayStatsSerializer(serializers.Serializer[Any]):
    """``pathways.stats.PathwayStats``: counts only, no refs, no text."""

    total = serializers.IntegerField()
    active = serializers.IntegerField()
    embedded = serializers.IntegerField()
    by_model = serializers.DictField(child=serializers.IntegerField(), help_text="Embedded pathways per model.")
    by_trigger_type = serializers.DictField(child=serializers.IntegerField(), help_text="Active pathways.")
    maturity_by_trigger_type = serializers.DictField(child=serializers.ChoiceField(choices=Maturity.choices))
    demoted = DemotedSerializer()
    top_hits = TopHitSerializer(many=True)
