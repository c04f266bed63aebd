"""Admin page for patients: PHI masked everywhere except a superuser's detail page.

* Lists never load the encrypted columns; they hold ciphertext in the database, so the
  search is by exact patient id only.
* A superuser's detail page shows the PHI (read-only); everyone else sees "•••",
  which means "hidden", not "present".
* Consent is the one editable field, changed through ``set_reasoning_read_consent``.
  There is no audited service for editing PHI, so the admin does not edit it.
* Adding a patient calls ``create_patient`` (login plus patient, audited), like the
  ``create_patient`` command.
"""

from __future__ import annotations

import uuid
from typing import Any

from django import forms
from django.contrib import admin
from django.contrib.auth import get_user_model, password_validation
from django.contrib.auth.validators import UnicodeUsernameValidator
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse

from audit.admin import ServiceAdmin
from patients.models import Patient
from patients.services import create_patient, record_phi_view, set_reasoning_read_consent

PHI_FIELDS = ("name", "date_of_birth", "mrn", "phone", "email")
MASK = "•••"


def shows_phi(request: HttpRequest) -> bool:
    return request.user.is_superuser


class PatientAddForm(forms.ModelForm[Patient]):
    username = forms.CharField(max_length=150, validators=[UnicodeUsernameValidator()], help_text="The login.")
    password = forms.CharField(widget=forms.PasswordInput, strip=False)

    class Meta:
        model = Patient
        fields = (*PHI_FIELDS, "reasoning_read_consent")

    def clean_username(self) -> str:
        username: str = self.cleaned_data["username"]
        # create_patient refuses a taken name too; checked here so the error sits by the field.
        if get_user_model().objects.filter(username=username).exists():
            raise forms.ValidationError("A user with this username already exists.")
        return username

    def clean_password(self) -> str:
        password: str = self.cleaned_data["password"]
        password_validation.validate_password(password)
        return password


@admin.register(Patient)
class PatientAdmin(ServiceAdmin):
    list_display = ("id", "masked_name", "masked_mrn", "reasoning_read_consent", "created_at")
    list_filter = ("reasoning_read_consent",)
    search_fields = ("id",)
    search_help_text = "Exact patient id. Names and MRNs are encrypted and cannot be searched."
    ordering = ("-created_at",)
    add_fields = ("username", "password", *PHI_FIELDS, "reasoning_read_consent")
    phi_fields = ("id", "user", *PHI_FIELDS, "reasoning_read_consent", "consent_changed_at", "created_at")
    masked_fields = (
        "id",
        "masked_name",
        "masked_date_of_birth",
        "masked_mrn",
        "masked_phone",
        "masked_email",
        "reasoning_read_consent",
        "consent_changed_at",
        "created_at",
    )

    def get_queryset(self, request: HttpRequest) -> QuerySet[Patient]:
        # PHI is decrypted only where it is shown; get_object loads it for a superuser.
        return super().get_queryset(request).defer(*PHI_FIELDS)

    def get_object(self, request: HttpRequest, object_id: str, from_field: str | None = None) -> Patient | None:
        patient: Patient | None = super().get_object(request, object_id, from_field)
        if patient is not None and shows_phi(request):
            patient.refresh_from_db(fields=PHI_FIELDS)
        return patient

    def change_view(
        self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        response = super().change_view(request, object_id, form_url, extra_context)
        if request.method == "GET" and shows_phi(request) and response.status_code == 200:
            record_phi_view(uuid.UUID(str(object_id)), actor=self.actor(request))
        return response

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Patient], search_term: str
    ) -> tuple[QuerySet[Patient], bool]:
        term = search_term.strip()
        if not term:
            return queryset, False
        try:
            return queryset.filter(pk=uuid.UUID(term)), False
        except ValueError:
            return queryset.none(), False

    def get_fields(self, request: HttpRequest, obj: Patient | None = None) -> tuple[str, ...]:
        if obj is None:
            return self.add_fields
        return self.phi_fields if shows_phi(request) else self.masked_fields

    def get_readonly_fields(self, request: HttpRequest, obj: Patient | None = None) -> tuple[str, ...]:
        if obj is None:
            return ()
        return tuple(field for field in self.get_fields(request, obj) if field != "reasoning_read_consent")

    def get_form(
        self, request: HttpRequest, obj: Patient | None = None, change: bool = False, **kwargs: Any
    ) -> type[forms.ModelForm[Patient]]:
        if obj is None:
            kwargs["form"] = PatientAddForm
        return super().get_form(request, obj, change, **kwargs)

    def save_model(self, request: HttpRequest, obj: Patient, form: forms.ModelForm[Patient], change: bool) -> None:
        if change:
            # The form edits nothing but consent.
            if "reasoning_read_consent" in form.changed_data:
                set_reasoning_read_consent(obj.pk, granted=obj.reasoning_read_consent, actor=self.actor(request))
            return
        data = form.cleaned_data
        patient = create_patient(
            username=data["username"],
            password=data["password"],
            actor=self.actor(request),
            name=data["name"],
            date_of_birth=data["date_of_birth"],
            mrn=data["mrn"],
            phone=data["phone"],
            email=data["email"],
            consent=data["reasoning_read_consent"],
        )
        self.adopt(obj, patient)

    @admin.display(description="name")
    def masked_name(self, obj: Patient) -> str:
        return MASK

    @admin.display(description="date of birth")
    def masked_date_of_birth(self, obj: Patient) -> str:
        return MASK

    @admin.display(description="MRN")
    def masked_mrn(self, obj: Patient) -> str:
        return MASK

    @admin.display(description="phone")
    def masked_phone(self, obj: Patient) -> str:
        return MASK

    @admin.display(description="email")
    def masked_email(self, obj: Patient) -> str:
        return MASK

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # Flows, tokens and the audit trail point at patients.
        return False
