"""POST /api/reasoning/flows/{id}/steps/batch: add up to 100 steps to an active flow, in order, all or none."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection
from rest_framework.test import APIClient

from audit.models import AuditEvent
from reasoning.models import ReasoningFlow, ReasoningStep
from tests.conftest import audit_trail_text
from tests.factories import open_flow

pytestmark = pytest.mark.django_db

FLOWS_URL = "/api/reasoning/flows"


def batch_url(flow_id: str) -> str:
    return f"{FLOWS_URL}/{flow_id}/steps/batch"


def step_body(**overrides: Any) -> dict[str, Any]:
    return {"kind": "retrieval", "agent": "researcher", "summary_text": "Retrieved current guidelines", **overrides}


def numbered_steps(count: int) -> list[dict[str, Any]]:
    return [step_body(summary_text=f"Step number {n}") for n in range(count)]


def post_batch(client: APIClient, flow_id: str, steps: list[dict[str, Any]]) -> Any:
    return client.post(batch_url(flow_id), {"steps": steps}, format="json")


def add_batch(client: APIClient, flow_id: str, steps: list[dict[str, Any]]) -> list[dict[str, Any]]:
    response = post_batch(client, flow_id, steps)
    assert response.status_code == 201, response.content
    result: list[dict[str, Any]] = response.json()["steps"]
    return result


def add_single_step(client: APIClient, flow_id: str, **overrides: Any) -> dict[str, Any]:
    response = client.post(f"{FLOWS_URL}/{flow_id}/steps", step_body(**overrides), format="json")
    assert response.status_code == 201, response.content
    result: dict[str, Any] = response.json()
    return result


def close_flow(client: APIClient, flow_id: str) -> None:
    closed = client.patch(
        f"{FLOWS_URL}/{flow_id}", {"flow_state": "completed", "outcome_type": "recommendation_delivered"}, format="json"
    )
    assert closed.status_code == 200, closed.content


def step_count(flow_id: str) -> int:
    return ReasoningFlow.objects.get(pk=flow_id).step_count


def step_created_events() -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(action="reasoning.step.created").order_by("id"))


def assert_nothing_written(flow_id: str) -> None:
    assert not ReasoningStep.objects.filter(flow_id=uuid.UUID(flow_id)).exists()
    assert step_count(flow_id) == 0
    assert [e for e in step_created_events() if e.payload["flow_id"] == flow_id] == []


# --- Success ------------------------------------------------------------------------------


def test_batch_is_201_with_the_steps_in_request_order_at_positions_1_2_3(
    agent: APIClient, flow: dict[str, Any]
) -> None:
    response = post_batch(agent, flow["id"], numbered_steps(3))

    assert response.status_code == 201
    steps = response.json()["steps"]
    assert [s["summary_text"] for s in steps] == ["Step number 0", "Step number 1", "Step number 2"]
    assert [s["position"] for s in steps] == [1, 2, 3]
    assert all(s["flow_id"] == flow["id"] for s in steps)
    stored = ReasoningStep.objects.filter(flow_id=flow["id"]).order_by("position")
    assert [str(s.pk) for s in stored] == [s["id"] for s in steps]
    assert step_count(flow["id"]) == 3


def test_batch_continues_after_the_flows_existing_steps(agent: APIClient, flow: dict[str, Any]) -> None:
    add_single_step(agent, flow["id"])
    add_single_step(agent, flow["id"])

    steps = add_batch(agent, flow["id"], numbered_steps(2))

    assert [s["position"] for s in steps] == [3, 4]
    assert step_count(flow["id"]) == 4


def test_batch_steps_keep_their_client_chosen_ids(agent: APIClient, flow: dict[str, Any]) -> None:
    ids = [str(uuid.uuid4()) for _ in range(2)]

    steps = add_batch(agent, flow["id"], [step_body(id=ids[0]), step_body(id=ids[1])])

    assert [s["id"] for s in steps] == ids
    assert ReasoningStep.objects.filter(pk__in=ids, flow_id=flow["id"]).count() == 2


def test_batch_of_one_step_is_201(agent: APIClient, flow: dict[str, Any]) -> None:
    (step,) = add_batch(agent, flow["id"], numbered_steps(1))

    assert step["position"] == 1
    assert step_count(flow["id"]) == 1


def test_batch_response_steps_match_the_admin_read(agent: APIClient, operator: APIClient, flow: dict[str, Any]) -> None:
    steps = add_batch(agent, flow["id"], [step_body(confidence=0.25, latency_ms=40), step_body(kind="verdict")])

    read = operator.get(f"/admin/v1/reasoning/flows/{flow['id']}")

    assert read.status_code == 200
    stored = read.json()["steps"]
    assert [s["id"] for s in stored] == [s["id"] for s in steps]
    assert stored[0]["confidence"] == 0.25
    assert stored[0]["latency_ms"] == 40
    assert stored[1]["kind"] == "verdict"


# --- All or none --------------------------------------------------------------------------


def test_bad_third_item_writes_nothing(agent: APIClient, flow: dict[str, Any]) -> None:
    steps = numbered_steps(4)
    steps[2]["confidence"] = 1.5

    response = post_batch(agent, flow["id"], steps)

    assert response.status_code == 400
    assert_nothing_written(flow["id"])


@pytest.mark.parametrize("bad_index", [0, 49, 99])
def test_bad_item_anywhere_in_a_full_batch_writes_nothing(
    agent: APIClient, flow: dict[str, Any], bad_index: int
) -> None:
    steps = numbered_steps(100)
    del steps[bad_index]["summary_text"]

    response = post_batch(agent, flow["id"], steps)

    assert response.status_code == 400
    assert_nothing_written(flow["id"])


def test_bad_item_leaves_the_flows_existing_steps_and_count_alone(agent: APIClient, flow: dict[str, Any]) -> None:
    add_single_step(agent, flow["id"])
    steps = numbered_steps(3)
    steps[1]["parent_step_id"] = str(uuid.uuid4())

    response = post_batch(agent, flow["id"], steps)

    assert response.status_code == 400
    assert ReasoningStep.objects.filter(flow_id=flow["id"]).count() == 1
    assert step_count(flow["id"]) == 1
    assert len(step_created_events()) == 1


def test_refused_batch_does_not_use_up_positions(agent: APIClient, flow: dict[str, Any]) -> None:
    bad = numbered_steps(3)
    bad[2]["extra_parent_ids"] = [str(uuid.uuid4())]
    refused = post_batch(agent, flow["id"], bad)

    steps = add_batch(agent, flow["id"], numbered_steps(2))

    assert refused.status_code == 400
    assert [s["position"] for s in steps] == [1, 2]


# --- Error names --------------------------------------------------------------------------


def test_bad_confidence_in_third_item_is_400_naming_steps_2_confidence(agent: APIClient, flow: dict[str, Any]) -> None:
    steps = numbered_steps(3)
    steps[2]["confidence"] = 1.5

    response = post_batch(agent, flow["id"], steps)

    assert response.status_code == 400
    # Field validation errors are nested under the item's index; only the bad item appears.
    # One flat shape for every error of this route, as for a bad parent: the index and the field.
    assert list(response.json()) == ["steps[2].confidence"]
    assert_nothing_written(flow["id"])


def test_unknown_field_in_second_item_is_400_naming_it(agent: APIClient, flow: dict[str, Any]) -> None:
    steps = numbered_steps(2)
    steps[1]["colour"] = "blue"

    response = post_batch(agent, flow["id"], steps)

    assert response.status_code == 400
    assert response.json() == {"steps[1].colour": ["Unknown field."]}
    assert_nothing_written(flow["id"])


def test_unknown_parent_in_third_item_is_400_naming_steps_2_parent_step_id(
    agent: APIClient, flow: dict[str, Any]
) -> None:
    steps = numbered_steps(3)
    steps[2]["parent_step_id"] = str(uuid.uuid4())

    response = post_batch(agent, flow["id"], steps)

    assert response.status_code == 400
    assert list(response.json()) == ["steps[2].parent_step_id"]
    assert_nothing_written(flow["id"])


def test_unknown_extra_parent_in_second_item_is_400_naming_steps_1_extra_parent_ids(
    agent: APIClient, flow: dict[str, Any]
) -> None:
    root = add_single_step(agent, flow["id"])
    missing = str(uuid.uuid4())
    steps = numbered_steps(2)
    steps[1].update(parent_step_id=root["id"], extra_parent_ids=[missing])

    response = post_batch(agent, flow["id"], steps)

    assert response.status_code == 400
    body = response.json()
    assert list(body) == ["steps[1].extra_parent_ids"]
    assert missing in body["steps[1].extra_parent_ids"][0]
    assert step_count(flow["id"]) == 1


def test_unknown_parent_in_a_one_step_batch_is_400_naming_steps_0_parent_step_id(
    agent: APIClient, flow: dict[str, Any]
) -> None:
    response = post_batch(agent, flow["id"], [step_body(parent_step_id=str(uuid.uuid4()))])

    assert response.status_code == 400
    assert list(response.json()) == ["steps[0].parent_step_id"]


# --- Parents within the batch -------------------------------------------------------------


def test_parent_earlier_in_the_same_batch_is_accepted(agent: APIClient, flow: dict[str, Any]) -> None:
    root_id, child_id = str(uuid.uuid4()), str(uuid.uuid4())

    root, child = add_batch(agent, flow["id"], [step_body(id=root_id), step_body(id=child_id, parent_step_id=root_id)])

    assert root["parent_step_id"] is None
    assert child["parent_step_id"] == root_id
    assert str(ReasoningStep.objects.get(pk=child_id).parent_step_id) == root_id


def test_merge_of_two_earlier_batch_steps_is_accepted(
    agent: APIClient, operator: APIClient, flow: dict[str, Any]
) -> None:
    root_id, left_id, right_id, merge_id = (str(uuid.uuid4()) for _ in range(4))
    add_batch(
        agent,
        flow["id"],
        [
            step_body(id=root_id),
            step_body(id=left_id, parent_step_id=root_id),
            step_body(id=right_id, parent_step_id=root_id),
            step_body(id=merge_id, kind="aggregation", parent_step_id=left_id, extra_parent_ids=[right_id]),
        ],
    )

    read = operator.get(f"/admin/v1/reasoning/flows/{flow['id']}")

    steps = {s["id"]: s for s in read.json()["steps"]}
    assert steps[merge_id]["parent_step_id"] == left_id
    assert steps[merge_id]["extra_parent_ids"] == [right_id]
    assert steps[left_id]["parent_step_id"] == root_id
    assert steps[right_id]["parent_step_id"] == root_id


def test_parent_already_stored_in_the_flow_is_accepted(agent: APIClient, flow: dict[str, Any]) -> None:
    root = add_single_step(agent, flow["id"])

    (child,) = add_batch(agent, flow["id"], [step_body(parent_step_id=root["id"])])

    assert child["parent_step_id"] == root["id"]
    assert child["position"] == 2


def test_parent_later_in_the_same_batch_is_400_and_writes_nothing(agent: APIClient, flow: dict[str, Any]) -> None:
    later_id = str(uuid.uuid4())

    response = post_batch(agent, flow["id"], [step_body(parent_step_id=later_id), step_body(id=later_id)])

    assert response.status_code == 400
    assert list(response.json()) == ["steps[0].parent_step_id"]
    assert_nothing_written(flow["id"])


def test_extra_parent_later_in_the_same_batch_is_400_and_writes_nothing(agent: APIClient, flow: dict[str, Any]) -> None:
    root_id, later_id = str(uuid.uuid4()), str(uuid.uuid4())
    steps = [
        step_body(id=root_id),
        step_body(parent_step_id=root_id, extra_parent_ids=[later_id]),
        step_body(id=later_id, parent_step_id=root_id),
    ]

    response = post_batch(agent, flow["id"], steps)

    assert response.status_code == 400
    assert list(response.json()) == ["steps[1].extra_parent_ids"]
    assert_nothing_written(flow["id"])


def test_step_naming_itself_as_parent_is_400(agent: APIClient, flow: dict[str, Any]) -> None:
    step_id = str(uuid.uuid4())

    response = post_batch(agent, flow["id"], [step_body(), step_body(id=step_id, parent_step_id=step_id)])

    assert response.status_code == 400
    assert list(response.json()) == ["steps[1].parent_step_id"]
    assert_nothing_written(flow["id"])


def test_parent_of_another_flow_is_400(agent: APIClient, flow: dict[str, Any]) -> None:
    other = open_flow(agent)
    foreign = add_single_step(agent, other["id"])

    response = post_batch(agent, flow["id"], [step_body(), step_body(parent_step_id=foreign["id"])])

    assert response.status_code == 400
    assert list(response.json()) == ["steps[1].parent_step_id"]
    assert_nothing_written(flow["id"])


def test_extra_parent_repeating_the_primary_parent_is_400(agent: APIClient, flow: dict[str, Any]) -> None:
    root_id = str(uuid.uuid4())

    response = post_batch(
        agent, flow["id"], [step_body(id=root_id), step_body(parent_step_id=root_id, extra_parent_ids=[root_id])]
    )

    assert response.status_code == 400
    assert list(response.json()) == ["steps[1].extra_parent_ids"]
    assert_nothing_written(flow["id"])


def test_the_same_id_twice_in_one_batch_is_400(agent: APIClient, flow: dict[str, Any]) -> None:
    step_id = str(uuid.uuid4())

    response = post_batch(agent, flow["id"], [step_body(id=step_id), step_body(id=step_id)])

    assert response.status_code == 400
    assert response.json() == {"steps[1].id": ["step ids must be unique within a request"]}
    assert_nothing_written(flow["id"])


# --- Size limits --------------------------------------------------------------------------


def test_batch_of_100_steps_is_accepted(agent: APIClient, flow: dict[str, Any]) -> None:
    steps = add_batch(agent, flow["id"], numbered_steps(100))

    assert [s["position"] for s in steps] == list(range(1, 101))
    assert step_count(flow["id"]) == 100
    assert len(step_created_events()) == 100


def test_batch_of_101_steps_is_400_naming_steps_and_writes_nothing(agent: APIClient, flow: dict[str, Any]) -> None:
    response = post_batch(agent, flow["id"], numbered_steps(101))

    assert response.status_code == 400
    assert list(response.json()) == ["steps"]
    assert "100" in response.json()["steps"][0]
    assert_nothing_written(flow["id"])


def test_empty_batch_is_400_naming_steps(agent: APIClient, flow: dict[str, Any]) -> None:
    response = post_batch(agent, flow["id"], [])

    assert response.status_code == 400
    assert list(response.json()) == ["steps"]
    assert_nothing_written(flow["id"])


def test_body_without_steps_is_400_naming_steps(agent: APIClient, flow: dict[str, Any]) -> None:
    response = agent.post(batch_url(flow["id"]), {}, format="json")

    assert response.status_code == 400
    assert "steps" in response.json()


def test_steps_that_is_not_a_list_is_400_naming_steps(agent: APIClient, flow: dict[str, Any]) -> None:
    response = agent.post(batch_url(flow["id"]), {"steps": step_body()}, format="json")

    assert response.status_code == 400
    assert "steps" in response.json()
    assert_nothing_written(flow["id"])


def test_an_item_that_is_not_an_object_is_400_naming_it(agent: APIClient, flow: dict[str, Any]) -> None:
    response = agent.post(batch_url(flow["id"]), {"steps": [step_body(), 5]}, format="json")

    assert response.status_code == 400
    assert list(response.json()) == ["steps[1]"]
    assert_nothing_written(flow["id"])


def test_unknown_top_level_field_is_400_naming_it(agent: APIClient, flow: dict[str, Any]) -> None:
    response = agent.post(batch_url(flow["id"]), {"steps": numbered_steps(1), "flow_id": flow["id"]}, format="json")

    assert response.status_code == 400
    assert "flow_id" in response.json()
    assert_nothing_written(flow["id"])


# --- Retries ------------------------------------------------------------------------------


def with_ids(count: int) -> list[dict[str, Any]]:
    return [step_body(id=str(uuid.uuid4()), summary_text=f"Step number {n}") for n in range(count)]


def test_exact_replay_is_200_with_the_stored_steps_and_writes_nothing_twice(
    agent: APIClient, flow: dict[str, Any]
) -> None:
    steps = with_ids(3)
    steps[1]["parent_step_id"] = steps[0]["id"]
    first = post_batch(agent, flow["id"], steps)

    replay = post_batch(agent, flow["id"], steps)

    assert first.status_code == 201
    assert replay.status_code == 200
    assert replay.json() == first.json()
    assert [s["position"] for s in replay.json()["steps"]] == [1, 2, 3]
    assert ReasoningStep.objects.filter(flow_id=flow["id"]).count() == 3
    assert step_count(flow["id"]) == 3
    assert len(step_created_events()) == 3


def test_replay_with_one_body_changed_is_409_and_keeps_the_stored_step(agent: APIClient, flow: dict[str, Any]) -> None:
    steps = with_ids(3)
    add_batch(agent, flow["id"], steps)
    changed = [dict(step) for step in steps]
    changed[2]["summary_text"] = "Something else entirely"

    conflict = post_batch(agent, flow["id"], changed)

    assert conflict.status_code == 409
    assert ReasoningStep.objects.get(pk=steps[2]["id"]).summary_text == "Step number 2"
    assert step_count(flow["id"]) == 3
    assert len(step_created_events()) == 3


def test_replay_with_an_extra_new_step_is_409_and_writes_nothing(agent: APIClient, flow: dict[str, Any]) -> None:
    steps = with_ids(2)
    add_batch(agent, flow["id"], steps)

    conflict = post_batch(agent, flow["id"], [*steps, *with_ids(1)])

    assert conflict.status_code == 409
    assert step_count(flow["id"]) == 2
    assert len(step_created_events()) == 2


def test_batch_reusing_a_step_id_of_another_flow_is_409(agent: APIClient, flow: dict[str, Any]) -> None:
    other = open_flow(agent)
    steps = with_ids(2)
    add_batch(agent, other["id"], steps)

    conflict = post_batch(agent, flow["id"], steps)

    assert conflict.status_code == 409
    assert_nothing_written(flow["id"])


def test_batch_without_ids_sent_twice_writes_both(agent: APIClient, flow: dict[str, Any]) -> None:
    # No client-chosen ids means no idempotency: the second request is new work.
    add_batch(agent, flow["id"], numbered_steps(2))

    second = add_batch(agent, flow["id"], numbered_steps(2))

    assert [s["position"] for s in second] == [3, 4]
    assert step_count(flow["id"]) == 4


# --- Who may call it, and on which flow ---------------------------------------------------


def test_batch_without_token_is_401(anonymous: APIClient, flow: dict[str, Any]) -> None:
    response = post_batch(anonymous, flow["id"], numbered_steps(2))

    assert response.status_code == 401
    assert_nothing_written(flow["id"])


def test_batch_with_read_only_token_is_403(reader: APIClient, flow: dict[str, Any]) -> None:
    response = post_batch(reader, flow["id"], numbered_steps(2))

    assert response.status_code == 403
    assert_nothing_written(flow["id"])


def test_batch_with_admin_only_token_is_403(operator: APIClient, flow: dict[str, Any]) -> None:
    response = post_batch(operator, flow["id"], numbered_steps(2))

    assert response.status_code == 403
    assert_nothing_written(flow["id"])


def test_batch_on_unknown_flow_is_404(agent: APIClient) -> None:
    response = post_batch(agent, str(uuid.uuid4()), numbered_steps(2))

    assert response.status_code == 404
    assert not ReasoningStep.objects.exists()


def test_batch_on_malformed_flow_id_is_400_naming_flow_id(agent: APIClient) -> None:
    response = post_batch(agent, "not-a-uuid", numbered_steps(2))

    assert response.status_code == 400
    assert "flow_id" in response.json()


def test_batch_on_closed_flow_is_409_and_writes_nothing(agent: APIClient, flow: dict[str, Any]) -> None:
    add_single_step(agent, flow["id"])
    close_flow(agent, flow["id"])

    response = post_batch(agent, flow["id"], numbered_steps(2))

    assert response.status_code == 409
    assert ReasoningStep.objects.filter(flow_id=flow["id"]).count() == 1
    assert step_count(flow["id"]) == 1
    assert len(step_created_events()) == 1


# --- Audit --------------------------------------------------------------------------------


def test_batch_audits_one_step_created_per_step_in_order(
    agent: APIClient, flow: dict[str, Any], audit_actions: Callable[[], list[str]]
) -> None:
    before = audit_actions()

    steps = add_batch(
        agent, flow["id"], [step_body(kind="retrieval"), step_body(kind="llm_prompt"), step_body(kind="verdict")]
    )

    assert audit_actions()[len(before) :] == ["reasoning.step.created"] * 3
    events = step_created_events()
    assert [e.target_id for e in events] == [s["id"] for s in steps]
    assert [e.payload["position"] for e in events] == [1, 2, 3]
    assert [e.payload["kind"] for e in events] == ["retrieval", "llm_prompt", "verdict"]
    assert all(e.payload["flow_id"] == flow["id"] for e in events)
    assert all(e.actor == "token:agent" for e in events)


def test_batch_audit_counts_parents_within_the_batch(agent: APIClient, flow: dict[str, Any]) -> None:
    root_id, left_id = str(uuid.uuid4()), str(uuid.uuid4())
    add_batch(
        agent,
        flow["id"],
        [
            step_body(id=root_id),
            step_body(id=left_id, parent_step_id=root_id),
            step_body(parent_step_id=left_id, extra_parent_ids=[root_id]),
        ],
    )

    assert [e.payload["parent_count"] for e in step_created_events()] == [0, 1, 2]


def test_refused_batch_audits_nothing(
    agent: APIClient, flow: dict[str, Any], audit_actions: Callable[[], list[str]]
) -> None:
    before = audit_actions()
    steps = numbered_steps(3)
    steps[2]["parent_step_id"] = str(uuid.uuid4())

    post_batch(agent, flow["id"], steps)

    assert audit_actions() == before


# --- PII ----------------------------------------------------------------------------------

PATIENT_NAMES = ["Zebulon Quixote", "Philippa Marchbanks"]
MRNS = ["MRN-99887766", "MRN-11223344"]


def pii_step(n: int) -> dict[str, Any]:
    return step_body(
        inputs={"patient_name": PATIENT_NAMES[n], "dose_note": f"note {n}"},
        outputs={"mrn_value": MRNS[n], "result": "ok"},
        pii_fields=["patient_name", "mrn_value"],
    )


def raw_rows(sql: str) -> str:
    with connection.cursor() as cursor:
        cursor.execute(sql)
        return "\n".join(str(row[0]) for row in cursor.fetchall())


def test_pii_of_each_item_is_moved_out_of_inputs_and_outputs(agent: APIClient, flow: dict[str, Any]) -> None:
    steps = add_batch(agent, flow["id"], [pii_step(0), pii_step(1)])

    for n, step in enumerate(steps):
        stored = ReasoningStep.objects.get(pk=step["id"])
        assert stored.inputs == {"dose_note": f"note {n}"}
        assert stored.outputs == {"result": "ok"}
        assert stored.pii_fields == ["patient_name", "mrn_value"]
        assert stored.inputs_pii is not None
        assert stored.outputs_pii is not None
        assert json.loads(stored.inputs_pii) == {"patient_name": PATIENT_NAMES[n]}
        assert json.loads(stored.outputs_pii) == {"mrn_value": MRNS[n]}


def test_pii_of_each_item_is_not_stored_in_plaintext_nor_audited(agent: APIClient, flow: dict[str, Any]) -> None:
    response = post_batch(agent, flow["id"], [pii_step(0), pii_step(1)])

    assert response.status_code == 201
    table = raw_rows("SELECT s::text FROM reasoning_step AS s")
    trail = audit_trail_text()
    assert "note 0" in table and "note 1" in table  # the rows are there, undeclared keys readable
    assert "reasoning.step.created" in trail
    for secret in [*PATIENT_NAMES, *MRNS, "Zebulon", "Marchbanks", "99887766", "11223344"]:
        assert secret not in table
        assert secret not in trail
        assert secret not in response.content.decode()
