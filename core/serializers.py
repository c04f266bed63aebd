"""Strict serializer fields and validators every app's API shares.

DRF quietly coerces (123 → "123", "yes" → true, "0.5" → 0.5) and drops unknown fields;
these refuse instead, naming the field.
"""

from __future__ import annotations

import re
import threading
import unicodedata
from functools import cache
from typing import TYPE_CHECKING, Any

from django.core.exceptions import ValidationError
from django.utils.deconstruct import deconstructible
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers
from rest_framework.exceptions import ErrorDetail
from rest_framework.fields import empty
from rest_framework.settings import api_settings
from rest_framework.validators import ProhibitSurrogateCharactersValidator

from core.labels import label_validator
from core.plain_text import FORBIDDEN_TEXT_CATEGORIES, has_forbidden_char

if TYPE_CHECKING:
    from core.compiled_serializers import FastPath


@deconstructible
class PlainTextValidator:
    """Refuse characters of ``FORBIDDEN_TEXT_CATEGORIES``; ``multiline`` text may hold tab, LF and CR.

    Not a RegexValidator: drf-spectacular would publish its regex as a positive ``pattern``
    even though it lists the forbidden characters. ``openapi_pattern`` is the published
    form: the allowed characters of the Basic Multilingual Plane (a JSON Schema pattern
    cannot name Unicode categories portably). Every value it matches is accepted here;
    characters past U+FFFF (emoji, …) are accepted too unless they are format or private-use.
    """

    def __init__(self, message: str, *, multiline: bool = False) -> None:
        self.message = message
        self.multiline = multiline

    def __call__(self, value: str) -> None:
        if has_forbidden_char(value, multiline=self.multiline):
            raise ValidationError(self.message, code="invalid")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PlainTextValidator) and (self.message, self.multiline) == (
            other.message,
            other.multiline,
        )

    def __hash__(self) -> int:
        return hash((self.message, self.multiline))

    @property
    def openapi_pattern(self) -> str:
        return _allowed_bmp_pattern(self.multiline)

    @property
    def openapi_description(self) -> str:
        lines = "Tab, line feed and carriage return are allowed. " if self.multiline else "One line. "
        return (
            "Plain text: no control characters, no format characters (zero-width, bidirectional controls, soft "
            "hyphen, BOM), no line/paragraph separators (U+2028, U+2029), surrogates or private-use characters "
            f"(Unicode categories Cc, Cf, Zl, Zp, Cs, Co). {lines}Surrounding whitespace is trimmed. `pattern` "
            "lists the allowed characters up to U+FFFF; characters beyond it are accepted unless they are format "
            "or private-use characters."
        )


@cache
def _allowed_bmp_pattern(multiline: bool) -> str:
    """The published pattern: allowed BMP characters, with no whitespace at either end.

    ``^(?:N(?:C*N)?)?$`` where C is every allowed character and N the non-whitespace ones: the
    server trims surrounding whitespace (a value of spaces only is blank), so a value this
    matches is one the server keeps as sent.
    """
    extra = {0x09, 0x0A, 0x0D} if multiline else set()
    allowed = [
        code
        for code in range(0x10000)
        if code in extra or unicodedata.category(chr(code)) not in FORBIDDEN_TEXT_CATEGORIES
    ]
    any_char = _char_class(allowed)
    edge_char = _char_class([code for code in allowed if not chr(code).isspace()])
    return f"^(?:{edge_char}(?:{any_char}*{edge_char})?)?$"


def _char_class(codes: list[int]) -> str:
    """``[\\uXXXX-\\uYYYY...]`` for sorted code points, merged into ranges."""
    ranges: list[tuple[int, int]] = []
    for code in codes:
        if ranges and ranges[-1][1] == code - 1:
            ranges[-1] = (ranges[-1][0], code)
        else:
            ranges.append((code, code))
    return "[" + "".join(f"\\u{lo:04x}" if lo == hi else f"\\u{lo:04x}-\\u{hi:04x}" for lo, hi in ranges) + "]"


# Summaries are shown to patients as single lines of plain text.
plain_text_validator = PlainTextValidator(
    "Must be plain text on one line (no control, format or separator characters such as U+200B, U+202E, U+2028)."
)
# Questions and notes may span lines (\n, or \r\n from a browser's textarea) and hold tabs.
multiline_text_validator = PlainTextValidator("Must be text without control characters.", multiline=True)

MAX_JSON_DEPTH = 20
_SURROGATE = re.compile("[\ud800-\udfff]")


def label_field(*, max_length: int = 100, **kwargs: Any) -> serializers.CharField:
    return StrictCharField(max_length=max_length, validators=[label_validator], **kwargs)


class _SurrogateValidator(ProhibitSurrogateCharactersValidator):
    """DRF's check and message, with a regex instead of a Python loop over the characters."""

    def __call__(self, value: Any) -> None:
        if match := _SURROGATE.search(str(value)):
            raise serializers.ValidationError(self.message.format(code_point=ord(match.group())), code=self.code)


class StrictCharField(serializers.CharField):
    """A string, and only a string: DRF would quietly turn 123 into "123"."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.validators = [
            _SurrogateValidator() if isinstance(v, ProhibitSurrogateCharactersValidator) else v for v in self.validators
        ]

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


def _is_json_number(data: Any) -> bool:
    # bool is an int subclass: true would otherwise count as 1.
    return isinstance(data, int | float) and not isinstance(data, bool)


class StrictFloatField(serializers.FloatField):
    """A JSON number (integers included): DRF would quietly turn true into 1.0 and "0.5" into 0.5."""

    default_error_messages = {"invalid": "A valid number is required. Send a JSON number, not a string or boolean."}

    def to_internal_value(self, data: Any) -> float:
        if not _is_json_number(data):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictIntegerField(serializers.IntegerField):
    """A JSON integer: DRF would quietly turn true into 1 and "7" into 7."""

    default_error_messages = {"invalid": "A valid integer is required. Send a JSON number, not a string or boolean."}

    def to_internal_value(self, data: Any) -> int:
        if not _is_json_number(data):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictUUIDField(serializers.UUIDField):
    """A UUID written as a string: DRF would quietly turn 42 into 00000000-…-00000000002a."""

    def to_internal_value(self, data: Any) -> Any:
        if not isinstance(data, str):
            self.fail("invalid", value=data)
        return super().to_internal_value(data)


class StrictBooleanField(serializers.BooleanField):
    """``true`` or ``false``: DRF would quietly accept "yes", "on", 1 and 0."""

    def to_internal_value(self, data: Any) -> bool:
        if not isinstance(data, bool):
            self.fail("invalid", input=data)
        return data


class StrictSerializer(serializers.Serializer[Any]):
    """Rejects fields it does not know, naming them, instead of silently dropping them."""

    # Read by core.api_views.AutoSchema: the request body schema says so (additionalProperties: false).
    openapi_additional_properties = False

    def to_internal_value(self, data: Any) -> Any:
        if not isinstance(data, dict):
            return super().to_internal_value(data)
        unknown = sorted(set(data) - set(self.fields))
        if unknown:
            raise serializers.ValidationError({name: ["Unknown field."] for name in unknown})
        self._strict_present = data
        try:
            return super().to_internal_value(data)
        finally:
            self._strict_present = None

    _strict_present: dict[str, Any] | None = None

    def _read_only_defaults(self) -> dict[str, Any]:
        # DRF walks every field for read-only ones with a default on each validation; these
        # serializers declare none, which is worth knowing once.
        if self.__dict__.get("_has_read_only_defaults") is False:
            return {}
        defaults: dict[str, Any] = super()._read_only_defaults()
        self._has_read_only_defaults = any(
            field.read_only and field.default is not empty for field in self.fields.values()
        )
        return defaults

    @property
    def _writable_fields(self) -> list[serializers.Field[Any, Any, Any, Any]]:
        """DRF's, less the optional fields without a default that the body leaves out: for those
        DRF's loop only raises and catches SkipField (a step body sends a few of its ~25
        fields, and validating it cost more than writing it)."""
        present = self._strict_present
        return [
            field
            for field in self.fields.values()
            if not field.read_only
            and (present is None or field.field_name in present or field.required or field.default is not empty)
        ]


@extend_schema_field(
    {
        "type": "object",
        "additionalProperties": True,
        "description": f"A JSON object: no NUL characters or lone surrogates in its strings and keys, nested at most "
        f"{MAX_JSON_DEPTH} levels.",
    }
)
class JSONObjectField(serializers.JSONField):
    """A JSON object (dict) whose strings Postgres can store (no NUL characters)."""

    default_error_messages = {
        "not_object": "Must be a JSON object.",
        "nul": "Must not contain NUL (\\u0000) characters.",
        "surrogate": "Must not contain lone surrogate characters (U+D800 to U+DFFF).",
        "depth": f"Must not nest deeper than {MAX_JSON_DEPTH} levels.",
    }

    def to_internal_value(self, data: Any) -> Any:
        value = super().to_internal_value(data)
        if not isinstance(value, dict):
            self.fail("not_object")
        self._check(value, 0)
        return value

    def _check_text(self, text: str) -> None:
        if "\x00" in text:
            self.fail("nul")
        if _SURROGATE.search(text):
            self.fail("surrogate")

    def _check(self, value: Any, depth: int) -> None:
        if depth > MAX_JSON_DEPTH:
            self.fail("depth")
        if isinstance(value, str):
            self._check_text(value)
        elif isinstance(value, dict):
            for key, item in value.items():
                self._check_text(key)
                self._check(item, depth + 1)
        elif isinstance(value, list):
            for item in value:
                self._check(item, depth + 1)


_instances = threading.local()


def validated(serializer_class: type[serializers.Serializer[Any]], data: Any) -> dict[str, Any]:
    """``serializer_class(data=data)``'s validated data, or its ``ValidationError`` (the same
    ``detail`` as ``.errors``), from one instance per class and thread: DRF deep-copies every
    declared field for each new instance, which costs more than validating a step.

    A body goes first through the serializer's compiled fast path (``core.compiled_serializers``),
    which answers exactly what DRF would for the bodies it accepts and leaves every other to DRF."""
    cache: dict[type[Any], tuple[serializers.Serializer[Any], FastPath | None]]
    cache = _instances.__dict__.setdefault("by_class", {})
    entry = cache.get(serializer_class)
    if entry is None:
        # Imported here: that module reads this one's field classes.
        from core.compiled_serializers import compile_serializer

        instance = serializer_class()
        entry = cache[serializer_class] = (instance, compile_serializer(instance))
    instance, fast = entry
    if fast is not None and (result := fast(data)) is not None:
        return result
    return drf_validated(instance, data)


def drf_validated(instance: serializers.Serializer[Any], data: Any) -> dict[str, Any]:
    """DRF's answer alone (``validated`` without its fast path): the reference the fast path is tested against."""
    try:
        return dict(instance.run_validation(data))
    except serializers.ValidationError as exc:
        # As ``Serializer.errors`` presents them: a body-level problem under non_field_errors.
        detail = exc.detail
        if isinstance(detail, list):
            if len(detail) == 1 and getattr(detail[0], "code", None) == "null":
                detail = [ErrorDetail("No data provided", code="null")]
            detail = {api_settings.NON_FIELD_ERRORS_KEY: detail}
        raise serializers.ValidationError(detail) from None
