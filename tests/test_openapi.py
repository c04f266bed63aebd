"""The OpenAPI document (/api/schema/) and the Swagger UI page (/api/docs/)."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.contrib.staticfiles import finders
from django.core.management import call_command
from django.urls import URLPattern
from rest_framework.test import APIClient

from reasoning import urls as reasoning_urls

SCHEMA_URL = "/api/schema/?format=json"


@pytest.fixture(scope="module")
def schema() -> dict[str, Any]:
    response = APIClient().get(SCHEMA_URL)
    assert response.status_code == 200, response.content
    document: dict[str, Any] = response.json()
    return document


def openapi_path(pattern: URLPattern) -> str:
    """``api/reasoning/flows/<str:flow_id>`` -> ``/api/reasoning/flows/{flow_id}``."""
    return "/" + re.sub(r"<(?:\w+:)?(\w+)>", r"{\1}", str(pattern.pattern))


def view_methods(pattern: URLPattern) -> set[str]:
    view_class = pattern.callback.view_class  # type: ignore[attr-defined]
    return {m for m in view_class.http_method_names if m not in ("options", "head") and hasattr(view_class, m)}


def routes() -> list[tuple[str, set[str]]]:
    return [(openapi_path(p), view_methods(p)) for p in reasoning_urls.urlpatterns if isinstance(p, URLPattern)]


def test_schema_is_served_without_a_token(db: None) -> None:
    response = APIClient().get(SCHEMA_URL)

    assert response.status_code == 200
    document = response.json()
    assert document["openapi"].startswith("3.")
    assert document["info"]["title"] == settings.SPECTACULAR_SETTINGS["TITLE"]


@pytest.mark.parametrize(("path", "methods"), routes(), ids=[path for path, _ in routes()])
def test_schema_describes_every_reasoning_route_with_its_methods(
    schema: dict[str, Any], path: str, methods: set[str]
) -> None:
    assert path in schema["paths"], f"{path} missing from the OpenAPI document"
    described = {m for m in schema["paths"][path] if m != "parameters"}
    assert described == methods


@pytest.mark.parametrize(
    ("path", "method"),
    [
        ("/api/reasoning/flows", "post"),
        ("/api/reasoning/flows/{flow_id}", "patch"),
        ("/api/reasoning/flows/{flow_id}/steps", "post"),
        ("/admin/v1/reasoning/flows", "get"),
        ("/admin/v1/reasoning/flows/{flow_id}", "get"),
    ],
)
def test_schema_describes_the_core_flow_routes(schema: dict[str, Any], path: str, method: str) -> None:
    operation = schema["paths"][path][method]

    assert operation.get("summary")
    assert {"bearerAuth": []} in operation["security"]
    assert "401" in operation["responses"]
    assert "403" in operation["responses"]
    if "{flow_id}" in path:
        parameters = {p["name"]: p for p in operation.get("parameters", [])}
        assert parameters["flow_id"]["in"] == "path"
        assert "404" in operation["responses"]


@pytest.mark.parametrize(
    ("path", "method", "success"),
    [
        ("/api/reasoning/flows", "post", "201"),
        ("/api/reasoning/flows/{flow_id}", "patch", "200"),
        ("/api/reasoning/flows/{flow_id}/steps", "post", "201"),
    ],
)
def test_write_routes_document_their_body_example_and_conflict(
    schema: dict[str, Any], path: str, method: str, success: str
) -> None:
    operation = schema["paths"][path][method]

    assert success in operation["responses"]
    assert "400" in operation["responses"]
    assert "409" in operation["responses"]
    body = operation["requestBody"]["content"]["application/json"]
    assert body["schema"]["$ref"].startswith("#/components/schemas/")
    assert body.get("examples"), "write routes carry a request example"


def test_admin_list_documents_its_query_parameters(schema: dict[str, Any]) -> None:
    parameters = {p["name"]: p for p in schema["paths"]["/admin/v1/reasoning/flows"]["get"]["parameters"]}

    assert {"trace_id", "flow_state", "limit"} <= set(parameters)
    assert set(parameters["flow_state"]["schema"]["enum"]) == {"active", "completed", "aborted"}


def test_schema_declares_the_bearer_security_scheme(schema: dict[str, Any]) -> None:
    scheme = schema["components"]["securitySchemes"]["bearerAuth"]

    assert scheme["type"] == "http"
    assert scheme["scheme"] == "bearer"


class _AssetCollector(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.assets: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        wanted = {"script": "src", "link": "href"}.get(tag)
        for name, value in attrs:
            if name == wanted and value:
                self.assets.append(value)


def test_docs_page_uses_only_local_static_assets(db: None) -> None:
    response = APIClient().get("/api/docs/")

    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/html")
    collector = _AssetCollector()
    collector.feed(response.content.decode())
    assert any(a.endswith(".js") for a in collector.assets), "the Swagger UI bundle is referenced"
    static_prefix = "/" + settings.STATIC_URL.strip("/") + "/"
    for asset in collector.assets:
        assert not re.match(r"^(https?:)?//", asset), f"CDN asset: {asset}"
        assert asset.startswith(static_prefix), asset
        assert finders.find(asset.removeprefix(static_prefix)) is not None, f"{asset} is not an installed file"


def test_schema_generates_without_warnings_and_validates(tmp_path: Path) -> None:
    # What CI of a typed API runs: a warning here means generated clients get odd names
    # or wrong types (e.g. a colliding enum renamed to "FlowState9caEnum").
    call_command("spectacular", "--fail-on-warn", "--validate", "--file", str(tmp_path / "schema.yaml"))
