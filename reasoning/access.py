"""Who a request speaks for, per audience. Views and pages ask here, nowhere else."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from rest_framework import exceptions
from rest_framework.permissions import BasePermission
from rest_framework.request import Request
from rest_framework.throttling import SimpleRateThrottle

from patients.access import ACCESS_FIELDS, patient_for_user
from patients.models import Patient
from reasoning.auth import TokenPrincipal
from reasoning.models import ApiToken


def patient_of(request: Request | HttpRequest) -> Patient | None:
    """The patient a request speaks for: a patient-bound token, or the patient's session."""
    user = request.user
    if isinstance(user, TokenPrincipal):
        patient_id = user.token.patient_id
        return Patient.objects.only(*ACCESS_FIELDS).filter(pk=patient_id).first() if patient_id else None
    return patient_for_user(user)


class CanReadNarrative(BasePermission):
    """A ``reasoning.read`` token, or any logged-in session (patients log in to read)."""

    message = "This route needs the 'reasoning.read' scope."

    def has_permission(self, request: Request, view: Any) -> bool:
        user = request.user
        if isinstance(user, TokenPrincipal):
            return user.has_scope(ApiToken.Scope.READ)
        if user is not None and user.is_authenticated:
            return True
        raise exceptions.NotAuthenticated()


class NarrativeReadThrottle(SimpleRateThrottle):
    """30 narrative reads per 5 minutes per caller (token or user), against log-mining.

    Counts live in the shared (database) cache, so every web process sees the same
    history; the check-then-write is not atomic, so a burst may slip one or two reads
    past the limit.
    """

    scope = "narrative"
    rate = "30/5m"

    def parse_rate(self, rate: str | None) -> tuple[int | None, int | None]:
        # DRF reads only the unit's first letter ("5m" would be "5"); accept "<n>/<k><unit>".
        if rate is None:
            return None, None
        count, _, period = rate.partition("/")
        multiplier = int(period[:-1] or 1)
        seconds = {"s": 1, "m": 60, "h": 3600, "d": 86400}[period[-1]]
        return int(count), multiplier * seconds

    def get_cache_key(self, request: Request, view: Any) -> str | None:
        user = request.user
        if isinstance(user, TokenPrincipal):
            ident = f"token:{user.token.pk}"
        elif user is not None and user.is_authenticated:
            ident = f"user:{user.pk}"
        else:
            return None
        return self.cache_format % {"scope": self.scope, "ident": ident}
