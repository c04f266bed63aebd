"""Security headers on every answer (core/security.py, django-csp; docs/api.md, "Security headers").

Every URL pattern is read from the URL configuration and requested as the persona it is for
(an operator login for pages and the admin, an admin token for /admin/v1 and /audit, the agent's
token for the write API, the patient for the narrative), so a new route is covered without
editing this file. Whatever the status (200, 400, 403, 404, 405), the answer carries the headers.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from cryptography.fernet import Fernet
from csp.constants import NONCE
from csp.decorators import csp_exempt, csp_update
from csp.exceptions import CSPNonceError
from csp.utils import build_policy
from django.conf import settings
from django.contrib.auth.models import User
from django.http import HttpRequest, HttpResponse, HttpResponseBase
from django.test import Client, RequestFactory, override_settings
from django.urls import URLPattern, URLResolver, get_resolver
from rest_framework.test import APIClient

from core.security import ContentSecurityPolicyMiddleware, SecurityHeadersMiddleware
from patients.models import Patient
from tests.factories import PASSWORD, logged_in, make_flow
from tests.security_headers import CSP_DIRECTIVES, assert_security_headers, csp_directives

pytestmark = pytest.mark.django_db

ROOT = Path(__file__).resolve().parents[1]

FORM = "application/x-www-form-urlencoded"


# --- The routes ----------------------------------------------------------------------------


def _concrete(regex: str) -> str:
    """A path a regex pattern matches: each named group's first alternative (``.*``: a word)."""

    def group(found: re.Match[str]) -> str:
        body = found.group(1)
        return "nowhere/" if body == ".*" else body.split("|")[0]

    return re.sub(r"\(\?P<\w+>([^)]*)\)", group, regex).replace("^", "").replace("$", "")


def routes() -> list[tuple[str, str]]:
    """(path pattern, method) for every URL pattern: a class view's methods, else GET and POST."""
    found: list[tuple[str, str]] = []

    def walk(patterns: list[Any], prefix: str) -> None:
        for entry in patterns:
            if isinstance(entry, URLResolver):
                walk(entry.url_patterns, prefix + _concrete(str(entry.pattern)))
            elif isinstance(entry, URLPattern):
                path = "/" + prefix + _concrete(str(entry.pattern))
                view_class = getattr(entry.callback, "view_class", None)
                if view_class is None:
                    methods = ["get", "post"]
                else:
                    methods = [
                        m
                        for m in view_class.http_method_names
                        if m not in ("options", "head") and hasattr(view_class, m)
                    ]
                found.extend((path, method) for method in methods)

    walk(get_resolver().url_patterns, "")
    return found


ROUTES = routes()


def test_the_route_list_covers_pages_api_and_admin() -> None:
    # A broken walk would make the parametrized test below vacuous.
    paths = {path for path, _ in ROUTES}
    assert len(paths) >= 150, len(paths)
    for expected in ("/healthz", "/api/docs/", "/dashboard/profile", "/admin/", "/admin/v1/reasoning/stats"):
        assert expected in paths


def fill(path: str, flow_id: uuid.UUID) -> str:
    """Put a value into every path parameter (the patient's flow id where an id is wanted)."""
    path = re.sub(r"<int:\w+>", "1", path)
    path = re.sub(r"<path:(content_type_id|object_id)>", "1", path)
    path = re.sub(r"<path:trace_id>", "trace-1", path)
    path = re.sub(r"<str:agent>", "researcher", path)
    return re.sub(r"<(?:\w+:)?\w+>", str(flow_id), path)


def persona(path: str, method: str) -> str:
    """Who requests ``path``: the one it is for."""
    if path.startswith(("/admin/v1/", "/audit/")):
        return "admin-token"
    if path == "/api/reasoning/flows/<str:flow_id>" and method == "get":
        return "patient-app"  # the narrative
    if path.startswith(("/api/reasoning/", "/v1/")):
        return "agent-token"
    if path.startswith(("/dashboard/profile", "/dashboard/reasoning/")):
        return "patient"
    if path.startswith(("/dashboard/", "/admin/")):
        return "operator"
    return "anonymous"


@pytest.fixture
def narrative_flow(consenting_patient: Patient) -> uuid.UUID:
    """A closed, guard-passing flow about Ada: her narrative (page and API) is a 200."""
    return make_flow(consenting_patient)


@pytest.fixture
def client_as(
    request: pytest.FixtureRequest, make_token: Callable[..., str], client_for: Callable[[str | None], APIClient]
) -> Callable[[str], Client]:
    def make(who: str) -> Client:
        if who == "admin-token":
            return client_for(make_token("reasoning.admin", "reasoning.cot.read"))
        if who == "agent-token":
            return client_for(make_token("reasoning.write", name="agent"))
        if who == "patient-app":
            patient = request.getfixturevalue("consenting_patient")
            return client_for(make_token("reasoning.read", name="ada-app", patient_id=patient.pk))
        if who == "patient":
            return logged_in(request.getfixturevalue("consenting_patient"))
        if who == "operator":
            return logged_in(request.getfixturevalue("operator_user"))
        return APIClient()

    return make


def test_every_route_answers_with_the_security_headers(
    client_as: Callable[[str], Client], narrative_flow: uuid.UUID
) -> None:
    # One test walks every route, so the database set-up is paid once, and a failure lists every
    # route that lacks a header. A persona's client is made once, a login again after a logout.
    failures: list[str] = []
    clients: dict[str, Client] = {}
    for path, method in ROUTES:
        who = persona(path, method)
        if who not in clients:
            clients[who] = client_as(who)
        client = clients[who]
        client.raise_request_exception = False
        url = fill(path, narrative_flow)

        # An API client sends an empty JSON object; a browser session an empty form.
        body, content_type = ("{}", "application/json") if isinstance(client, APIClient) else ("", FORM)
        response = client.generic(method.upper(), url, body, content_type)
        if "logout" in path:
            del clients[who]
        try:
            assert_security_headers(response, path)
        except AssertionError as error:
            failures.append(f"{method.upper()} {path}: {error}")
    assert not failures, "\n".join(failures)


def test_the_narrative_page_and_api_are_served_and_not_stored(
    patient_client: Client, patient_app: APIClient, narrative_flow: uuid.UUID
) -> None:
    # The walk above gets 200s here too; this says so, so that a 404 cannot pass for coverage.
    for client, url in (
        (patient_client, f"/dashboard/reasoning/{narrative_flow}"),
        (patient_app, f"/api/reasoning/flows/{narrative_flow}"),
    ):
        response = client.get(url)
        assert response.status_code == 200, (url, response.content[:200])
        assert response["Cache-Control"] == "no-store"
        assert_security_headers(response, url)


def test_operator_pages_and_the_admin_are_served_and_not_stored(operator_client: Client) -> None:
    for url in (
        "/dashboard/admin/reasoning/",
        "/dashboard/admin/reasoning/flows",
        "/admin/",
        "/admin/reasoning/reasoningflow/",
    ):
        response = operator_client.get(url)
        assert response.status_code == 200, url
        assert_security_headers(response, url)


def test_a_refusal_from_an_inner_middleware_carries_the_headers(agent: APIClient) -> None:
    # core.middleware.ChunkedBodyMiddleware answers a raw chunked body itself (411), before the views.
    response = agent.generic("POST", "/api/reasoning/flows", "{}", "application/json", HTTP_TRANSFER_ENCODING="chunked")

    assert response.status_code == 411
    assert_security_headers(response, "/api/reasoning/flows")


def test_an_unknown_path_carries_the_headers(anonymous: APIClient) -> None:
    response = anonymous.get("/no/such/page")

    assert response.status_code == 404
    assert_security_headers(response, "/no/such/page")


def test_static_files_get_no_no_store() -> None:
    # WhiteNoise answers /static/ with its own cache lifetime (a fresh checkout has no
    # collected files to serve, so the middleware is called directly).
    response = SecurityHeadersMiddleware(lambda request: HttpResponse("body {}"))(
        RequestFactory().get("/static/css/site.css")
    )

    assert "Cache-Control" not in response
    assert response["X-Content-Type-Options"] == "nosniff"
    assert response["Permissions-Policy"].startswith("accelerometer=()")


def test_a_cache_control_a_view_set_is_kept() -> None:
    def view(request: HttpRequest) -> HttpResponse:
        response = HttpResponse("public")
        response["Cache-Control"] = "max-age=60"
        return response

    response = SecurityHeadersMiddleware(view)(RequestFactory().get("/dashboard/anything"))

    assert response["Cache-Control"] == "max-age=60"
    assert response["Permissions-Policy"].startswith("accelerometer=()")


def _with_csp(view: Callable[[HttpRequest], HttpResponseBase], request: HttpRequest | None = None) -> HttpResponse:
    request = request or RequestFactory().get("/dashboard/anything")
    response = ContentSecurityPolicyMiddleware(view)(request)
    assert isinstance(response, HttpResponse)
    return response


def test_the_policy_built_once_is_the_one_the_library_builds() -> None:
    request = RequestFactory().get("/dashboard/anything")
    response = _with_csp(lambda request: HttpResponse("page"), request)

    assert response["Content-Security-Policy"] == build_policy()
    assert csp_directives(response["Content-Security-Policy"]) == CSP_DIRECTIVES
    with pytest.raises(CSPNonceError):  # a nonce asked for once the header is written
        str(request.csp_nonce)  # type: ignore[attr-defined]


def test_a_view_that_brings_its_own_policy_or_uses_a_nonce_gets_it() -> None:
    @csp_update({"img-src": ["https://images.example"]})
    def updated(request: HttpRequest) -> HttpResponse:
        return HttpResponse("page")

    def with_nonce(request: HttpRequest) -> HttpResponse:
        return HttpResponse(f"<script nonce={request.csp_nonce}></script>")  # type: ignore[attr-defined]

    @csp_exempt()
    def exempt(request: HttpRequest) -> HttpResponse:
        return HttpResponse("page")

    assert "https://images.example" in csp_directives(_with_csp(updated)["Content-Security-Policy"])["img-src"]
    assert "Content-Security-Policy" not in _with_csp(exempt)
    with_nonces = {"DIRECTIVES": {**settings.CONTENT_SECURITY_POLICY["DIRECTIVES"], "script-src": ["'self'", NONCE]}}
    with override_settings(CONTENT_SECURITY_POLICY=with_nonces):
        nonced = _with_csp(with_nonce)
        plain = _with_csp(lambda request: HttpResponse("page"))
    nonce = re.search(r"nonce=([^>]+)>", nonced.content.decode())
    assert nonce and csp_directives(nonced["Content-Security-Policy"])["script-src"] == {
        "'self'",
        f"'nonce-{nonce.group(1)}'",
    }
    assert csp_directives(plain["Content-Security-Policy"])["script-src"] == {"'self'"}


def test_a_report_only_policy_goes_through_the_library() -> None:
    report_only = {"DIRECTIVES": {"default-src": ["'none'"], "report-uri": ["/csp-reports"]}}
    with override_settings(CONTENT_SECURITY_POLICY_REPORT_ONLY=report_only):
        response = _with_csp(lambda request: HttpResponse("page"))

    assert response["Content-Security-Policy-Report-Only"] == "default-src 'none'; report-uri /csp-reports"
    assert response["Content-Security-Policy"] == build_policy()


def test_healthz_keeps_never_cache(anonymous: APIClient) -> None:
    response = anonymous.get("/healthz")

    assert "no-store" in response["Cache-Control"] and "max-age=0" in response["Cache-Control"]


def test_api_docs_load_their_init_script_as_a_file(anonymous: APIClient) -> None:
    page = anonymous.get("/api/docs/").content.decode()
    assert "<style" not in page
    inline = [s for s in re.findall(r"<script([^>]*)>(.*?)</script>", page, re.S) if "src=" not in s[0] or s[1].strip()]
    assert not inline, inline

    script = anonymous.get("/api/docs/?script=")

    assert script.status_code == 200
    assert script["Content-Type"].startswith("application/javascript")
    assert "SwaggerUIBundle(" in script.content.decode()
    assert "no-store" in script["Cache-Control"]  # it carries the CSRF token


def test_pages_have_no_inline_script_or_style(operator_client: Client) -> None:
    page = operator_client.get("/dashboard/admin/reasoning/flows").content.decode()

    assert not re.search(r"<style|\sstyle=|\son[a-z]+=", page)
    assert all("src=" in attrs for attrs in re.findall(r"<script([^>]*)>", page))
    assert '"includeIndicatorStyles": false' in page


# --- DJANGO_SECURE ----------------------------------------------------------------------------

SECURE = {
    "SECURE_SSL_REDIRECT": True,
    "SECURE_REDIRECT_EXEMPT": [r"^healthz$"],
    "SECURE_HSTS_SECONDS": 31_536_000,
    "SECURE_HSTS_INCLUDE_SUBDOMAINS": True,
    "SESSION_COOKIE_SECURE": True,
    "CSRF_COOKIE_SECURE": True,
    "SESSION_COOKIE_NAME": "__Host-sessionid",
    "CSRF_COOKIE_NAME": "__Host-csrftoken",
}


@override_settings(**SECURE)
def test_secure_mode_redirects_http_to_https_but_not_the_health_check(db: None) -> None:
    client = Client()

    redirected = client.get("/dashboard/admin/reasoning/?x=1")
    probed = client.get("/healthz")

    assert redirected.status_code == 301
    assert redirected["Location"] == "https://testserver/dashboard/admin/reasoning/?x=1"
    assert_security_headers(redirected, "/dashboard/admin/reasoning/")
    assert probed.status_code == 200
    assert "Strict-Transport-Security" not in probed  # never over http


@override_settings(**SECURE)
def test_secure_mode_sends_hsts_and_host_prefixed_secure_cookies(operator_user: User) -> None:
    client = Client()

    login_page = client.get("/accounts/login/", secure=True)
    logged_in_answer = client.post(
        "/accounts/login/", {"username": operator_user.username, "password": PASSWORD}, secure=True
    )

    assert login_page["Strict-Transport-Security"] == "max-age=31536000; includeSubDomains"
    csrf = login_page.cookies["__Host-csrftoken"]
    assert logged_in_answer.status_code == 302, logged_in_answer.content[:300]
    session = logged_in_answer.cookies["__Host-sessionid"]
    for cookie in (csrf, session):
        # __Host-: Secure, Path=/ and no Domain, or browsers refuse the cookie.
        assert cookie["secure"] is True
        assert cookie["path"] == "/"
        assert cookie["domain"] == ""
    assert session["httponly"] is True
    assert client.get("/dashboard/admin/reasoning/", secure=True).status_code == 200


def _settings(**env: str) -> subprocess.CompletedProcess[str]:
    """Import the settings in a fresh interpreter with ``env`` and print the HTTPS settings."""
    environ = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("DATABASE_", "RFT_TEST", "DJANGO_SECURE", "DJANGO_BEHIND"))
    }
    environ.update(
        DATABASE_URL="postgres://rft_app:a@localhost/rft",
        DJANGO_SECRET_KEY="x" * 50,
        FIELD_ENCRYPTION_KEY=Fernet.generate_key().decode(),
        **env,
    )
    names = [*SECURE, "SECURE_PROXY_SSL_HEADER"]
    code = (
        "import json; from config import settings; "
        f"print(json.dumps({{n: getattr(settings, n, None) for n in {names!r}}}))"
    )
    return subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=environ, capture_output=True, text=True, timeout=60, check=False
    )


def test_django_secure_sets_hsts_redirect_and_host_cookies() -> None:
    run = _settings(DJANGO_SECURE="1")

    assert run.returncode == 0, run.stderr
    values = json.loads(run.stdout.splitlines()[-1])
    assert values == {**SECURE, "SECURE_PROXY_SSL_HEADER": None}


def test_the_proxy_header_is_trusted_only_when_said() -> None:
    run = _settings(DJANGO_SECURE="1", DJANGO_BEHIND_TLS_PROXY="1")

    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout.splitlines()[-1])["SECURE_PROXY_SSL_HEADER"] == ["HTTP_X_FORWARDED_PROTO", "https"]


def test_without_django_secure_local_http_keeps_working() -> None:
    run = _settings()

    assert run.returncode == 0, run.stderr
    values = json.loads(run.stdout.splitlines()[-1])
    assert values["SECURE_SSL_REDIRECT"] is None and values["SECURE_HSTS_SECONDS"] is None
    assert values["SESSION_COOKIE_NAME"] is None and values["SECURE_PROXY_SSL_HEADER"] is None


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"DJANGO_SECURE": "maybe"}, "DJANGO_SECURE must be a boolean"),
        ({"DJANGO_BEHIND_TLS_PROXY": "1"}, "DJANGO_BEHIND_TLS_PROXY is set but DJANGO_SECURE is not"),
    ],
)
def test_bad_secure_settings_stop_start_up_naming_the_variable(env: dict[str, str], message: str) -> None:
    run = _settings(**env)

    assert run.returncode != 0
    assert message in run.stderr
