"""Admin pages for the backlog and the triage queue: view only (rows change through the
audited services, the API and the Research Console)."""

from __future__ import annotations

from django.contrib import admin

from audit.admin import ReadOnlyAdmin
from research_backlog.models import ClaimReview, ResearchRequest


@admin.register(ResearchRequest)
class ResearchRequestAdmin(ReadOnlyAdmin):
    list_display = ("id", "trigger_type", "reason", "source", "status", "retry_count", "created_at", "completed_at")
    list_filter = ("status", "reason", "source")
    search_fields = ("=id", "=trigger_ref")
    ordering = ("-created_at",)


@admin.register(ClaimReview)
class ClaimReviewAdmin(ReadOnlyAdmin):
    list_display = ("id", "claim_id", "status", "source", "created_at", "resolved_at")
    list_filter = ("status", "source")
    search_fields = ("=id", "=claim_id")
    ordering = ("-created_at",)
