"""What the schema-driven fuzzer (tests/test_fuzz.py) needs beyond schemathesis: the published
OpenAPI document, and which token each operation needs, read from the views' own permissions."""

from __future__ import annotations

import json
import os
import re
from types import SimpleNamespace
from typing import Any

from django.urls import resolve
from jsonschema import Draft4Validator
from rest_framework.permissions import AllowAny
from rest_framework.test import APIClient

from reasoning.access import CanReadNarrative
from reasoning.auth import CanRead, CanReadAudit, CanWrite, IsAdmin

SCHEMA_PATH = "/api/schema/?format=json"

# The documented bound: no answer under fuzzing may take longer (docs/operations.md, "Fuzzing").
MAX_RESPONSE_SECONDS = 5.0

# Examples per operation: small in `make test`, larger under `make fuzz` (FUZZ_EXAMPLES=500).
EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "10"))
# Steps of the stateful (links) phase: a handful of scenarios in `make test`.
STATEFUL_EXAMPLES = int(os.environ.get("FUZZ_STATEFUL_EXAMPLES", str(max(EXAMPLES // 2, 5))))
# The coverage phase (every documented boundary, every unexpected method) under `make fuzz`.
COVERAGE = os.environ.get("FUZZ_COVERAGE", "0").lower() in ("1", "true", "yes")
# `make test` replays the same examples every run (a failure reproduces); `make fuzz` explores
# (FUZZ_RANDOM=1).
DERANDOMIZE = os.environ.get("FUZZ_RANDOM", "0").lower() not in ("1", "true", "yes")

HTTP_METHODS = ("get", "post", "put", "patch", "delete")

# The persona each permission class admits (tests/test_fuzz.py makes one token per persona).
PERSONA_OF_PERMISSION: dict[type, str] = {
    CanWrite: "writer",
    CanRead: "reader",
    IsAdmin: "admin",
    CanReadAudit: "auditor",
    CanReadNarrative: "patient",
    AllowAny: "anonymous",
}


def published_schema() -> dict[str, Any]:
    """The document the server publishes at /api/schema/ (the live server serves the same one:
    tests/test_fuzz.py checks)."""
    response = APIClient().get(SCHEMA_PATH)
    assert response.status_code == 200, response.content
    document: dict[str, Any] = json.loads(response.content)
    return document


def persona_for(path: str, method: str) -> str:
    """The persona whose token an operation needs, from the view's permissions for ``method``.

    ``path`` is the OpenAPI template (``/api/reasoning/flows/{flow_id}``); every parameter is
    filled with a placeholder so Django resolves it to its view.
    """
    match = resolve(re.sub(r"\{[^}]+\}", "1", path))
    view_class = match.func.view_class  # type: ignore[attr-defined]
    view = view_class()
    view.request = SimpleNamespace(method=method.upper())
    view.args, view.kwargs = (), match.kwargs
    permissions = view.get_permissions()
    personas = {PERSONA_OF_PERMISSION[type(permission)] for permission in permissions}
    assert len(personas) == 1, f"{method.upper()} {path}: one persona per operation, found {personas}"
    return personas.pop()


def body_conforms(document: dict[str, Any], operation: dict[str, Any], body: Any) -> bool:
    """Whether ``body`` is valid against ``operation``'s documented JSON request body.

    Schemathesis's positive mode now and then draws a string its own pattern rules out (a NUL
    inside a `pattern` that excludes it): the server's 400 for such a body is right, so the
    "valid data should have been accepted" check is waived for exactly these bodies.
    """
    content = operation.get("requestBody", {}).get("content", {}).get("application/json")
    if content is None:
        return True
    validator = Draft4Validator({**content["schema"], "components": document["components"]})
    return bool(validator.is_valid(body))


def operations(schema: dict[str, Any]) -> list[tuple[str, str]]:
    return [(path, method) for path, item in schema["paths"].items() for method in item if method in HTTP_METHODS]
