"""Admin pages: reasoning flows (view only, steps inline) and API tokens (create, revoke).

Flows and steps come from agents through the API, so here they are only viewed; opening
a flow is audited like ``GET /admin/v1/reasoning/flows/<id>``. The encrypted step
columns (PII values, raw chain-of-thought) are neither loaded nor shown. Tokens are
created and revoked through ``reasoning.tokens``, which write the audit events.
"""

from __future__ import annotations

import contextlib
import uuid
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.utils import unquote
from django.contrib.auth import get_permission_codename
from django.db.models import Q, QuerySet
from django.http import HttpRequest, HttpResponse
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString, mark_safe

from audit.admin import ReadOnlyAdmin, ServiceAdmin
from core.errors import Conflict
from reasoning import tokens
from reasoning.dimensions import is_radar
from reasoning.flows import services as flows_services
from reasoning.flows.serializers import FLOW_FIELDS
from reasoning.models import ApiToken, DriftReport, EvaluationRun, ReasoningFlow, ReasoningStep
from reasoning.templatetags.radar import radar

ENCRYPTED_STEP_FIELDS = ("inputs_pii", "outputs_pii", "reasoning_content")


class StepInline(admin.TabularInline[ReasoningStep, ReasoningFlow]):
    model = ReasoningStep
    fields = ("position", "kind", "agent", "summary_text", "confidence", "latency_ms", "reasoning_content_chars")
    readonly_fields = fields
    ordering = ("position",)
    extra = 0
    can_delete = False

    def get_queryset(self, request: HttpRequest) -> QuerySet[ReasoningStep]:
        return super().get_queryset(request).defer(*ENCRYPTED_STEP_FIELDS)

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


# The API's flow fields, with the patient as a link instead of a bare id and the
# dimensions snapshot drawn as the radar the flow page shows, not as raw JSON.
FLOW_ADMIN_FIELDS = tuple(
    {"patient_id": "patient", "dimensions_snapshot": "dimensions_radar"}.get(name, name) for name in FLOW_FIELDS
)


@admin.register(ReasoningFlow)
class ReasoningFlowAdmin(ReadOnlyAdmin):
    list_display = (
        "short_id",
        "trigger_type",
        "agent",
        "flow_state",
        "step_count",
        "outcome_type",
        "patient_safe_summary",
        "created_at",
        "flow_page",
    )
    list_display_links = ("short_id",)
    list_filter = (
        "flow_state",
        ("created_at", admin.DateFieldListFilter),
        "agent",
        "trigger_type",
        "patient_safe_summary",
    )
    search_fields = ("id", "trace_id")
    search_help_text = "Exact flow id or trace id."
    ordering = ("-created_at",)
    fields = FLOW_ADMIN_FIELDS
    readonly_fields = FLOW_ADMIN_FIELDS
    inlines = (StepInline,)

    class Media:
        css = {"all": ("css/radar.css",)}

    @admin.display(description="flow", ordering="id")
    def short_id(self, flow: ReasoningFlow) -> SafeString:
        # Eight hex digits fit the column; the full id is on hover (and the list page's search takes either).
        return format_html('<code title="{}">{}</code>', flow.pk, flow.pk.hex[:8])

    @admin.display(description="dimensions snapshot")
    def dimensions_radar(self, flow: ReasoningFlow) -> SafeString:
        snapshot = flow.dimensions_snapshot
        if not is_radar(snapshot):
            return format_html(
                '<span class="help">{}</span>',
                "Taken when the flow closes."
                if flow.is_active
                else "None: this flow closed before snapshots were kept.",
            )
        return mark_safe(render_to_string("components/radar.html", radar(snapshot, size="expanded")))  # noqa: S308  # the component escapes its values

    @admin.display(description="page")
    def flow_page(self, flow: ReasoningFlow) -> SafeString:
        return format_html('<a href="{}">Open flow page</a>', reverse("admin-flow-page", args=[flow.pk]))

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[ReasoningFlow], search_term: str
    ) -> tuple[QuerySet[ReasoningFlow], bool]:
        # Exact matches only, so the primary key and the trace_id index serve them.
        term = search_term.strip()
        if not term:
            return queryset, False
        match = Q(trace_id=term)
        with contextlib.suppress(ValueError):
            match |= Q(pk=uuid.UUID(term))
        return queryset.filter(match), False

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        response = super().change_view(request, object_id, form_url, extra_context)
        # 200 means the flow exists and this user may view it. Audited like the API's
        # operator read; the service's own read of the steps is the price of one code path.
        if request.method == "GET" and response.status_code == 200:
            flows_services.read_flow_for_admin(uuid.UUID(unquote(object_id)), actor=ServiceAdmin.actor(request))
        return response


@admin.register(EvaluationRun)
class EvaluationRunAdmin(ReadOnlyAdmin):
    """Recorded gate runs (``--record``), as the evaluation page shows them: read-only."""

    list_display = ("created_at", "kind", "source", "total", "drifting", "skipped", "threshold", "passed")
    list_filter = ("kind", "passed", ("created_at", admin.DateFieldListFilter))
    ordering = ("-created_at",)


@admin.register(DriftReport)
class DriftReportAdmin(ReadOnlyAdmin):
    """Drift reports (written by the drift job, ``reasoning.jobs.compute_drift_reports``):
    read-only, as the agent page shows them."""

    list_display = ("agent", "session_id", "session_ended_at", "level", "baseline_sessions", "decisions")
    list_filter = ("level", "agent")
    search_fields = ("agent", "session_id")
    ordering = ("-session_ended_at",)


class ApiTokenAddForm(forms.ModelForm[ApiToken]):
    scopes = forms.MultipleChoiceField(choices=ApiToken.Scope.choices, widget=forms.CheckboxSelectMultiple)

    class Meta:
        model = ApiToken
        fields = ("name", "scopes", "expires_at", "patient")

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        # The rule create_api_token enforces, checked here too so the error sits by the field.
        if cleaned.get("patient") is not None and set(cleaned.get("scopes") or ()) != {ApiToken.Scope.READ}:
            self.add_error("scopes", "A patient-bound token may carry only the reasoning.read scope.")
        return cleaned


@admin.register(ApiToken)
class ApiTokenAdmin(ServiceAdmin):
    """Add creates a token through the service; existing tokens are read-only; revoke is an action.

    The token hash is never shown. The raw token is shown once, in the success message.
    """

    list_display = ("name", "prefix", "scopes", "bound_patient", "created_at", "expires_at", "revoked_at")
    list_filter = (("revoked_at", admin.EmptyFieldListFilter),)
    search_fields = ("name",)
    ordering = ("-created_at",)
    raw_id_fields = ("patient",)
    actions = ("revoke_selected",)
    add_fields = ("name", "scopes", "expires_at", "patient")
    detail_fields = ("name", "prefix", "scopes", "patient", "created_at", "expires_at", "revoked_at")

    def get_fields(self, request: HttpRequest, obj: ApiToken | None = None) -> tuple[str, ...]:
        return self.add_fields if obj is None else self.detail_fields

    def get_form(
        self, request: HttpRequest, obj: ApiToken | None = None, change: bool = False, **kwargs: Any
    ) -> type[forms.ModelForm[ApiToken]]:
        if obj is None:
            kwargs["form"] = ApiTokenAddForm
        return super().get_form(request, obj, change, **kwargs)

    @admin.display(description="patient")
    def bound_patient(self, obj: ApiToken) -> uuid.UUID | None:
        # The id, not str(patient): no per-row query, and no PHI row loaded for a list.
        return obj.patient_id

    def save_model(self, request: HttpRequest, obj: ApiToken, form: forms.ModelForm[ApiToken], change: bool) -> None:
        # Only the add form gets here: without change permission a POST to a token is a 403.
        data = form.cleaned_data
        patient = data.get("patient")
        token, raw = tokens.create_api_token(
            name=data["name"],
            scopes=data["scopes"],
            actor=self.actor(request),
            expires_at=data.get("expires_at"),
            patient_id=patient.pk if patient is not None else None,
        )
        self.adopt(obj, token)
        self.message_user(request, f"Token created: {raw} — copy it now, it will not be shown again.", messages.SUCCESS)

    @admin.action(description="Revoke selected tokens", permissions=["revoke"])
    def revoke_selected(self, request: HttpRequest, queryset: QuerySet[ApiToken]) -> None:
        actor = self.actor(request)
        revoked = 0
        for name in queryset.filter(revoked_at__isnull=True).values_list("name", flat=True):
            try:
                tokens.revoke_api_token(name=name, actor=actor)
            except Conflict:
                continue  # revoked meanwhile by someone else
            revoked += 1
        skipped = queryset.count() - revoked
        message = f"Revoked {revoked} token(s)."
        if skipped:
            message += f" {skipped} already revoked."
        self.message_user(request, message, messages.SUCCESS)

    def has_revoke_permission(self, request: HttpRequest) -> bool:
        # Revoking is the one change a token admits, so it takes Django's change permission.
        codename = get_permission_codename("change", self.opts)
        return request.user.has_perm(f"{self.opts.app_label}.{codename}")

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
