"""The patient's own pages."""

from __future__ import annotations

from django.urls import path

from patients import views

urlpatterns = [
    path("dashboard/profile", views.profile_page, name="patient-profile"),
    path("dashboard/profile/consent", views.consent_toggle, name="patient-consent-toggle"),
]
