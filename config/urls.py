from __future__ import annotations

from django.contrib import admin
from django.urls import include, path, re_path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from config.api import not_found

urlpatterns = [
    path("api/schema/", SpectacularAPIView.as_view(), name="api-schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="api-schema"), name="api-docs"),
    path("", include("reasoning.urls")),
    # Unknown API paths under /admin/v1/ are JSON 404s, not Django admin's login redirect.
    re_path(r"^admin/v1/", not_found),
    path("admin/", admin.site.urls),
]

handler404 = "config.api.not_found"
handler500 = "config.api.server_error"
