"""OpenAPI links of a flow's life: open it, add steps, close it, read it.

A link says that a value in one operation's answer (or request) is a parameter of the next: the
`id` of a flow `POST /api/reasoning/flows` created is the `flow_id` of its steps, its close and its
reads. Clients and code generators read them to chain calls; the stateful fuzzer
(tests/test_fuzz.py) follows them to build whole flows.
"""

from __future__ import annotations

from typing import Any

FROM_CREATED = "$response.body#/id"
FROM_PATH = "$request.path.flow_id"

# operationId -> what follows it: link name -> (operationId, where its flow_id comes from).
_NEXT: dict[str, dict[str, str]] = {
    "flows_create": {
        "AddStep": "steps_create",
        "AddSteps": "steps_create_batch",
        "CloseFlow": "flows_close",
        "ReadFlow": "admin_flows_read",
    },
    "steps_create": {
        "AddStep": "steps_create",
        "CloseFlow": "flows_close",
        "ReadFlow": "admin_flows_read",
    },
    "steps_create_batch": {
        "AddStep": "steps_create",
        "CloseFlow": "flows_close",
        "ReadFlow": "admin_flows_read",
    },
    "flows_close": {
        "RecordOutcome": "flows_outcome",
        "ReadFlow": "admin_flows_read",
    },
}
_SOURCE = {"flows_create": FROM_CREATED}
_DESCRIPTIONS = {
    "AddStep": "Add a step to this flow.",
    "AddSteps": "Add a batch of steps to this flow.",
    "CloseFlow": "Close this flow (completed or aborted).",
    "RecordOutcome": "Record the closed flow's outcome.",
    "ReadFlow": "Read this flow, its steps and audit trail (operators).",
}
_SUCCESS = ("200", "201")


def document_flow_links(result: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    """drf-spectacular hook: the links of _NEXT on each operation's success answers."""
    operations = {
        operation.get("operationId"): operation
        for item in result.get("paths", {}).values()
        for operation in item.values()
        if isinstance(operation, dict)
    }
    for source, targets in _NEXT.items():
        operation = operations.get(source)
        if operation is None:
            continue
        links = {
            name: {
                "operationId": target,
                "parameters": {"flow_id": _SOURCE.get(source, FROM_PATH)},
                "description": _DESCRIPTIONS[name],
            }
            for name, target in targets.items()
            if target in operations
        }
        for status in _SUCCESS:
            answer = operation.get("responses", {}).get(status)
            if answer is not None:
                answer["links"] = dict(links)
    return result
