"""The access-control matrix (tests/access_matrix.py; docs/api.md, "Who may call what").

Every row of the table is requested as every persona, and the statuses are compared with the
table's; every mismatch is reported at once. The table must list every URL pattern (and every
method of an API view), so a new route cannot ship without saying who may call it; and the
table in docs/api.md must be the one ``scripts/access_table.py`` renders from it.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode, urlsplit

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import User
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver, resolve
from drf_spectacular.generators import SchemaGenerator
from rest_framework.views import APIView

from audit.chain import chain_all
from audit.checkpoints import sign_checkpoint
from audit.models import AuditEvent
from pathways.services import reuse_pathway
from patients.models import Patient
from patients.services import create_patient
from reasoning.models import ReasoningFlow
from tests.access_matrix import LOGIN_REDIRECT, PERSONAS, ROWS, Expected, Row
from tests.factories import PASSWORD, make_flow, make_pathway, make_request, make_review
from tests.security_headers import assert_security_headers

pytestmark = pytest.mark.django_db

ROOT = Path(__file__).resolve().parents[1]
FORM = "application/x-www-form-urlencoded"
SESSION = "matrix-session-1"
LOGIN_PAGES = (settings.LOGIN_URL, "/admin/login/")


class World:
    """The records the rows name, and a fresh client per persona and request.

    Records a request changes (a flow it closes, a claim it resolves, a reuse it undoes) are made
    anew for every request, so each persona meets the same state whatever ran before; the
    others (patient A's decision, its trace, the session) are made once.
    """

    def __init__(self, tokens: dict[str, str], logins: dict[str, User]) -> None:
        self.tokens = tokens
        self.logins = logins
        operator = logins["operator"]
        self.operator_actor = f"user:{operator.pk}"
        patient_a = Patient.objects.get(user=logins["patient A"])
        self.flow_a = make_flow(patient_a, session_id=SESSION)
        self.trace_a = ReasoningFlow.objects.values_list("trace_id", flat=True).get(pk=self.flow_a)
        chain_all()
        sign_checkpoint(force=True)
        self.seq = AuditEvent.objects.order_by("id").values_list("id", flat=True).first()
        self.make: dict[str, Callable[[], object]] = {
            # Opened through the services as the agent's token (tests.factories.OPENER).
            "agent_flow": lambda: make_flow(steps=(), close=False),
            "closed_agent_flow": lambda: make_flow(steps=()),
            "pathway": lambda: make_pathway().pk,
            "dispatched_request": lambda: make_request(status="dispatched").pk,
            "review": lambda: make_review(uuid.uuid4().hex).pk,
            "claim_id": lambda: uuid.uuid4().hex,
            "hit": lambda: reuse_pathway(make_pathway().pk, actor=self.operator_actor)[1].pk,
        }
        # Records made for a request that was refused (which changed nothing), kept for the next.
        self.unused: dict[str, str] = {}
        self.clients: dict[str, Client] = {}
        # Answers without the security headers every answer carries (tests/security_headers.py).
        self.header_failures: list[str] = []

    def value(self, name: str) -> str:
        shared = {"flow_a": self.flow_a, "trace_a": self.trace_a, "session": SESSION, "seq": self.seq}
        if name in shared:
            return str(shared[name])
        if name not in self.unused:
            self.unused[name] = str(self.make[name]())
        return self.unused[name]

    def fill(self, template: str) -> str:
        return template.format_map(_Lookup(self.value))

    def body(self, data: Any) -> Any:
        if isinstance(data, str):
            return self.fill(data)
        if isinstance(data, dict):
            return {key: self.body(value) for key, value in data.items()}
        if isinstance(data, list):
            return [self.body(item) for item in data]
        return data

    def client(self, persona: str) -> Client:
        if persona not in self.clients:
            if persona in self.tokens:
                client = Client(HTTP_AUTHORIZATION=f"Bearer {self.tokens[persona]}")
            else:
                client = Client()
                if persona in self.logins:
                    client.force_login(self.logins[persona])
            client.raise_request_exception = False
            self.clients[persona] = client
        return self.clients[persona]

    def request(self, row: Row, persona: str) -> Expected:
        """The status, or "login" for a redirect to a login page."""
        path = self.fill(row.path)
        body = self.body(row.body)
        if row.content_type == "form":
            data, content_type = urlencode(body or {}), FORM
        else:
            data, content_type = ("" if body is None else json.dumps(body)), row.content_type
        response = self.client(persona).generic(row.method, path, data, content_type)
        try:
            assert_security_headers(response, urlsplit(path).path)
        except AssertionError as missing:
            self.header_failures.append(f"{row.label}  as {persona}: {missing}")
        to_login = response.status_code == 302 and urlsplit(response["Location"]).path in LOGIN_PAGES
        if response.status_code < 400 and not to_login:
            self.unused.clear()  # it may have changed them
        if settings.SESSION_COOKIE_NAME in response.cookies:
            del self.clients[persona]  # a logout, or a session that changed: log in afresh
        return LOGIN_REDIRECT if to_login else response.status_code


class _Lookup(dict[str, str]):
    """``str.format_map`` mapping: a placeholder's value from ``World.value``, the same for
    every occurrence in one path or body."""

    def __init__(self, value: Callable[[str], str]) -> None:
        super().__init__()
        self.value = value

    def __missing__(self, key: str) -> str:
        self[key] = self.value(key)
        return self[key]


@pytest.fixture(autouse=True)
def _schema_generated_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """/api/schema/ is generated anew on every request (about a second): generate it once. Who may
    fetch it is decided before generation (no authentication, AllowAny), for every persona."""
    generated: list[Any] = []
    generate: Callable[..., Any] = SchemaGenerator.get_schema

    def once(self: SchemaGenerator, request: Any = None, public: bool = False) -> Any:
        if not generated:
            generated.append(generate(self, request=request, public=public))
        return generated[0]

    monkeypatch.setattr(SchemaGenerator, "get_schema", once)


@pytest.fixture
def world(
    make_token: Callable[..., str], operator_user: User, consenting_patient: Patient, outsider_client: Client
) -> World:
    patient_b = create_patient(username="bea.patient", password=PASSWORD, consent=True, actor="system:test")
    tokens = {
        # Named "agent": the flows the factories open are this token's (tests.factories.OPENER).
        "agent": make_token("reasoning.write", name="agent"),
        "writer2": make_token("reasoning.write", name="other-agent"),
        "admin": make_token("reasoning.admin"),
        "admin+write": make_token("reasoning.admin", "reasoning.write"),
        "admin+cot": make_token("reasoning.admin", "reasoning.cot.read"),
        "admin+content": make_token("reasoning.admin", "reasoning.content.read"),
        "cot": make_token("reasoning.cot.read"),
        "audit": make_token("audit.read"),
        "app A": make_token("reasoning.read", patient_id=consenting_patient.pk),
        "app B": make_token("reasoning.read", patient_id=patient_b.pk),
    }
    clerk = get_user_model().objects.get(username="clerk")
    assert isinstance(clerk, User) and consenting_patient.user is not None
    logins = {"operator": operator_user, "patient A": consenting_patient.user, "clerk": clerk}
    assert set(tokens) | set(logins) | {"anon"} == set(PERSONAS)
    return World(tokens, logins)


def test_every_route_answers_every_persona_as_the_table_says(world: World) -> None:
    """... and every answer, a refusal as much as a 200, carries the security headers."""
    mismatches = []
    for row in ROWS:
        for persona, expected in row.expect.items():
            got = world.request(row, persona)
            if got != expected:
                mismatches.append(f"{row.label}  as {persona}: {got}, the table says {expected}")
    assert not mismatches, f"{len(mismatches)} answers differ from tests/access_matrix.py:\n" + "\n".join(mismatches)
    failures = world.header_failures
    assert not failures, f"{len(failures)} answers lack a security header:\n" + "\n".join(failures)


# --- Every route is in the table ---------------------------------------------------------------


def url_patterns() -> Iterator[tuple[str, URLPattern]]:
    """(route, pattern) for every URL pattern but Django admin's (its own staff check guards them
    all; the table samples them)."""

    def walk(patterns: list[Any], prefix: str) -> Iterator[tuple[str, URLPattern]]:
        for entry in patterns:
            if isinstance(entry, URLResolver):
                if entry.app_name == "admin":
                    continue
                yield from walk(entry.url_patterns, prefix + str(entry.pattern))
            elif isinstance(entry, URLPattern):
                yield prefix + str(entry.pattern), entry

    yield from walk(get_resolver().url_patterns, "")


def api_methods(pattern: URLPattern) -> set[str]:
    """The methods an API view answers (every one needs its row); empty for other views."""
    view_class = getattr(pattern.callback, "view_class", None)
    if view_class is None or not issubclass(view_class, APIView):
        return set()
    return {m.upper() for m in view_class.http_method_names if m not in ("options", "head") and hasattr(view_class, m)}


PLACEHOLDER = re.compile(r"\{(\w+)\}")


def sample(placeholder: re.Match[str]) -> str:
    """A value of the placeholder's shape, for resolving a row's path without the records."""
    return "1" if placeholder[1] == "seq" else str(uuid.UUID(int=1))


def test_the_table_lists_every_route_and_api_method() -> None:
    covered: set[tuple[str, str]] = set()
    admin_rows = 0
    for row in ROWS:
        match = resolve(urlsplit(PLACEHOLDER.sub(sample, row.path)).path)
        if match.app_name == "admin":
            admin_rows += 1
        covered.add((match.route, row.method))
    routes = {route for route, _ in covered}
    missing = []
    for route, pattern in url_patterns():
        if route not in routes:
            missing.append(f"/{route}")
        missing.extend(
            f"{method} /{route}" for method in sorted(api_methods(pattern)) if (route, method) not in covered
        )
    assert not missing, "not in tests/access_matrix.py (say who may call them):\n" + "\n".join(missing)
    assert admin_rows >= 3, "the table samples Django admin's pages"


def test_every_row_names_every_persona() -> None:
    incomplete = [row.label for row in ROWS if set(row.expect) != set(PERSONAS)]
    assert not incomplete, incomplete


# --- docs/api.md's table is the rendered one ----------------------------------------------------


def test_the_documented_access_table_is_rendered_from_the_matrix() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "access_table.py"), "--check"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
