"""A step's content, read with permission and a trail (issue 41, part 1).

Who may read a step's decrypted inputs and outputs (prompts, completions, tool arguments and
results): a token with ``reasoning.content.read`` through ``GET /admin/v1/reasoning/flows/{id}
?include_content=true``, an operator with the ``read_step_content`` permission on the flow page
(``?content=1``, the "Show content" control). Every such read is audited as
``admin.reasoning.flow.content_read`` naming the reader and the flow; everyone else gets 403
(the route) or the keys only (the page), and no event. Raw reasoning works the same way behind
``reasoning.cot.read`` / ``read_step_reasoning``.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from io import StringIO
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command
from django.test import Client
from rest_framework.test import APIClient

from reasoning.tokens import create_operator, set_operator_access
from tests import otlp
from tests.conftest import audit_trail_text, events
from tests.factories import PASSWORD, logged_in, make_flow
from tests.html import doc

CONTENT_READ = "admin.reasoning.flow.content_read"
REASONING_READ = "admin.reasoning.flow.reasoning_content_read"
PROMPT = "Zebulon Marchbanks asked whether 40 mg is still right after the new creatinine."
COMPLETION = "Hold the dose increase until the renal panel is repeated."
THINKING = "The creatinine rose by 30 percent, so the clearance estimate changes the dose."


def flow_url(flow_id: object, query: str = "") -> str:
    return f"/admin/v1/reasoning/flows/{flow_id}{query}"


def page_url(flow_id: object, query: str = "") -> str:
    return f"/dashboard/admin/reasoning/{flow_id}{query}"


@pytest.fixture
def flow_id(db: None) -> uuid.UUID:
    return make_flow(
        steps=[
            {
                "kind": "llm_prompt",
                "agent": "researcher",
                "summary_text": "Asked the model about the dose",
                "inputs": {"prompt": PROMPT, "temperature": 0.2},
                "outputs": {"completion": COMPLETION},
                "pii_fields": ["prompt", "completion"],
                "reasoning_content": THINKING,
            }
        ]
    )


@pytest.fixture
def token_client(make_token: Callable[..., str]) -> Callable[..., APIClient]:
    def make(*scopes: str, name: str) -> APIClient:
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {make_token(*scopes, name=name)}")
        return client

    return make


@pytest.fixture
def restricted_operator(db: None) -> User:
    """A staff login that is not a superuser: metadata only until granted more."""
    user = create_operator(username="rhea.restricted", password=PASSWORD, actor="system:test", superuser=False)
    assert isinstance(user, User)
    return user


# --- The route -------------------------------------------------------------------------------


def test_the_route_shows_content_to_a_token_allowed_to_read_it_and_audits_the_read(
    flow_id: uuid.UUID, token_client: Callable[..., APIClient]
) -> None:
    reader = token_client("reasoning.admin", "reasoning.content.read", name="incident-desk")

    body = reader.get(flow_url(flow_id, "?include_content=true")).json()

    (step,) = body["steps"]
    assert step["content"] == {
        "inputs": {"prompt": PROMPT, "temperature": 0.2},
        "outputs": {"completion": COMPLETION},
    }
    assert "reasoning_content" not in step
    (event,) = events(CONTENT_READ, flow_id)
    assert event.actor == "token:incident-desk"
    assert event.payload == {"steps_with_content": 1}
    assert PROMPT not in audit_trail_text() and COMPLETION not in audit_trail_text()


@pytest.mark.parametrize(
    "scopes",
    [("reasoning.admin",), ("reasoning.admin", "reasoning.cot.read")],
    ids=["admin", "admin+cot"],
)
def test_the_route_refuses_content_to_a_token_without_the_scope(
    flow_id: uuid.UUID, token_client: Callable[..., APIClient], scopes: tuple[str, ...]
) -> None:
    response = token_client(*scopes, name="ops")
    answer = response.get(flow_url(flow_id, "?include_content=true"))

    assert answer.status_code == 403
    assert answer.json()["detail"] == "include_content=true needs the 'reasoning.content.read' scope."
    assert events(CONTENT_READ) == []


def test_the_content_scope_alone_reads_no_flow(flow_id: uuid.UUID, token_client: Callable[..., APIClient]) -> None:
    answer = token_client("reasoning.content.read", name="content-only").get(flow_url(flow_id, "?include_content=true"))

    assert answer.status_code == 403
    assert events(CONTENT_READ) == []


def test_without_include_content_the_route_shows_no_content_and_audits_no_content_read(
    flow_id: uuid.UUID, token_client: Callable[..., APIClient]
) -> None:
    reader = token_client("reasoning.admin", "reasoning.content.read", name="incident-desk")

    body = reader.get(flow_url(flow_id)).json()

    assert "content" not in body["steps"][0]
    assert PROMPT not in str(body) and COMPLETION not in str(body)
    assert body["steps"][0]["pii_fields"] == ["prompt", "completion"]
    assert events(CONTENT_READ) == []


def test_content_and_raw_reasoning_together_are_two_audited_reads(
    flow_id: uuid.UUID, token_client: Callable[..., APIClient]
) -> None:
    reader = token_client("reasoning.admin", "reasoning.content.read", "reasoning.cot.read", name="auditor")

    (step,) = reader.get(flow_url(flow_id, "?include_content=true&include_reasoning=true")).json()["steps"]

    assert step["reasoning_content"] == THINKING
    assert step["content"]["inputs"]["prompt"] == PROMPT
    assert [e.actor for e in events(CONTENT_READ, flow_id)] == ["token:auditor"]
    assert [e.actor for e in events(REASONING_READ, flow_id)] == ["token:auditor"]


def test_an_otlp_flow_shows_its_prompt_and_completion_to_the_content_reader(
    token_client: Callable[..., APIClient],
) -> None:
    writer = token_client("reasoning.write", name="otel-agent")
    message = otlp.request(
        otlp.span("invoke_agent triage-agent", attributes={"gen_ai.operation.name": "invoke_agent"}),
        otlp.child(
            "chat gpt-4o",
            attributes={
                "gen_ai.operation.name": "chat",
                "gen_ai.request.model": "gpt-4o",
                "gen_ai.prompt.0.role": "user",
                "gen_ai.prompt.0.content": PROMPT,
                "gen_ai.completion.0.role": "assistant",
                "gen_ai.completion.0.content": COMPLETION,
            },
        ),
    )
    sent = writer.post("/v1/traces", otlp.protobuf_body(message), content_type="application/x-protobuf")
    assert sent.status_code == 200
    admin = token_client("reasoning.admin", name="plain-admin")
    (listed,) = admin.get("/admin/v1/reasoning/flows").json()
    plain = admin.get(flow_url(listed["id"])).json()
    assert PROMPT not in str(plain) and COMPLETION not in str(plain)

    reader = token_client("reasoning.admin", "reasoning.content.read", name="incident-desk")
    steps = reader.get(flow_url(listed["id"], "?include_content=true")).json()["steps"]

    shown = str([step["content"] for step in steps])
    assert PROMPT in shown and COMPLETION in shown
    assert [e.actor for e in events(CONTENT_READ, listed["id"])] == ["token:incident-desk"]


# --- The page --------------------------------------------------------------------------------


def _controls(response: Any) -> dict[str, str]:
    page = doc(response)
    return {a.attrs["id"]: a.text.strip() for a in page.select("a") if a.attrs.get("id", "").startswith("toggle-")}


def test_an_operator_without_the_permission_sees_keys_only_and_no_control(
    flow_id: uuid.UUID, restricted_operator: User
) -> None:
    client = logged_in(restricted_operator)

    for query in ("", "?content=1", "?reasoning=1"):
        response = client.get(page_url(flow_id, query))
        assert response.status_code == 200
        text = response.content.decode()
        assert PROMPT not in text and COMPLETION not in text and THINKING not in text
        assert "keys only; values masked" in text
        assert _controls(response) == {}
    assert events(CONTENT_READ) == [] and events(REASONING_READ) == []


def test_show_content_on_the_page_decrypts_the_steps_and_audits_the_reader(
    flow_id: uuid.UUID, restricted_operator: User
) -> None:
    set_operator_access(restricted_operator, content=True, actor="system:test")
    client = logged_in(restricted_operator)

    before = client.get(page_url(flow_id))
    assert _controls(before) == {"toggle-content": "Show content"}
    assert PROMPT not in before.content.decode()
    assert events(CONTENT_READ) == []

    shown = client.get(page_url(flow_id, "?content=1"))

    text = shown.content.decode()
    assert PROMPT in text and COMPLETION in text
    assert THINKING not in text  # raw reasoning needs its own permission
    assert _controls(shown) == {"toggle-content": "Hide content"}
    (event,) = events(CONTENT_READ, flow_id)
    assert event.actor == f"user:{restricted_operator.pk}"
    assert event.payload == {"steps_with_content": 1, "via": "page", "page": 1}


def test_show_raw_reasoning_on_the_page_needs_its_own_permission(flow_id: uuid.UUID, operator_client: Client) -> None:
    # A superuser operator holds every permission (Django's rule): both controls.
    response = operator_client.get(page_url(flow_id, "?reasoning=1"))

    assert THINKING in response.content.decode()
    assert PROMPT not in response.content.decode()
    assert _controls(response) == {"toggle-content": "Show content", "toggle-reasoning": "Hide raw reasoning"}
    assert len(events(REASONING_READ, flow_id)) == 1
    assert events(CONTENT_READ) == []


def test_granting_and_revoking_access_is_audited_by_name(restricted_operator: User) -> None:
    set_operator_access(restricted_operator, content=True, reasoning=False, actor="user:admin")
    set_operator_access(restricted_operator, content=False, actor="user:admin")

    changes = events("auth.operator.access_changed", restricted_operator.pk)
    assert [e.payload for e in changes] == [{"content": True, "reasoning": False}, {"content": False}]
    assert not User.objects.get(pk=restricted_operator.pk).has_perm("reasoning.read_step_content")


def test_a_patient_never_sees_content(flow_id: uuid.UUID, patient_client: Client) -> None:
    response = patient_client.get(page_url(flow_id, "?content=1"))

    assert response.status_code == 403
    assert PROMPT not in response.content.decode()


def test_the_operator_access_command_grants_revokes_and_says_what_an_operator_may_read(
    restricted_operator: User,
) -> None:
    out = StringIO()
    call_command("operator_access", "rhea.restricted", "--content", "on", stdout=out)
    assert out.getvalue().splitlines() == ["content: yes", "reasoning: no"]

    out = StringIO()
    call_command("operator_access", "rhea.restricted", "--content", "off", stdout=out)
    assert out.getvalue().splitlines() == ["content: no", "reasoning: no"]
    assert [e.actor for e in events("auth.operator.access_changed", restricted_operator.pk)] == ["system:cli"] * 2

    with pytest.raises(CommandError, match="no user named 'nobody'"):
        call_command("operator_access", "nobody", "--content", "on")
