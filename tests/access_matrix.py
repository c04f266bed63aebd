"""The access-control matrix: what every route and page answers to every persona.

This table is the documentation. ``scripts/access_table.py --write`` renders it into docs/api.md
(between the ``access-table`` markers), ``tests/test_access_matrix.py`` requests every row as every
persona and asserts the status, checks that every URL pattern has a row, and that docs/api.md's
table is the rendered one.

A row is one route and method, requested at a concrete path. Placeholders in the path and body
are filled by the test with records it made (``{agent_flow}``: an active flow the agent's token
opened; see ``World`` there). Write rows send a valid minimal body, so a persona that may write
gets the route's success status and one that may not is refused before the body is read.

Plain data, no Django: the table's generator imports it without settings.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

# Column key → who it is (the documented legend). Tokens are sent as ``Authorization: Bearer``;
# logins are Django sessions.
PERSONAS: dict[str, str] = {
    "anon": "anonymous: no token, no session",
    "agent": "the agent's `reasoning.write` token, which opened the flows written to",
    "writer2": "another `reasoning.write` token, which opened none of them",
    "admin": "a `reasoning.admin` token",
    "admin+write": "a `reasoning.admin` + `reasoning.write` token: may change any flow",
    "admin+cot": "a `reasoning.admin` + `reasoning.cot.read` token",
    "admin+content": "a `reasoning.admin` + `reasoning.content.read` token",
    "cot": "a `reasoning.cot.read` token alone",
    "audit": "an `audit.read` token",
    "app A": "patient A's app: a `reasoning.read` token bound to A, reading A's decision",
    "app B": "patient B's app (a `reasoning.read` token bound to B), asking for A's decision",
    "operator": "an operator's login (a staff session)",
    "patient A": "patient A's login, reading A's decision",
    "clerk": "a login that is neither staff nor a patient",
}
TOKENS = ("agent", "writer2", "admin", "admin+write", "admin+cot", "admin+content", "cot", "audit", "app A", "app B")
LOGINS = ("operator", "patient A", "clerk")
ADMINS = ("admin", "admin+write", "admin+cot", "admin+content")
# Tokens with reasoning.write. A flow may be changed by the token that opened it and by a writer
# that is also an admin; another writer gets 404 (docs/ingest.md, "Who may change a flow").
WRITERS = ("agent", "writer2", "admin+write")
OWNERS = ("agent", "admin+write")
# The audit log's proofs and events: audit.read, or reasoning.admin.
AUDITORS = (*ADMINS, "audit")

# A status, or "login": a 302 to a login page (``/accounts/login/``, or Django admin's). Pages send
# anonymous visitors there; a bearer token is no login on a page, so every token is anonymous there.
Expected = int | str
LOGIN_REDIRECT = "login"


@dataclass(frozen=True)
class Row:
    method: str
    path: str
    expect: Mapping[str, Expected]
    # JSON for API routes; a form (dict) for pages; None: no body.
    body: Any = None
    note: str = ""
    # The README shows this instead of ``path`` (a path with placeholders named for readers).
    shown: str = ""
    content_type: str = "application/json"
    extra: Mapping[str, str] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return f"{self.method} {self.shown or self.path}"


def _all(status: Expected) -> dict[str, Expected]:
    return dict.fromkeys(PERSONAS, status)


def everyone(status: Expected) -> dict[str, Expected]:
    """A public route: the same answer to everyone."""
    return _all(status)


def api(allowed: Mapping[str, Expected], *, refused: Expected = 403) -> dict[str, Expected]:
    """A token route: no token (a login is none) → 401; a token not in ``allowed`` → ``refused``."""
    expect = _all(refused)
    expect["anon"] = 401
    for login in LOGINS:
        expect[login] = 401
    expect.update(allowed)
    return expect


def scope(personas: tuple[str, ...], status: int, **others: int) -> dict[str, Expected]:
    """``api`` for the personas holding a scope, all with ``status``; ``others`` by column key."""
    allowed: dict[str, Expected] = dict.fromkeys(personas, status)
    allowed.update({key.replace("_", " "): value for key, value in others.items()})
    return api(allowed)


def operator_page(status: int = 200) -> dict[str, Expected]:
    """An operator page: anonymous and tokens → login; operators → ``status``; other logins → 403."""
    expect = _all(LOGIN_REDIRECT)
    expect.update({"operator": status, "patient A": 403, "clerk": 403})
    return expect


def page(visitor: Expected = LOGIN_REDIRECT, **logins: Expected) -> dict[str, Expected]:
    """A page: anonymous visitors and tokens → ``visitor`` (the login page); each login as given."""
    expect = _all(visitor)
    expect.update({key.replace("_", " "): value for key, value in logins.items()})
    return expect


def staff_page() -> dict[str, Expected]:
    """A Django admin page: staff only; any other login is sent to the admin's login page."""
    expect = _all(LOGIN_REDIRECT)
    expect["operator"] = 200
    return expect


STEP = {"kind": "retrieval", "agent": "researcher", "summary_text": "Retrieved guidelines"}
CONSOLE = "/dashboard/admin/reasoning/research-console"
BACK = "an operator's form: done, back to the page (htmx gets the panel)"

ROWS: tuple[Row, ...] = (
    # --- Public ---------------------------------------------------------------------------
    Row("GET", "/healthz", everyone(200)),
    Row("GET", "/favicon.ico", everyone(301), note="to the icon under /static/"),
    Row("GET", "/api/schema/", everyone(200)),
    Row("GET", "/api/docs/", everyone(200)),
    Row("GET", "/audit/v1/checkpoint", everyone(200)),
    Row("GET", "/audit/v1/checkpoints", everyone(200)),
    Row("GET", "/audit/v1/public-key", everyone(200)),
    Row("GET", "/", everyone(302), note="to `/dashboard/`"),
    Row("GET", "/accounts/login/", page(200, operator=302, patient_A=302, clerk=302)),
    # --- The write API (reasoning.write; flows: only their opener, or an admin) --------------
    Row(
        "POST",
        "/api/reasoning/flows",
        scope(WRITERS, 201),
        body={"trigger_type": "user_question"},
    ),
    Row(
        "POST",
        "/api/reasoning/flows/{agent_flow}/steps",
        scope(OWNERS, 201, writer2=404),
        body=STEP,
        shown="/api/reasoning/flows/{id}/steps",
    ),
    Row(
        "POST",
        "/api/reasoning/flows/{agent_flow}/steps/batch",
        scope(OWNERS, 201, writer2=404),
        body={"steps": [STEP]},
        shown="/api/reasoning/flows/{id}/steps/batch",
    ),
    Row(
        "PATCH",
        "/api/reasoning/flows/{agent_flow}",
        scope(OWNERS, 200, writer2=404),
        body={"flow_state": "aborted", "abort_reason": "tool_error"},
        shown="/api/reasoning/flows/{id}",
    ),
    Row(
        "POST",
        "/api/reasoning/flows/{closed_agent_flow}/outcome",
        scope(OWNERS, 200, writer2=404),
        body={"outcome": "recommendation_accepted", "correct": True},
        shown="/api/reasoning/flows/{id}/outcome",
    ),
    Row(
        "POST",
        "/api/reasoning/outcomes",
        scope(OWNERS, 200, writer2=207),
        body={"outcomes": [{"flow_id": "{closed_agent_flow}", "outcome": "recommendation_accepted", "correct": True}]},
        note="another writer's item is rejected (`not_found`)",
    ),
    Row(
        "POST",
        "/api/reasoning/ingest",
        scope(OWNERS, 200, writer2=207),
        body={"flows": [{"id": "{agent_flow}", "steps": [STEP]}]},
        note="appending to the agent's flow; another writer's item is rejected",
    ),
    Row("POST", "/v1/traces", scope(WRITERS, 200), body={"resourceSpans": []}),
    # --- The narrative (the patient a decision is about) -------------------------------------
    Row(
        "GET",
        "/api/reasoning/flows/{flow_a}",
        api({"app A": 200, "app B": 404, "operator": 403, "patient A": 200, "clerk": 403}),
        shown="/api/reasoning/flows/{id}",
        note="also a patient's login; 403 `not_patient` for other logins",
    ),
    # --- The admin API (reasoning.admin) ----------------------------------------------------
    Row("GET", "/admin/v1/reasoning/stats", scope(ADMINS, 200)),
    Row("GET", "/admin/v1/reasoning/flows", scope(ADMINS, 200)),
    Row(
        "GET",
        "/admin/v1/reasoning/flows/{flow_a}",
        scope(ADMINS, 200),
        shown="/admin/v1/reasoning/flows/{id}",
    ),
    Row(
        "GET",
        "/admin/v1/reasoning/flows/{flow_a}?include_reasoning=true",
        scope(("admin+cot",), 200),
        shown="/admin/v1/reasoning/flows/{id}?include_reasoning=true",
    ),
    Row(
        "GET",
        "/admin/v1/reasoning/flows/{flow_a}?include_content=true",
        scope(("admin+content",), 200),
        shown="/admin/v1/reasoning/flows/{id}?include_content=true",
        note="the steps' inputs and outputs decrypted (`admin.reasoning.flow.content_read`)",
    ),
    Row("GET", "/admin/v1/reasoning/sessions", scope(ADMINS, 200)),
    Row(
        "GET",
        "/admin/v1/reasoning/sessions/{session}",
        scope(ADMINS, 200),
        shown="/admin/v1/reasoning/sessions/{session_id}",
    ),
    Row(
        "GET",
        "/admin/v1/reasoning/sessions/{session}/replay",
        scope(ADMINS, 200),
        shown="/admin/v1/reasoning/sessions/{session_id}/replay",
    ),
    Row(
        "GET",
        "/admin/v1/reasoning/turns/{trace_a}",
        scope(ADMINS, 200),
        shown="/admin/v1/reasoning/turns/{trace_id}",
    ),
    Row(
        "GET",
        "/admin/v1/reasoning/agents/researcher/drift",
        scope(ADMINS, 200),
        shown="/admin/v1/reasoning/agents/{agent}/drift",
    ),
    Row(
        "GET",
        "/admin/v1/reasoning/agents/researcher/review",
        scope(ADMINS, 200),
        shown="/admin/v1/reasoning/agents/{agent}/review",
    ),
    Row("GET", "/admin/v1/reasoning/pathways/match?trigger_type=user_question", scope(ADMINS, 200)),
    Row("GET", "/admin/v1/reasoning/pathways/stats", scope(ADMINS, 200)),
    Row(
        "POST",
        "/admin/v1/reasoning/pathways/{pathway}/hit",
        scope(ADMINS, 200),
        shown="/admin/v1/reasoning/pathways/{id}/hit",
    ),
    Row(
        "POST",
        "/admin/v1/reasoning/research/deeper-request",
        scope(ADMINS, 201),
        body={"trigger_type": "user_question", "question": "Which guideline covers this?"},
    ),
    Row("GET", "/admin/v1/reasoning/research/backlog", scope(ADMINS, 200)),
    Row("POST", "/admin/v1/reasoning/research/backlog/next", scope(ADMINS, 200), body={}),
    Row(
        "POST",
        "/admin/v1/reasoning/research/backlog/{dispatched_request}/complete",
        scope(ADMINS, 200),
        body={},
        shown="/admin/v1/reasoning/research/backlog/{id}/complete",
    ),
    Row("GET", "/admin/v1/reasoning/claims-pending-review", scope(ADMINS, 200)),
    Row(
        "POST",
        "/admin/v1/reasoning/claims-pending-review",
        scope(ADMINS, 201),
        body={"claim_id": "{claim_id}"},
    ),
    Row(
        "PATCH",
        "/admin/v1/reasoning/claims-pending-review/{review}",
        scope(ADMINS, 200),
        body={"status": "dismissed"},
        shown="/admin/v1/reasoning/claims-pending-review/{id}",
    ),
    Row("GET", "/admin/v1/nowhere", everyone(404), shown="/admin/v1/…", note="any other path under `/admin/v1/`"),
    # --- The audit log's proofs and events (audit.read or reasoning.admin) -------------------
    Row("GET", "/audit/v1/proof/inclusion?position=1", scope(AUDITORS, 200)),
    Row("GET", "/audit/v1/proof/consistency?from=1", scope(AUDITORS, 200)),
    Row("GET", "/audit/v1/events", scope(AUDITORS, 200)),
    Row("GET", "/audit/v1/events/{seq}", scope(AUDITORS, 200), shown="/audit/v1/events/{seq}"),
    # --- Pages for any login ----------------------------------------------------------------
    Row(
        "GET",
        "/dashboard/",
        page(operator=302, patient_A=302, clerk=302),
        note="to the operators' dashboard or the profile",
    ),
    Row(
        "GET",
        "/dashboard/profile",
        page(operator=200, patient_A=200, clerk=200),
        note="no patient record → a polite page",
    ),
    Row(
        "POST",
        "/dashboard/profile/consent",
        page(operator=403, patient_A=303, clerk=403),
        body={"consent": "on"},
        content_type="form",
    ),
    Row(
        "GET",
        "/dashboard/reasoning/{flow_a}",
        page(operator=403, patient_A=200, clerk=403),
        shown="/dashboard/reasoning/{id}",
    ),
    Row("POST", "/accounts/logout/", everyone(LOGIN_REDIRECT), body={}, content_type="form", note="logs a session out"),
    # --- Operator pages ---------------------------------------------------------------------
    Row("GET", "/dashboard/admin/reasoning/", operator_page()),
    Row(
        "GET",
        "/dashboard/admin/reasoning/access-report",
        operator_page(),
        note="the form; running a report needs `audit.run_access_report` (a superuser has it)",
    ),
    Row("GET", "/dashboard/admin/reasoning/sessions", operator_page()),
    Row(
        "GET",
        "/dashboard/admin/reasoning/sessions/{session}",
        operator_page(),
        shown="/dashboard/admin/reasoning/sessions/{session_id}",
        note="the session's decisions (`admin.reasoning.session.replay_read`)",
    ),
    Row("GET", "/dashboard/admin/reasoning/agents", operator_page()),
    Row(
        "GET",
        "/dashboard/admin/reasoning/agents/researcher",
        operator_page(),
        shown="/dashboard/admin/reasoning/agents/{agent}",
    ),
    Row("GET", "/dashboard/admin/reasoning/evaluation", operator_page()),
    Row("GET", "/dashboard/admin/reasoning/evaluation/export", operator_page()),
    Row("GET", "/dashboard/admin/reasoning/flows", operator_page()),
    Row("GET", "/dashboard/admin/reasoning/flows/summary", operator_page()),
    Row("GET", "/dashboard/admin/reasoning/{flow_a}", operator_page(), shown="/dashboard/admin/reasoning/{flow_id}"),
    Row(
        "GET",
        "/dashboard/admin/reasoning/turns/{trace_a}",
        operator_page(),
        shown="/dashboard/admin/reasoning/turns/{trace_id}",
    ),
    Row("GET", "/dashboard/admin/reasoning/pathway-library", operator_page()),
    Row("GET", CONSOLE, operator_page()),
    Row("GET", f"{CONSOLE}/backlog", operator_page()),
    Row("GET", f"{CONSOLE}/reviews", operator_page()),
    Row("GET", f"{CONSOLE}/candidates?trigger_type=user_question", operator_page()),
    Row("GET", f"{CONSOLE}/compare", operator_page()),
    Row(
        "POST",
        f"{CONSOLE}/deeper-research",
        operator_page(302),
        note=BACK,
        body={"trigger_type": "user_question", "question": "Which guideline covers this?"},
        content_type="form",
    ),
    Row(
        "POST",
        f"{CONSOLE}/reviews/{{review}}",
        operator_page(302),
        note=BACK,
        body={"status": "dismissed"},
        content_type="form",
        shown=f"{CONSOLE}/reviews/{{id}}",
    ),
    Row(
        "POST",
        f"{CONSOLE}/pathways/{{pathway}}/reuse",
        operator_page(302),
        note=BACK,
        body={},
        content_type="form",
        shown=f"{CONSOLE}/pathways/{{id}}/reuse",
    ),
    Row(
        "POST",
        f"{CONSOLE}/reuses/{{hit}}/undo",
        operator_page(302),
        note=BACK,
        body={},
        content_type="form",
        shown=f"{CONSOLE}/reuses/{{id}}/undo",
    ),
    # --- Django admin: staff only (every page under /admin/ passes admin.site's staff check) --
    Row("GET", "/admin/", staff_page(), note="Django admin"),
    Row("GET", "/admin/login/", page(200, operator=302, patient_A=200, clerk=200)),
    Row("GET", "/admin/reasoning/reasoningflow/", staff_page()),
    Row(
        "GET",
        "/admin/reasoning/reasoningflow/{flow_a}/change/",
        staff_page(),
        shown="/admin/reasoning/reasoningflow/{id}/change/",
    ),
    Row("GET", "/admin/audit/auditevent/", staff_page()),
    Row("GET", "/admin/patients/patient/", staff_page()),
)
