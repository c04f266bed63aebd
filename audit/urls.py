"""The verifiable audit log's routes (audit/api.py)."""

from __future__ import annotations

from django.urls import path

from audit import api

urlpatterns = [
    path("audit/v1/checkpoint", api.CheckpointView.as_view(), name="audit-checkpoint"),
    path("audit/v1/checkpoints", api.CheckpointsView.as_view(), name="audit-checkpoints"),
    path("audit/v1/public-key", api.PublicKeyView.as_view(), name="audit-public-key"),
    path("audit/v1/proof/inclusion", api.InclusionProofView.as_view(), name="audit-inclusion-proof"),
    path("audit/v1/proof/consistency", api.ConsistencyProofView.as_view(), name="audit-consistency-proof"),
    path("audit/v1/events", api.EventsView.as_view(), name="audit-events"),
    path("audit/v1/events/<int:seq>", api.EventView.as_view(), name="audit-event"),
]
