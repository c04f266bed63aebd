"""Check a real response body against the OpenAPI document the server publishes."""

from __future__ import annotations

from typing import Any


def _documented(schema: dict[str, Any], ref: str) -> dict[str, Any]:
    component: dict[str, Any] = schema["components"]["schemas"][ref.rsplit("/", 1)[-1]]
    return component


def assert_matches_schema(schema: dict[str, Any], node: dict[str, Any], value: Any) -> None:
    """``value`` has exactly the documented properties, each of the documented type."""
    if "$ref" in node:
        node = _documented(schema, node["$ref"])
    if "allOf" in node:  # a nullable $ref
        (inner,) = node["allOf"]
        assert value is not None or node.get("nullable"), node
        if value is not None:
            assert_matches_schema(schema, inner, value)
        return
    if value is None:
        assert node.get("nullable"), node
        return
    if "enum" in node:
        assert value in node["enum"], (value, node["enum"])
    kind = node.get("type")
    if (kind == "object" or "additionalProperties" in node) and "properties" not in node:
        # A map (DictField): any keys, every value of one documented type.
        assert isinstance(value, dict)
        for item in value.values():
            assert_matches_schema(schema, node.get("additionalProperties", {}), item)
    elif kind == "object" or "properties" in node:
        assert isinstance(value, dict)
        assert set(value) == set(node["properties"]), (set(value), set(node["properties"]))
        assert set(node.get("required", [])) <= set(value)
        for key, item in value.items():
            assert_matches_schema(schema, node["properties"][key], item)
    elif kind == "array":
        assert isinstance(value, list)
        for item in value:
            assert_matches_schema(schema, node["items"], item)
    elif kind == "string":
        assert isinstance(value, str)
    elif kind == "integer":
        assert isinstance(value, int) and not isinstance(value, bool)
    elif kind == "boolean":
        assert isinstance(value, bool)
    elif kind == "number":
        assert isinstance(value, int | float) and not isinstance(value, bool)
