from __future__ import annotations

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.contrib.staticfiles.storage import staticfiles_storage
from django.urls import include, path, re_path
from django.views.generic import RedirectView
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView

from core.api import not_found
from reasoning.dashboard.page import dashboard_home
from reasoning.health import healthz

urlpatterns = [
    path("healthz", healthz, name="healthz"),
    # Browsers ask for /favicon.ico whatever the page says: send them to the icon.
    path("favicon.ico", RedirectView.as_view(url=staticfiles_storage.url("favicon.svg"), permanent=True)),
    path("api/schema/", SpectacularAPIView.as_view(), name="api-schema"),
    # The split view serves Swagger UI's init script as a file (?script): no inline script under the CSP.
    path(
        "api/docs/",
        SpectacularSwaggerSplitView.as_view(url_name="api-schema", template_name="api_docs/swagger_ui.html"),
        name="api-docs",
    ),
    path("", include("audit.urls")),
    path("", include("reasoning.urls")),
    path("", include("pathways.urls")),
    path("", include("research_backlog.urls")),
    path("", include("research_backlog.page_urls")),
    path("", include("pathways.page_urls")),
    path("", include("reasoning.page_urls")),
    path("", include("patients.urls")),
    path("dashboard/", dashboard_home, name="dashboard"),
    # The address `make run` prints: send people to where a login lands.
    path("", RedirectView.as_view(pattern_name="dashboard"), name="home"),
    path("accounts/login/", auth_views.LoginView.as_view(redirect_authenticated_user=True), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(next_page="login"), name="logout"),
    # Unknown API paths under /admin/v1/ are JSON 404s, not Django admin's login redirect.
    re_path(r"^admin/v1/", not_found),
    path("admin/", admin.site.urls),
]

handler404 = "core.api.not_found"
handler500 = "core.api.server_error"
