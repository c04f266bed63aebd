"""The compiled fast path of ``core.serializers.validated``: a msgspec type derived from a strict serializer.

The serializer stays the one schema (the OpenAPI document is drawn from it). From it, at first use,
``compile_serializer`` derives a ``msgspec.Struct`` that checks a body's shape in C: the fields and their
types, which are required, unknown fields, string and list lengths, integer and number bounds, choices,
UUIDs, nested bodies and lists of them. What msgspec cannot express runs in Python on what it accepted:
NUL and lone surrogate characters, surrounding whitespace, date-times, JSON objects, the fields' other
validators (labels, plain text, ...), ``validate_<field>`` methods and the serializer's ``validate``.

The fast path is a strict subset of DRF. When it accepts a body, the result is the dict DRF returns: the
same keys in the same order, the same values of the same types. When msgspec refuses, a check fails, or a
value is one whose DRF result it does not reproduce (a string with surrounding whitespace, a naive or
oddly written date-time, a number sent as a string, a ``str`` subclass, ...), it answers ``None`` and
``validated`` runs the serializer, which gives today's errors word for word.
tests/core/test_compiled_serializers.py compares the two on generated bodies.

A serializer using anything not translated here (a field class not in ``_FIELDS``, even a subclass; a
``source``; a default; a read-only field; ``Meta.validators``; an overridden DRF hook) gets no fast path:
DRF validates it as before.
"""

from __future__ import annotations

import math
import re
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import datetime, tzinfo
from typing import Annotated, Any, Literal

import msgspec
from django.conf import settings
from django.core.validators import (
    MaxLengthValidator,
    MaxValueValidator,
    MinLengthValidator,
    MinValueValidator,
    ProhibitNullCharactersValidator,
    RegexValidator,
)
from django.utils import timezone
from rest_framework import ISO_8601, serializers
from rest_framework.fields import empty
from rest_framework.settings import api_settings
from rest_framework.validators import ProhibitSurrogateCharactersValidator

from core.plain_text import has_forbidden_char
from core.serializers import (
    _SURROGATE,
    MAX_JSON_DEPTH,
    JSONObjectField,
    PlainTextValidator,
    StrictBooleanField,
    StrictCharField,
    StrictFloatField,
    StrictIntegerField,
    StrictSerializer,
    StrictUUIDField,
    _SurrogateValidator,
)

FastPath = Callable[[Any], "dict[str, Any] | None"]
# (what msgspec made of a value, the value as sent) -> the validated value; raises to let DRF decide.
Check = Callable[[Any, Any], Any]

# The DRF hooks a serializer must have as StrictSerializer has them: the fast path reproduces those.
_SERIALIZER_HOOKS = (
    "to_internal_value",
    "run_validation",
    "run_validators",
    "validate_empty_values",
    "get_value",
    "get_validators",
    "_writable_fields",
    "_read_only_defaults",
    "set_value",
)
# A float holds every integer up to this exactly: an integer bound beyond it is left to DRF.
_EXACT_FLOAT_INT = 2**53


class _Unsupported(Exception):
    """The serializer uses something this module does not translate: no fast path."""


class _Fallback(Exception):
    """The fast path cannot vouch for this body: DRF decides."""


@dataclass(frozen=True)
class _Compiled:
    type: Any  # the msgspec type
    check: Check | None  # None: what msgspec made is what DRF returns


def compile_serializer(serializer: serializers.Serializer[Any]) -> FastPath | None:
    """A function returning ``serializer``'s validated data for a body, as a new dict, or ``None`` when DRF
    must decide (it may refuse the body, or accept it); ``None`` when the serializer cannot be translated."""
    try:
        compiled = _serializer(serializer)
    except _Unsupported:
        return None
    struct_type, check = compiled.type, compiled.check
    assert check is not None
    convert = msgspec.convert

    def fast(data: Any) -> dict[str, Any] | None:
        try:
            result = check(convert(data, struct_type), data)
        # msgspec's ValidationError, _Fallback, or whatever a validator raised: DRF decides (and raises it again).
        except Exception:
            return None
        return result if result.__class__ is dict else dict(result)

    return fast


def _serializer(serializer: serializers.Serializer[Any]) -> _Compiled:
    cls = type(serializer)
    if not isinstance(serializer, StrictSerializer) or serializer.validators:
        raise _Unsupported(f"{cls.__name__}: not a StrictSerializer, or has Meta.validators")
    if any(getattr(cls, hook) is not getattr(StrictSerializer, hook) for hook in _SERIALIZER_HOOKS):
        raise _Unsupported(f"{cls.__name__} overrides a DRF hook")
    specs: list[tuple[str, Any] | tuple[str, Any, Any]] = []
    plan: list[tuple[str, Check | None, Callable[[Any], Any] | None, bool]] = []
    for name, field in serializer.fields.items():
        if field.read_only or field.source_attrs != [name] or field.default is not empty or not name.isidentifier():
            raise _Unsupported(f"{cls.__name__}.{name}: read-only, a source, a default, or not an identifier")
        compiled = _field(field)
        field_type = compiled.type | None if field.allow_null else compiled.type
        specs.append((name, field_type) if field.required else (name, field_type | msgspec.UnsetType, msgspec.UNSET))
        # DRF looks the method up by name for every field it validates.
        plan.append((name, compiled.check, getattr(serializer, f"validate_{name}", None), field.allow_null))
    struct_type = msgspec.defstruct(cls.__name__, specs, kw_only=True, forbid_unknown_fields=True)
    validate = None if cls.validate is serializers.Serializer.validate else serializer.validate
    unset, astuple = msgspec.UNSET, msgspec.structs.astuple

    def check(value: Any, raw: Any) -> Any:
        # A dict subclass may be an HTML form's (QueryDict), which DRF reads otherwise.
        if raw.__class__ is not dict:
            raise _Fallback
        attrs: dict[str, Any] = {}
        # The struct's fields are the serializer's, in its order: DRF's order of validated data.
        for (name, field_check, validate_field, allow_null), item in zip(plan, astuple(value), strict=True):
            if item is unset:
                continue
            if item is None:
                # DRF returns a null as it is, unchecked; a JSON object's type (Any) lets one through.
                if not allow_null:
                    raise _Fallback
            elif field_check is not None:
                item = field_check(item, raw[name])
            if validate_field is not None:
                item = validate_field(item)
            attrs[name] = item
        if validate is not None:
            attrs = validate(attrs)
            if attrs is None:
                raise _Fallback  # DRF asserts
        return attrs

    return _Compiled(struct_type, check)


def _field(field: serializers.Field[Any, Any, Any, Any]) -> _Compiled:
    if field.read_only:
        raise _Unsupported(f"{field.field_name}: read-only")
    translate = _FIELDS.get(type(field))
    if translate is not None:
        return translate(field)
    if isinstance(field, serializers.Serializer):
        return _serializer(field)
    raise _Unsupported(f"{field.field_name}: {type(field).__name__} is not translated")


def _validators(field: serializers.Field[Any, Any, Any, Any], kind: str) -> tuple[dict[str, Any], list[Any]]:
    """The msgspec constraints (``msgspec.Meta`` arguments) that the field's length and bound validators
    amount to, and the validators left to call (DRF's and Django's text checks are the text check's)."""
    meta: dict[str, Any] = {}
    calls: list[Any] = []
    for validator in field.validators:
        kind_of = type(validator)
        limit: Any = getattr(validator, "limit_value", None)
        if kind_of is MaxLengthValidator and kind in ("text", "list") and type(limit) is int:
            meta["max_length"] = min(limit, meta.get("max_length", limit))
        elif kind_of is MinLengthValidator and kind in ("text", "list") and type(limit) is int:
            meta["min_length"] = max(limit, meta.get("min_length", limit))
        elif kind_of is MaxValueValidator and _exact_bound(limit, kind):
            meta["le"] = min(limit, meta.get("le", limit))
        elif kind_of is MinValueValidator and _exact_bound(limit, kind):
            meta["ge"] = max(limit, meta.get("ge", limit))
        elif kind == "text" and kind_of in (
            ProhibitNullCharactersValidator,
            ProhibitSurrogateCharactersValidator,
            _SurrogateValidator,
        ):
            pass
        elif (
            kind == "text"
            and not getattr(field, "allow_blank", True)
            and "pattern" not in meta
            and (pattern := _search_pattern(validator)) is not None
        ):
            # msgspec searches as RegexValidator does (re.search, the pattern's own anchors). Not for a field that
            # may be blank: DRF accepts a blank value before its validators, msgspec's pattern would refuse it.
            meta["pattern"] = pattern
        elif kind == "text" and isinstance(validator, PlainTextValidator) and kind_of is PlainTextValidator:
            calls.append(_plain_text(validator.multiline))
        elif getattr(validator, "requires_context", False):
            calls.append(_with_field(validator, field))
        else:
            calls.append(validator)
    return meta, calls


def _search_pattern(validator: Any) -> str | None:
    """The pattern of a RegexValidator (the label rule) that passes when the pattern, compiled without flags,
    is found; None for any other validator."""
    if not isinstance(validator, RegexValidator) or type(validator).__call__ is not RegexValidator.__call__:
        return None
    regex: Any = validator.regex
    pattern = regex.pattern
    plain = not validator.inverse_match and isinstance(pattern, str) and regex.flags == re.compile(pattern).flags
    return pattern if plain else None


def _exact_bound(limit: Any, kind: str) -> bool:
    if kind == "int":
        return type(limit) is int
    if kind == "float":
        return type(limit) is float or (type(limit) is int and abs(limit) <= _EXACT_FLOAT_INT)
    return False


def _plain_text(multiline: bool) -> Callable[[str], None]:
    def check(value: str) -> None:
        # PlainTextValidator's test without its Python call; DRF's pass words the refusal.
        if has_forbidden_char(value, multiline=multiline):
            raise _Fallback

    return check


def _with_field(validator: Any, field: serializers.Field[Any, Any, Any, Any]) -> Callable[[Any], Any]:
    return lambda value: validator(value, field)


def _constrained(base: Any, meta: dict[str, Any]) -> Any:
    return Annotated[base, msgspec.Meta(**meta)] if meta else base


# --- The fields -------------------------------------------------------------------------------------------


def _text(field: StrictCharField) -> _Compiled:
    meta, calls = _validators(field, "text")
    allow_blank, trim = field.allow_blank, field.trim_whitespace
    # DRF answers a blank value before any validator: msgspec's minimum would refuse one.
    shortest = meta.pop("min_length", 0) if allow_blank else 0

    def check(value: str, raw: Any) -> str:
        # A str subclass: DRF keeps str(value), which need not be the same.
        if raw.__class__ is not str:
            raise _Fallback
        if not value:
            if allow_blank:
                return ""
            raise _Fallback
        # DRF trims before its blank and length checks; str.strip and str.isspace agree on what is whitespace.
        if trim and (value[0].isspace() or value[-1].isspace()):
            raise _Fallback
        if len(value) < shortest or "\x00" in value or (not value.isascii() and _SURROGATE.search(value)):
            raise _Fallback
        for call in calls:
            call(value)
        return value

    return _Compiled(_constrained(str, meta), check)


def _integer(field: StrictIntegerField) -> _Compiled:
    meta, calls = _validators(field, "int")

    def check(value: int, raw: Any) -> int:
        # An int subclass: DRF keeps int(str(value)).
        if raw.__class__ is not int:
            raise _Fallback
        for call in calls:
            call(value)
        return value

    return _Compiled(_constrained(int, meta), check)


def _number(field: StrictFloatField) -> _Compiled:
    meta, calls = _validators(field, "float")

    def check(value: float, raw: Any) -> float:
        if raw.__class__ is not float and raw.__class__ is not int:
            raise _Fallback
        value = float(raw)  # DRF's conversion: an integer becomes a float
        if not math.isfinite(value):
            raise _Fallback
        for call in calls:
            call(value)
        return value

    return _Compiled(_constrained(float, meta), check)


def _boolean(field: StrictBooleanField) -> _Compiled:
    _, calls = _validators(field, "bool")

    def check(value: bool, raw: Any) -> bool:
        for call in calls:
            call(value)
        return value

    return _Compiled(bool, check if calls else None)


def _uuid(field: StrictUUIDField) -> _Compiled:
    _, calls = _validators(field, "uuid")

    def check(value: uuid.UUID, raw: Any) -> uuid.UUID:
        # msgspec also passes a UUID object through; StrictUUIDField takes only strings.
        if raw.__class__ is not str:
            raise _Fallback
        for call in calls:
            call(value)
        return value

    return _Compiled(uuid.UUID, check)


def _choice(field: serializers.ChoiceField) -> _Compiled:
    _, calls = _validators(field, "choice")
    values = dict(field.choice_strings_to_values)
    if field.allow_blank:
        values.pop("", None)  # DRF answers "" itself
    if not values:
        raise _Unsupported(f"{field.field_name}: no choices")

    def check(value: str, raw: Any) -> Any:
        if raw.__class__ is not str:
            raise _Fallback
        choice = values[value]  # the choice's own value: an int for integer choices
        for call in calls:
            call(choice)
        return choice

    return _Compiled(Literal[tuple(values)], check)


# The time zone date-times are given in, read once for a batch of bodies (``one_time_zone``).
_BATCH_ZONE: ContextVar[tzinfo | None] = ContextVar("compiled_serializers_batch_zone", default=None)


@contextmanager
def one_time_zone() -> Iterator[None]:
    """Within it, the fast path gives date-times in the time zone current on entry, read once: DRF
    reads the current time zone for every value (Django's ``get_current_timezone``: asgiref's
    ``Local``, some microseconds a read), a cost of its own in a batch of many steps. For a loop
    over bodies that activates no other time zone within it (nothing in this project does)."""
    token = _BATCH_ZONE.set(timezone.get_current_timezone())
    try:
        yield
    finally:
        _BATCH_ZONE.reset(token)


def _datetime(field: serializers.DateTimeField) -> _Compiled:
    formats = api_settings.DATETIME_INPUT_FORMATS
    if hasattr(field, "timezone") or hasattr(field, "input_formats") or [f.lower() for f in formats] != [ISO_8601]:
        raise _Unsupported(f"{field.field_name}: a time zone or input formats of its own")
    _, calls = _validators(field, "datetime")
    fromisoformat, current_timezone, batch_zone = datetime.fromisoformat, timezone.get_current_timezone, _BATCH_ZONE.get

    def check(value: str, raw: Any) -> datetime:
        if raw.__class__ is not str or not settings.USE_TZ or api_settings.DATETIME_INPUT_FORMATS is not formats:
            raise _Fallback
        # What Django's parse_datetime tries first; what it accepts otherwise is DRF's to read.
        parsed = fromisoformat(value)
        if parsed.tzinfo is None:
            raise _Fallback  # DRF makes a naive time aware in the current time zone
        parsed = parsed.astimezone(batch_zone() or current_timezone())
        for call in calls:
            call(parsed)
        return parsed

    return _Compiled(str, check)


def _plain_json(value: Any, depth: int) -> bool:
    """Whether ``value`` is what JSONObjectField accepts as it is, built only of what a JSON parser
    yields (dicts of text keys, lists, text, numbers, booleans, null): no NUL or lone surrogate in
    any text, no NaN or infinity, nothing deeper than MAX_JSON_DEPTH. One walk, where DRF encodes
    the value to see that it can (``json.dumps``) and then walks it; anything else is left to DRF."""
    if depth > MAX_JSON_DEPTH:
        return False
    cls = value.__class__
    if cls is str:
        return "\x00" not in value and (value.isascii() or not _SURROGATE.search(value))
    if cls is dict:
        for key, item in value.items():
            if key.__class__ is not str or "\x00" in key or (not key.isascii() and _SURROGATE.search(key)):
                return False
            if not _plain_json(item, depth + 1):
                return False
        return True
    if cls is list:
        return all(_plain_json(item, depth + 1) for item in value)
    if cls is float:
        return math.isfinite(value)  # DRF's encoder refuses NaN and the infinities
    return cls is int or cls is bool or value is None


def _json_object(field: JSONObjectField) -> _Compiled:
    _, calls = _validators(field, "json")
    to_internal_value = field.to_internal_value
    plain = type(field) is JSONObjectField and not field.binary and field.encoder is None

    def check(value: Any, raw: Any) -> Any:
        if plain:
            if value.__class__ is not dict or not _plain_json(value, 0):
                raise _Fallback
        else:
            value = to_internal_value(value)
        for call in calls:
            call(value)
        return value

    return _Compiled(Any, check)


def _list_field(field: serializers.ListField) -> _Compiled:
    child = _field(field.child)
    child_check, child_nullable = child.check, field.child.allow_null
    meta, calls = _validators(field, "list")
    if not field.allow_empty:
        meta["min_length"] = max(1, meta.get("min_length", 1))

    def check(value: list[Any], raw: Any) -> list[Any]:
        # DRF takes any iterable; its answer for a tuple or a set is left to it.
        if raw.__class__ is not list:
            raise _Fallback
        items = []
        for item, raw_item in zip(value, raw, strict=True):
            if item is None:
                if not child_nullable:
                    raise _Fallback
            elif child_check is not None:
                item = child_check(item, raw_item)
            items.append(item)
        for call in calls:
            call(items)
        return items

    item_type = child.type | None if child_nullable else child.type
    return _Compiled(_constrained(list[item_type], meta), check)  # type: ignore[valid-type]


def _list_serializer(field: Any) -> _Compiled:  # a ListSerializer (its stubs lack min_length and max_length)
    child_serializer = field.child
    if field.validators or child_serializer is None or child_serializer.allow_null:
        raise _Unsupported(f"{field.field_name}: validators or a nullable child")
    child = _field(child_serializer)
    child_check = child.check
    assert child_check is not None
    meta: dict[str, Any] = {}
    if field.max_length is not None:
        meta["max_length"] = field.max_length
    minimum = max(field.min_length or 0, 0 if field.allow_empty else 1)
    if minimum:
        meta["min_length"] = minimum

    def check(value: list[Any], raw: Any) -> list[Any]:
        if raw.__class__ is not list:
            raise _Fallback
        return [child_check(item, raw_item) for item, raw_item in zip(value, raw, strict=True)]

    return _Compiled(_constrained(list[child.type], meta), check)  # type: ignore[name-defined]


_FIELDS: dict[type[Any], Callable[[Any], _Compiled]] = {
    StrictCharField: _text,
    StrictIntegerField: _integer,
    StrictFloatField: _number,
    StrictBooleanField: _boolean,
    StrictUUIDField: _uuid,
    serializers.ChoiceField: _choice,
    serializers.DateTimeField: _datetime,
    JSONObjectField: _json_object,
    serializers.ListField: _list_field,
    serializers.ListSerializer: _list_serializer,
}
