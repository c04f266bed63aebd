"""Admin page for the processor registry: every change asks for a reason and goes through
``services.set_status`` (audited). Rows come from the catalogue (``register``: load_demo,
``processor_set``), so the admin neither adds nor deletes them."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin
from django.http import HttpRequest

from audit.admin import ServiceAdmin
from processors.models import Processor
from processors.services import REASON_MAX, set_status


class ProcessorChangeForm(forms.ModelForm[Processor]):
    reason = forms.CharField(
        max_length=REASON_MAX,
        help_text="Why it changes (kept in the audit trail): an agreement's reference, a revocation notice. "
        "Never patient data.",
    )

    class Meta:
        model = Processor
        fields = ("status", "agreement_ref", "agreement_signed_on", "agreement_expires_on")


@admin.register(Processor)
class ProcessorAdmin(ServiceAdmin):
    form = ProcessorChangeForm
    list_display = (
        "key",
        "display_name",
        "status",
        "leaves_host",
        "agreement_ref",
        "agreement_expires_on",
        "changed_at",
    )
    list_filter = ("status", "leaves_host")
    readonly_fields = ("key", "display_name", "leaves_host", "data_categories", "changed_by", "changed_at")
    fields = (
        "key",
        "display_name",
        "leaves_host",
        "data_categories",
        "status",
        "agreement_ref",
        "agreement_signed_on",
        "agreement_expires_on",
        "reason",
        "changed_by",
        "changed_at",
    )

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def save_model(self, request: HttpRequest, obj: Processor, form: forms.ModelForm[Processor], change: bool) -> None:
        data = form.cleaned_data
        saved = set_status(
            obj.key,
            data["status"],
            actor=self.actor(request),
            reason=data["reason"],
            agreement_ref=data["agreement_ref"],
            agreement_signed_on=data["agreement_signed_on"],
            agreement_expires_on=data["agreement_expires_on"],
        )
        self.adopt(obj, saved)
