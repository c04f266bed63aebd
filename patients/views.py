"""The patient's profile page: their public id and the ``reasoning.read`` consent toggle.

The toggle is a plain form (POST, CSRF-protected, redirect back) that htmx upgrades to
swap the toggle fragment, and the "Your decisions" panel out of band (its links follow
the consent). It posts the *wanted* state, not "flip", so a double
submit or a stale tab cannot undo the patient's choice.
"""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_POST, require_safe
from django_htmx.middleware import HtmxDetails

from core.actors import user_actor
from core.panels import page_context
from patients.access import patient_for_user
from patients.services import set_reasoning_read_consent

# The form's "consent" values and the state each one asks for.
CONSENT_CHOICES = {"on": True, "off": False}


class HtmxHttpRequest(HttpRequest):
    htmx: HtmxDetails


@login_required
@require_safe
def profile_page(request: HttpRequest) -> HttpResponse:
    patient = patient_for_user(request.user)
    if patient is None:
        return render(request, "patients/no_patient.html")
    # Panels other apps own (the reasoning app's "Your decisions"): core.panels.
    panels, status = page_context("patient-profile", request)
    return render(request, "patients/profile.html", {"patient": patient, **panels}, status=status)


@login_required
@require_POST
def consent_toggle(request: HtmxHttpRequest) -> HttpResponse:
    patient = patient_for_user(request.user)
    if patient is None:
        return render(request, "patients/no_patient.html", status=403)
    granted = CONSENT_CHOICES.get(request.POST.get("consent", ""))
    if granted is None:
        return render(request, "patients/bad_request.html", status=400)
    set_reasoning_read_consent(patient.pk, granted=granted, actor=user_actor(request.user))
    patient.reasoning_read_consent = granted
    confirmation = (
        "Reading the reasoning behind decisions is now on."
        if granted
        else "Reading the reasoning behind decisions is now off."
    )
    if request.htmx:
        # The toggle, and the profile's other panels out of band: "Your decisions" links
        # its narratives only while consent is on, so it changes with the toggle.
        panels, _ = page_context("patient-profile", request)
        context = {"patient": patient, "confirmation": confirmation, "oob": True, **panels}
        return render(request, "patients/_consent_changed.html", context)
    messages.success(request, confirmation)
    # 303: the browser follows with a GET, so a reload does not re-post the form.
    return HttpResponseRedirect(reverse("patient-profile"), status=303)
