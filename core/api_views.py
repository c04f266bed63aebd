"""The base of every API view (declared query parameters), the OpenAPI schema class, and the
helpers every API module shares: the common error responses and query-parameter parsers."""

from __future__ import annotations

import re
import uuid
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, time
from typing import Any, ClassVar
from urllib.parse import urlencode

from django.utils import timezone
from django.utils.dateparse import parse_date, parse_datetime
from drf_spectacular.openapi import AutoSchema as SpectacularAutoSchema
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse
from rest_framework import serializers
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.settings import api_settings
from rest_framework.views import APIView

from core.errors import InvalidInput


class ApiView(APIView):
    """Base of every API view: a query parameter the view does not declare is a 400 naming it.

    ``query_parameters`` maps a method (``"get"``) to the parameters it reads; the same
    declaration is what the OpenAPI document lists (``AutoSchema.get_override_parameters``), so
    what is documented and what is accepted cannot drift apart. Without it
    ``?agent=critic`` on a route that has no such filter would silently return everything.
    """

    query_parameters: ClassVar[Mapping[str, Sequence[OpenApiParameter]]] = {}

    @classmethod
    def allowed_query_parameters(cls, method: str) -> set[str]:
        method = method.lower()
        declared = cls.query_parameters.get(method)
        if declared is None and method == "head":
            declared = cls.query_parameters.get("get")
        return {parameter.name for parameter in declared or () if parameter.location == OpenApiParameter.QUERY}

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        # After authentication and permissions: an anonymous caller learns nothing about parameters.
        super().initial(request, *args, **kwargs)
        unknown = sorted(set(request.query_params) - self.allowed_query_parameters(request.method or ""))
        if unknown:
            allowed = sorted(self.allowed_query_parameters(request.method or ""))
            hint = f" This route takes: {', '.join(allowed)}." if allowed else " This route takes none."
            raise ValidationError({name: [f"Unknown query parameter.{hint}"] for name in unknown})


# What every request string may hold: DRF refuses NUL and lone surrogates in any CharField.
_STORABLE = "[^\\u0000\\ud800-\\udfff]"
# A character that is not whitespace either (Python's str.isspace, which DRF's trimming uses; spelled
# out because `\\s` means a different set in ECMAScript regular expressions).
_NOT_BLANK = (
    "[^\\u0000\\ud800-\\udfff\\t\\n\\u000b\\f\\r\\u001c-\\u0020\\u0085\\u00a0\\u1680\\u2000-\\u200a"
    "\\u2028\\u2029\\u202f\\u205f\\u3000]"
)
STORABLE_PATTERN = f"^{_STORABLE}*$"
NOT_BLANK_PATTERN = f"^{_STORABLE}*{_NOT_BLANK}{_STORABLE}*$"


class AutoSchema(SpectacularAutoSchema):
    """drf-spectacular's schema, made to say what the server enforces.

    1. Query parameters come from the view's ``query_parameters`` declaration.
    2. A request body of a serializer with ``openapi_additional_properties = False`` (the strict
       serializers, which refuse unknown fields) says ``additionalProperties: false``; one with
       ``openapi_one_of`` (the rules its ``validate`` applies across fields) says ``oneOf`` them.
    3. A validator with ``openapi_pattern`` publishes that pattern (the allowed characters)
       instead of drf-spectacular's default of publishing a regex validator's regex even when
       it lists the forbidden ones; ``openapi_description`` is appended to the field's description.
       A field's ``openapi_validators`` are published the same way: rules a service enforces on
       the field (so that it can name them in its own words), not the field itself.
    4. A view with ``openapi_request_body_required = True`` (one that reads its body without a
       serializer) marks its request body required.
    5. A nested list (``ListSerializer(min_length=..., max_length=...)``) publishes its bounds as
       ``minItems``/``maxItems``: DRF checks them outside the field's validators, where
       drf-spectacular does not look.
    6. A request string with no pattern of its own publishes what DRF's CharField enforces of every
       string: ``STORABLE_PATTERN`` (no NUL, no lone surrogate), or ``NOT_BLANK_PATTERN`` when it may
       not be blank and is trimmed (a value of whitespace only is blank).
    """

    def get_override_parameters(self) -> list[Any]:
        declared = getattr(self.view, "query_parameters", {})
        return [*super().get_override_parameters(), *declared.get(self.method.lower(), ())]

    def _get_request_body(self, direction: str = "request") -> dict[str, Any] | None:
        body: dict[str, Any] | None = super()._get_request_body(direction)
        # A view that decodes its body itself (no serializer) says it needs one.
        if body is not None and getattr(self.view, "openapi_request_body_required", False):
            body["required"] = True
        return body

    def _map_basic_serializer(self, serializer: Any, direction: str) -> dict[str, Any]:
        schema: dict[str, Any] = super()._map_basic_serializer(serializer, direction)
        if direction == "request" and getattr(serializer, "openapi_additional_properties", True) is False:
            schema["additionalProperties"] = False
        if direction == "request" and (one_of := getattr(serializer, "openapi_one_of", None)):
            schema["oneOf"] = one_of
        if direction == "request":
            properties = schema.get("properties", {})
            for name, field in serializer.fields.items():
                prop = properties.get(field.field_name or name)
                if (
                    prop is not None
                    and isinstance(field, serializers.CharField)
                    and prop.get("type") == "string"
                    and not {"pattern", "format", "enum"} & set(prop)
                ):
                    blank_refused = field.trim_whitespace and not field.allow_blank
                    prop["pattern"] = NOT_BLANK_PATTERN if blank_refused else STORABLE_PATTERN
        return schema

    def _map_serializer_field(
        self, field: serializers.Field[Any, Any, Any, Any], direction: str, bypass_extensions: bool = False
    ) -> dict[str, Any]:
        schema: dict[str, Any] = super()._map_serializer_field(field, direction, bypass_extensions)
        if isinstance(field, serializers.ListSerializer) and schema and schema.get("type") == "array":
            # Set by ListSerializer.__init__ (the stubs do not declare them).
            for attribute, keyword in (("min_length", "minItems"), ("max_length", "maxItems")):
                if (bound := getattr(field, attribute, None)) is not None:
                    schema[keyword] = bound
        return schema

    def _insert_field_validators(self, field: serializers.Field[Any, Any, Any, Any], schema: dict[str, Any]) -> None:
        for validator in [*field.validators, *getattr(field, "openapi_validators", ())]:
            if pattern := getattr(validator, "openapi_pattern", None):
                schema["pattern"] = pattern
            if description := getattr(validator, "openapi_description", None):
                schema["description"] = (
                    f"{schema['description']} {description}" if "description" in schema else description
                )
        super()._insert_field_validators(field, schema)


# --- Shared by every app's API module ---------------------------------------------------

ERROR = OpenApiResponse(OpenApiTypes.OBJECT, description='`{"detail": "..."}` or `{"field": ["message"]}`')
ERRORS = {
    400: OpenApiResponse(OpenApiTypes.OBJECT, description="Invalid body: the message names the field."),
    401: OpenApiResponse(OpenApiTypes.OBJECT, description="Missing, unknown, revoked or expired token."),
    403: OpenApiResponse(OpenApiTypes.OBJECT, description="The token lacks the route's scope."),
}


def parse_uuid(value: str, field: str) -> uuid.UUID:
    try:
        return uuid.UUID(value)
    except ValueError:
        raise InvalidInput("must be a valid UUID", field=field) from None


def limit_parameter(*, default: int, maximum: int) -> OpenApiParameter:
    """The ``limit`` query parameter, with the bounds ``parse_limit`` enforces."""
    return OpenApiParameter(
        "limit",
        {"type": "integer", "minimum": 1, "maximum": maximum, "default": default},
        description=f"1 to {maximum}, default {default}.",
    )


def with_next_page(request: Request, response: Response, next_cursor: str | None) -> Response:
    """A keyset page's response with the next page's cursor as ``X-Next-Cursor`` and a
    ``Link: <...>; rel="next"`` carrying the same query, when there is a next page."""
    if next_cursor is not None:
        params = {k: v for k, v in request.query_params.items() if k != "cursor"}
        response["X-Next-Cursor"] = next_cursor
        response["Link"] = (
            f'<{request.build_absolute_uri(request.path)}?{urlencode({**params, "cursor": next_cursor})}>; rel="next"'
        )
    return response


_INTEGER = re.compile(r"-?[0-9]{1,18}")


# A cursor-paged list: the ``cursor`` it takes and the headers of its answer (core.cursors).
CURSOR_PARAMETER = OpenApiParameter(
    "cursor",
    str,
    description="Opaque: the `X-Next-Cursor` of the previous page (with the same filters); omit it at first.",
)
NEXT_PAGE_HEADERS = [
    OpenApiParameter(
        "X-Next-Cursor",
        str,
        OpenApiParameter.HEADER,
        response=[200],
        description="The `cursor` of the next page; absent on the last page.",
    ),
    OpenApiParameter(
        "Link", str, OpenApiParameter.HEADER, response=[200], description='The next page as `rel="next"`.'
    ),
]


def parse_limit(raw: Any, *, default: int, maximum: int) -> int:
    """An absent ``limit`` is the default; a present one, even empty (``?limit=``), must be an integer."""
    if raw is None:
        return default
    if not _INTEGER.fullmatch(raw):
        raise InvalidInput("must be an integer", field="limit")
    value = int(raw)
    if not 1 <= value <= maximum:
        raise InvalidInput(f"must be between 1 and {maximum}", field="limit")
    return value


def in_utc(value: datetime, field: str) -> datetime:
    """``value`` (aware) in UTC: PostgreSQL refuses offsets past ±15:59, which ISO 8601 allows (the
    fuzzer found -21:02 and -22:40 answered 500); a value that leaves the calendar is a 400."""
    try:
        return value.astimezone(UTC)
    except OverflowError:
        raise InvalidInput("is out of range", field=field) from None


def parse_instant(raw: str | None, field: str, *, dates: bool = False, naive: bool = False) -> datetime | None:
    """An ISO 8601 date-time with an offset, in UTC; None when absent or empty (a filter form's
    empty field). ``dates``: a date alone is accepted too, as its midnight in ``TIME_ZONE``;
    ``naive``: a date-time without an offset is read in ``TIME_ZONE`` (a command line's habit).
    Anything else is an ``InvalidInput`` naming ``field``."""
    raw = (raw or "").strip()
    if not raw:
        return None
    value: datetime | None
    try:
        day = parse_date(raw) if dates else None
        value = timezone.make_aware(datetime.combine(day, time.min)) if day is not None else parse_datetime(raw)
    except ValueError:
        value = None
    if dates and (value is None or (value.tzinfo is None and not naive)):
        offset = "" if naive else " with an offset"
        raise InvalidInput(
            f"must be an ISO 8601 date (2026-03-01) or date-time{offset} (2026-03-01T09:00:00Z)", field=field
        )
    if value is None:
        raise InvalidInput("must be an ISO 8601 date-time, e.g. 2026-03-01T09:00:00Z", field=field)
    if value.tzinfo is None and not naive:
        raise InvalidInput("must carry a time zone offset, e.g. 2026-03-01T09:00:00Z", field=field)
    if value.tzinfo is None:
        value = timezone.make_aware(value)
    return in_utc(value, field)


def parse_whole_number(raw: str | None, field: str, *, minimum: int, required: bool = True) -> int | None:
    """A query parameter holding a whole number of at most 18 digits, at least ``minimum``; None
    when absent and not ``required``."""
    if raw is None:
        if required:
            raise InvalidInput("is required", field=field)
        return None
    if not (raw.isascii() and raw.isdigit()) or len(raw) > 18:
        raise InvalidInput("must be a whole number", field=field)
    value = int(raw)
    if value < minimum:
        raise InvalidInput(f"must be at least {minimum}", field=field)
    return value


def parse_flag(raw: str | None, field: str) -> bool:
    if raw in (None, "", "false", "0"):
        return False
    if raw in ("true", "1"):
        return True
    raise InvalidInput("must be true or false", field=field)


def flat_errors(errors: Any, prefix: str = "") -> dict[str, list[str]]:
    """DRF's nested validation errors as one flat mapping named from the body's root:
    ``{"steps": {2: {"confidence": [...]}}}`` becomes ``{"steps[2].confidence": [...]}``."""
    flat: dict[str, list[str]] = {}

    def walk(detail: Any, name: str) -> None:
        if isinstance(detail, Mapping):
            for key, value in detail.items():
                if key == api_settings.NON_FIELD_ERRORS_KEY:
                    walk(value, name)
                elif isinstance(key, int):
                    walk(value, f"{name}[{key}]")
                else:
                    walk(value, f"{name}.{key}" if name else str(key))
        elif isinstance(detail, list) and detail and all(isinstance(item, str) for item in detail):
            flat.setdefault(name, []).extend(str(item) for item in detail)
        elif isinstance(detail, list):
            for index, value in enumerate(detail):
                if value:
                    walk(value, f"{name}[{index}]")
        else:
            flat.setdefault(name, []).append(str(detail))

    walk(errors, prefix)
    return flat


def document_body_limit(result: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    """drf-spectacular hook: every operation that takes a body documents the 413 a body over the
    route's limit gets (``REQUEST_MAX_BYTES``; the bulk routes document their own larger limit)."""
    for operations in result.get("paths", {}).values():
        for operation in operations.values():
            if not isinstance(operation, dict) or "requestBody" not in operation:
                continue
            operation.setdefault("responses", {}).setdefault(
                "413",
                {
                    "description": "The body is larger than REQUEST_MAX_BYTES (1 MiB by default).",
                    "content": {"application/json": {"schema": {"type": "object", "additionalProperties": {}}}},
                },
            )
    return result
