"""Admin page for the pathway library: view only (pathways change through jobs and the API)."""

from __future__ import annotations

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest

from audit.admin import ReadOnlyAdmin
from pathways.models import Pathway, PathwayHit


@admin.register(Pathway)
class PathwayAdmin(ReadOnlyAdmin):
    list_display = (
        "id",
        "trigger_type",
        "trigger_ref",
        "hit_count",
        "last_hit_at",
        "embedding_model",
        "demotion_reason",
        "created_at",
    )
    list_filter = ("trigger_type", "embedding_model", "demotion_reason")
    search_fields = ("=id", "=trigger_ref")
    ordering = ("-created_at",)
    exclude = ("embedding",)
    readonly_fields = (
        "trigger_type",
        "trigger_ref",
        "step_kinds",
        "agents",
        "seed_flow",
        "confidence",
        "hit_count",
        "last_hit_at",
        "embedding_model",
        "demoted_at",
        "demotion_reason",
        "created_at",
    )

    def get_queryset(self, request: HttpRequest) -> QuerySet[Pathway]:
        # A 256-float vector per row is of no use on these pages.
        return super().get_queryset(request).defer("embedding")


@admin.register(PathwayHit)
class PathwayHitAdmin(ReadOnlyAdmin):
    """Console reuses (and whether they were undone): written only by pathways.services."""

    list_display = ("id", "pathway", "actor", "created_at", "undone_at")
    list_filter = ("undone_at",)
    search_fields = ("=id", "=pathway__id", "=actor")
    ordering = ("-created_at",)
    list_select_related = ("pathway",)
    readonly_fields = ("pathway", "actor", "previous_last_hit_at", "created_at", "undone_at")
