"""Read-only admin pages for the audit trail, and the base for admin pages that write.

Nothing here can add, change or delete a row: the trail is written only by
``audit.services.record`` and the chainer, and the database triggers reject UPDATE and
DELETE anyway. The canonical bytes are not shown; ``audit_verify`` checks them.

``ServiceAdmin`` lives here because every app's admin depends on ``audit``, and the
reason it exists is to keep the audit trail whole: admin saves go through services.
"""

from __future__ import annotations

import json
from typing import Any

from django.contrib import admin, messages
from django.db.models import Model, QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.utils.html import format_html
from django.utils.safestring import SafeString

from audit.actions import ROUTINE_READS, Action
from audit.models import AuditChainLink, AuditEvent
from core.actors import actor_for
from core.errors import ServiceError


class ServiceAdmin(admin.ModelAdmin[Any]):
    """A model admin whose saves call a service function, which writes the audit event.

    The service runs inside the admin's own transaction, so the change, its audit event
    and the admin's LogEntry commit together. A ``ServiceError`` the form could not
    foresee, such as a concurrent duplicate, rolls that back and becomes an error
    message, not a 500.
    """

    def changeform_view(
        self,
        request: HttpRequest,
        object_id: str | None = None,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        try:
            return super().changeform_view(request, object_id, form_url, extra_context)
        except ServiceError as exc:
            self.message_user(request, exc.detail, messages.ERROR)
            return HttpResponseRedirect(request.get_full_path())

    @staticmethod
    def actor(request: HttpRequest) -> str:
        return actor_for(request)

    @staticmethod
    def adopt(unsaved: Model, created: Model) -> None:
        """Make the admin's form instance the row the service created (for the log and redirect)."""
        for field in created._meta.concrete_fields:
            setattr(unsaved, field.attname, getattr(created, field.attname))
        unsaved._state.adding = False
        unsaved._state.db = created._state.db


class ReadOnlyAdmin(admin.ModelAdmin[Any]):
    """View permission only: no add form, no save button, POSTs to a change page are 403."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class ActionFilter(admin.SimpleListFilter):
    """Choices from the action catalogue, so the sidebar costs no DISTINCT scan of the trail."""

    title = "action"
    parameter_name = "action"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [(action.value, action.value) for action in Action]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        return queryset.filter(action=value) if value else queryset


class KindFilter(admin.SimpleListFilter):
    """Changes and sensitive reads by default; routine reads (``ROUTINE_READS``) on request."""

    title = "kind"
    parameter_name = "kind"
    DEFAULT = "changes"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("changes", "changes and sensitive reads"), ("reads", "routine reads"), ("all", "everything")]

    def choices(self, changelist: Any) -> Any:
        current = self.value() or self.DEFAULT
        for lookup, title in self.lookup_choices:
            yield {
                "selected": current == lookup,
                "query_string": changelist.get_query_string({self.parameter_name: lookup}),
                "display": title,
            }

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        kind = self.value() or self.DEFAULT
        if request.GET.get(ActionFilter.parameter_name) and not self.value():
            return queryset  # one action asked for by name: show it, whatever its kind
        if kind == "reads":
            return queryset.filter(action__in=ROUTINE_READS)
        if kind == "all":
            return queryset
        return queryset.exclude(action__in=ROUTINE_READS)


@admin.register(AuditEvent)
class AuditEventAdmin(ReadOnlyAdmin):
    list_display = ("id", "action", "actor", "target_type", "target_id", "created_at")
    list_filter = (KindFilter, ActionFilter)
    # Exact matches: ids and actors are pasted from elsewhere, and ILIKE would scan the trail.
    search_fields = ("target_id__exact", "actor__exact")
    search_help_text = "Exact target id (e.g. a flow or patient id) or actor (e.g. user:3, token:agent)."
    ordering = ("-id",)
    fields = ("id", "action", "actor", "target_type", "target_id", "created_at", "payload_json")
    readonly_fields = fields
    list_per_page = 50

    def get_queryset(self, request: HttpRequest) -> QuerySet[AuditEvent]:
        # The canonical bytes are never shown.
        return super().get_queryset(request).defer("canonical")

    @admin.display(description="payload")
    def payload_json(self, obj: AuditEvent) -> SafeString:
        return format_html("<pre>{}</pre>", json.dumps(obj.payload, indent=2, sort_keys=True))


@admin.register(AuditChainLink)
class AuditChainLinkAdmin(ReadOnlyAdmin):
    list_display = ("position", "event_id", "hash", "linked_at")
    search_fields = ("event_id",)
    search_help_text = "Exact event id."
    ordering = ("-position",)
    fields = ("position", "event_id", "prev_hash", "hash", "linked_at")
    readonly_fields = fields
    list_per_page = 50

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[AuditChainLink], search_term: str
    ) -> tuple[QuerySet[AuditChainLink], bool]:
        # An exact match uses the unique index; a term that is no event id matches nothing.
        term = search_term.strip()
        if not term:
            return queryset, False
        try:
            event_id = int(term)
        except ValueError:
            return queryset.none(), False
        if not 0 < event_id < 2**63:
            return queryset.none(), False
        return queryset.filter(event_id=event_id), False
