"""Who a request speaks for, per audience. Views and pages ask here, nowhere else."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.http import HttpRequest
from rest_framework import exceptions
from rest_framework.permissions import SAFE_METHODS, BasePermission
from rest_framework.request import Request
from rest_framework.throttling import BaseThrottle

from core import throttling
from core.throttling import Rate
from patients.access import ACCESS_FIELDS, patient_for_user
from patients.models import Patient
from reasoning.auth import TokenPrincipal
from reasoning.models import ApiToken

# Where patient_of keeps its answer on the request.
_PATIENT = "_rft_patient"


def patient_of(request: Request | HttpRequest) -> Patient | None:
    """The patient a request speaks for: a patient-bound token, or the patient's session.

    Read once per request: the narrative throttle and the view both ask.
    """
    if hasattr(request, _PATIENT):
        cached: Patient | None = getattr(request, _PATIENT)
        return cached
    user = request.user
    if isinstance(user, TokenPrincipal):
        patient_id = user.token.patient_id
        patient = Patient.objects.only(*ACCESS_FIELDS).filter(pk=patient_id).first() if patient_id else None
    else:
        patient = patient_for_user(user)
    setattr(request, _PATIENT, patient)
    return patient


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


class _CountingThrottle(BaseThrottle):
    """A DRF throttle on ``core.throttling``'s shared counter: DRF answers a refusal with 429,
    ``Retry-After`` and ``{"detail": ...}`` (the project's error shape)."""

    retry_after: int | None = None

    def wait(self) -> float | None:
        return self.retry_after

    def count(self, keys: list[str], rate: Rate | None) -> bool:
        if rate is None:
            return True
        verdict = throttling.hit(keys, rate)
        self.retry_after = verdict.retry_after
        return verdict.allowed


class WriteRateThrottle(_CountingThrottle):
    """``API_WRITE_RATE_LIMIT`` write requests per token (every unsafe method of every API route;
    the default throttle of every view). Reads and session callers are not counted here."""

    def allow_request(self, request: Request, view: Any) -> bool:
        user = request.user
        if request.method in SAFE_METHODS or not isinstance(user, TokenPrincipal):
            return True
        return self.count([f"write:token:{user.token.pk}"], settings.API_WRITE_RATE_LIMIT)


class NarrativeReadThrottle(_CountingThrottle):
    """``NARRATIVE_RATE_LIMIT`` (30 per 5 minutes) narrative reads per caller (token or user) and
    per patient (all of a patient's tokens and sessions together), against log-mining.

    The patient is the caller's own (``patient_of``), not the flow's: reading someone else's
    flow ids (404s) spends the reader's budget, never the other patient's.
    """

    def allow_request(self, request: Request | HttpRequest, view: Any) -> bool:
        user = request.user
        if isinstance(user, TokenPrincipal):
            keys = [f"narrative:token:{user.token.pk}"]
            patient_id = user.token.patient_id
        elif user is not None and user.is_authenticated:
            keys = [f"narrative:user:{user.pk}"]
            patient = patient_of(request)
            patient_id = patient.pk if patient else None
        else:
            return True
        if patient_id is not None:
            keys.append(f"narrative:patient:{patient_id}")
        return self.count(keys, settings.NARRATIVE_RATE_LIMIT)


_UNSAFE = ("post", "put", "patch", "delete")
RATE_LIMITED = "Past the token's write rate limit (API_WRITE_RATE_LIMIT): wait `Retry-After` seconds, then retry."
RETRY_AFTER_HEADER = {"description": "Seconds to wait before retrying.", "schema": {"type": "integer", "minimum": 1}}


def document_write_rate_limit(result: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    """drf-spectacular hook: every token-authenticated write operation documents the 429 that
    ``WriteRateThrottle`` (the default throttle of every view) may answer, unless it says more."""
    for operations in result.get("paths", {}).values():
        for method, operation in operations.items():
            if method not in _UNSAFE or not any("bearerAuth" in entry for entry in operation.get("security", [])):
                continue
            operation.setdefault("responses", {}).setdefault(
                "429",
                {
                    "description": RATE_LIMITED,
                    "headers": {"Retry-After": RETRY_AFTER_HEADER},
                    "content": {"application/json": {"schema": {"type": "object", "additionalProperties": {}}}},
                },
            )
    return result
