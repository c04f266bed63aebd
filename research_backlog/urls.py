from __future__ import annotations

from django.urls import path

from research_backlog import api

urlpatterns = [
    path("admin/v1/reasoning/research/deeper-request", api.DeeperRequestView.as_view(), name="research-deeper-request"),
    path("admin/v1/reasoning/research/backlog", api.BacklogStatusView.as_view(), name="research-backlog"),
    path("admin/v1/reasoning/research/backlog/next", api.BacklogNextView.as_view(), name="research-backlog-next"),
    path(
        "admin/v1/reasoning/research/backlog/<str:request_id>/complete",
        api.BacklogCompleteView.as_view(),
        name="research-backlog-complete",
    ),
    path("admin/v1/reasoning/claims-pending-review", api.ClaimReviewCollectionView.as_view(), name="claim-reviews"),
    path(
        "admin/v1/reasoning/claims-pending-review/<str:review_id>",
        api.ClaimReviewDetailView.as_view(),
        name="claim-review-detail",
    ),
]
