"""The compiled fast path (core.compiled_serializers) against DRF: for every body, the same answer.

Bodies are generated from each ingest serializer's own fields: values a client sends, and the edge
cases where DRF's answer is easy to get wrong (surrounding whitespace, NULs, blanks, nulls, unknown
fields, bounds, booleans for numbers, integers for floats, naive and offset date-times, nested lists).
"""

from __future__ import annotations

import enum
import math
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta, timezone
from functools import cache
from typing import Any

import pytest
from django.core.validators import MaxLengthValidator
from django.test import override_settings
from django.utils import timezone as django_timezone
from django.utils.datastructures import MultiValueDict
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from rest_framework import serializers
from rest_framework.exceptions import ValidationError

from core.compiled_serializers import FastPath, compile_serializer, one_time_zone
from core.labels import label_validator
from core.serializers import (
    JSONObjectField,
    StrictBooleanField,
    StrictCharField,
    StrictFloatField,
    StrictIntegerField,
    StrictSerializer,
    StrictUUIDField,
    drf_validated,
    validated,
)
from reasoning.models import ReasoningStep
from reasoning.recording.serializers import (
    FlowCloseSerializer,
    FlowCreateSerializer,
    IngestCloseSerializer,
    IngestItemSerializer,
    IngestSerializer,
    OutcomeMetricsSerializer,
    StepBatchSerializer,
    StepCreateSerializer,
)

INGEST_SERIALIZERS = [
    FlowCreateSerializer,
    StepCreateSerializer,
    FlowCloseSerializer,
    StepBatchSerializer,
    IngestItemSerializer,
    IngestCloseSerializer,
    IngestSerializer,
]
PROPERTY = settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
NO_SHRINKING = [Phase.explicit, Phase.reuse, Phase.generate]

# Any DRF field or serializer (the stubs lack ListSerializer's lengths and type every child as optional).
Field = Any


class Count(enum.IntEnum):
    SEVEN = 7


class Lying(int):
    """An int that writes itself as another: DRF reads an integer through str()."""

    def __str__(self) -> str:
        return str(int(self) + 1)


class Everything(StrictSerializer):
    """What the ingest serializers do not use: unbounded and nullable numbers, choices that are not strings, a
    blank choice, nullable text with a minimum length, untrimmed text, a list of nullable strings that may not be
    empty, nullable objects, date-times and nested bodies, a list of bodies, a field method and a validate."""

    number = StrictFloatField(required=False)
    count = StrictIntegerField(required=False, allow_null=True)
    flag = StrictBooleanField(required=False, allow_null=True)
    level = serializers.ChoiceField(choices=[(1, "one"), (2, "two")], required=False)
    letter = serializers.ChoiceField(choices=["a", "b"], allow_blank=True, required=False)
    note = StrictCharField(min_length=2, max_length=10, allow_blank=True, allow_null=True, required=False)
    raw = StrictCharField(max_length=10, trim_whitespace=False, required=False)
    tags = serializers.ListField(
        child=StrictCharField(max_length=5, allow_null=True), allow_empty=False, max_length=3, required=False
    )
    payload = JSONObjectField(allow_null=True, required=False)
    when = serializers.DateTimeField(allow_null=True, required=False)
    metrics = OutcomeMetricsSerializer(allow_null=True, required=False)
    closes: serializers.ListSerializer[Any] = serializers.ListSerializer(
        child=FlowCloseSerializer(), allow_empty=False, required=False
    )

    def validate_note(self, value: str | None) -> str | None:
        return value.upper() if value else value

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if attrs.get("count") == 13:
            raise serializers.ValidationError({"count": ["Unlucky."]})
        return attrs


SERIALIZERS = [*INGEST_SERIALIZERS, Everything]


# --- Answers ----------------------------------------------------------------------------------------------


def answer(validate: Callable[[Any], dict[str, Any]], body: Any) -> tuple[str, Any]:
    try:
        return "accepted", validate(body)
    except ValidationError as exc:
        return "refused", exc.detail
    except Exception as exc:  # DRF crashes on some bodies no JSON parser makes; so must the fast path
        return "crashed", type(exc)


def same(a: Any, b: Any) -> bool:
    """Equal, of the same types, dict keys in the same order, date-times in the same time zone."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[key], b[key]) for key in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) and math.isnan(a):
        return isinstance(b, float) and math.isnan(b)
    if isinstance(a, datetime):
        return bool(a == b and a.tzinfo == b.tzinfo and a.utcoffset() == b.utcoffset())
    return bool(a == b)


@cache
def compiled(serializer_class: type[StrictSerializer]) -> FastPath:
    fast = compile_serializer(serializer_class())
    assert fast is not None
    return fast


@cache
def instance(serializer_class: type[StrictSerializer]) -> StrictSerializer:
    return serializer_class()


def drf_answer(serializer_class: type[StrictSerializer], body: Any) -> tuple[str, Any]:
    return answer(lambda data: drf_validated(instance(serializer_class), data), body)


def check_equivalence(serializer_class: type[StrictSerializer], body: Any) -> bool:
    """Assert that ``validated`` (fast path first) answers as DRF alone; whether the fast path accepted."""
    result = compiled(serializer_class)(body)
    expected = drf_answer(serializer_class, body)
    if result is not None:
        assert expected[0] == "accepted", f"the fast path accepted what DRF {expected[0]}: {expected[1]!r}"
        assert same(result, expected[1]), f"fast path {result!r}\nDRF       {expected[1]!r}"
    actual = answer(lambda data: validated(serializer_class, data), body)
    assert actual[0] == expected[0]
    if actual[0] == "accepted":
        assert same(actual[1], expected[1])
    else:
        assert actual[1] == expected[1]
    return result is not None


# --- Bodies, from the serializers' fields ------------------------------------------------------------------

LABEL_START = "abcXYZ019"
LABEL_CHARS = "abcXYZ019_.:/-"
TEXT_CHARS = "abc XYZ 019.,;:!?'\"()-é中😀"
ODD_TEXTS = [
    "",
    " ",
    "\t",
    " x",
    "x ",
    "x\n",
    "\xa0x",
    "x\u3000",
    "x\x1f",
    "a\x00b",
    "a\ud800b",
    "a\u200bb",
    "a\u2028b",
    "line\nbreak",
    "tab\there",
    "a b",
    "-a",
    "é",
    "123",
    ReasoningStep.Outcome.ERROR,  # a str subclass
]
NOT_TEXT = [None, 1, 1.5, True, [], {}, ["a"], {"a": 1}]
# The current year keeps generated times within _within_reason's window (2000 to now + 5 minutes).
NOW = datetime.now(UTC)
ODD_TIMES = [
    "2024-05-01T10:00:00",
    "2024-05-01T10:00:00.123456",
    "2024-05-01",
    "2024-05-01 10:00:00Z",
    "2024-05-01t10:00:00z",
    "2024-05-01T10:00:00.1234567Z",
    "2024-05-01T10:00:00,5Z",
    "2024-05-01T10:00:00+0530",
    "2024-05-01T10:00Z",
    "2024-05-01T24:00:00Z",
    "2024-05-01T23:59:60Z",
    "2024-13-01T00:00:00Z",
    "20240501T100000Z",
    " 2024-05-01T10:00:00Z",
    "1999-12-31T23:59:59Z",
    "2100-01-01T00:00:00Z",
    "0001-01-01T00:00:00+01:00",
    "9999-12-31T23:59:59-01:00",
    "yesterday",
    "",
    datetime(2024, 5, 1, 10, tzinfo=UTC),
    datetime(2024, 5, 1, 10),
    datetime(2024, 5, 1, 10).date(),
    1714557600,
    None,
]
ODD_UUIDS = [
    str(uuid.UUID(int=7)).upper(),
    uuid.UUID(int=7).hex,
    "{" + str(uuid.UUID(int=7)) + "}",
    "urn:uuid:" + str(uuid.UUID(int=7)),
    " " + str(uuid.UUID(int=7)),
    str(uuid.UUID(int=7))[:-1],
    "not-a-uuid",
    "",
    uuid.UUID(int=7),
    7,
    None,
]
JSON_LEAVES = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
JSON_TEXT = st.text(alphabet=st.characters(codec="utf-8", exclude_characters="\x00"), max_size=8)
JSON_VALUES = st.recursive(
    JSON_LEAVES | JSON_TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(JSON_TEXT, inner, max_size=3),
    max_leaves=12,
)


def nested(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {"leaf": 1}
    for _ in range(depth):
        value = {"x": value}
    return value


ODD_JSON = [
    nested(19),
    nested(20),
    nested(21),
    {"a": "x\x00"},
    {"a\x00": 1},
    {"a": ["\ud800"]},
    {"\udfff": 1},
    {1: "integer key"},
    {"a": (1, 2)},
    {"a": {1, 2}},
    {"a": datetime(2024, 5, 1, tzinfo=UTC)},
    {"a": math.nan},
    {"a": math.inf},
    {"a": 10**400},
    OrderedDict(a=1),
    [],
    [{"a": 1}],
    "{}",
    1,
    None,
]


def is_label(field: Field) -> bool:
    return label_validator in field.validators


def valid_text(field: StrictCharField) -> st.SearchStrategy[str]:
    longest = field.max_length or 50
    texts: st.SearchStrategy[str]
    if is_label(field):
        texts = st.builds(
            lambda first, rest: (first + rest)[:longest],
            st.sampled_from(LABEL_START),
            st.text(LABEL_CHARS, max_size=min(longest, 30)),
        )
    else:
        shortest = field.min_length or 1
        texts = st.text(TEXT_CHARS, min_size=shortest, max_size=min(longest, 40)).map(str.strip)
        texts = texts.filter(lambda text: len(text) >= shortest)
        texts |= st.integers(longest - 2, longest).map(lambda n: "x" * n)
    return texts | st.just("") if field.allow_blank else texts


def valid_value(field: Field) -> st.SearchStrategy[Any]:
    """What a client that follows the schema sends (a value DRF keeps as it is)."""
    if isinstance(field, StrictCharField):
        return valid_text(field)
    if isinstance(field, StrictIntegerField):
        return st.integers(field.min_value, field.max_value)
    if isinstance(field, StrictFloatField):
        low = -1000 if field.min_value is None else math.ceil(field.min_value)
        high = 1000 if field.max_value is None else math.floor(field.max_value)
        return st.floats(field.min_value, field.max_value, allow_nan=False, allow_infinity=False) | st.integers(
            low, high
        )
    if isinstance(field, StrictBooleanField):
        return st.booleans()
    if isinstance(field, StrictUUIDField):
        return st.uuids().map(str)
    if isinstance(field, serializers.ChoiceField):
        return st.sampled_from(list(field.choice_strings_to_values))
    if isinstance(field, serializers.DateTimeField):
        zones = st.sampled_from([UTC, timezone(timedelta(hours=5, minutes=30)), timezone(timedelta(hours=-8))])
        times = st.datetimes(datetime(2001, 1, 1), NOW.replace(tzinfo=None) - timedelta(days=2), timezones=zones)
        return times.map(datetime.isoformat) | times.map(lambda t: t.astimezone(UTC).isoformat().replace("+00:00", "Z"))
    if isinstance(field, JSONObjectField):
        return st.dictionaries(JSON_TEXT, JSON_VALUES, max_size=4)
    if isinstance(field, serializers.ListField):
        return st.lists(valid_value(field.child), max_size=3)
    if isinstance(field, serializers.ListSerializer):
        least = max(getattr(field, "min_length", None) or 0, 0 if field.allow_empty else 1)
        return st.lists(valid_body(field.child), min_size=least, max_size=least + 1)
    if isinstance(field, serializers.Serializer):
        return valid_body(field)
    raise AssertionError(f"no strategy for {type(field).__name__}")


def odd_values(field: Field) -> list[Any]:
    """Values DRF refuses, or accepts only after changing them (each is tried in every field it suits)."""
    if isinstance(field, StrictCharField):
        longest = field.max_length or 50
        return [*ODD_TEXTS, *NOT_TEXT, " " + "x" * longest, "x" * longest + " ", "x" * (longest + 1)]
    if isinstance(field, StrictIntegerField):
        edges = [bound + step for bound in (field.min_value, field.max_value) if bound is not None for step in (-1, 1)]
        return [*edges, True, False, 5.0, 5.5, "5", 2**64, -(2**64), Count.SEVEN, Lying(7), 13, None, []]
    if isinstance(field, StrictFloatField):
        return [math.nan, math.inf, -math.inf, "0.5", True, False, 10**400, 1.0000001, -0.0, -1e-300, 2**53 + 1, None]
    if isinstance(field, StrictBooleanField):
        return [0, 1, "true", "false", 0.0, None]
    if isinstance(field, StrictUUIDField):
        return ODD_UUIDS
    if isinstance(field, serializers.ChoiceField):
        first = next(iter(field.choice_strings_to_values))
        return [first.upper(), first + " ", "", 1, True, None, ReasoningStep.Outcome.OK]
    if isinstance(field, serializers.DateTimeField):
        return ODD_TIMES
    if isinstance(field, JSONObjectField):
        return ODD_JSON
    if isinstance(field, serializers.ListField):
        longest = next(v.limit_value for v in field.validators if isinstance(v, MaxLengthValidator))
        item = "a" if isinstance(field.child, StrictCharField) else str(uuid.UUID(int=1))
        return [None, "abc", {}, (item,), {item}, [None], [item] * longest, [item] * (longest + 1)] + [
            [item, odd] for odd in odd_values(field.child)
        ]
    if isinstance(field, serializers.ListSerializer):
        return [None, {}, [], [None], ["x"], [[]]]
    if isinstance(field, serializers.Serializer):
        return [None, [], "x", {}]
    raise AssertionError(f"no odd values for {type(field).__name__}")


def any_value(field: Field) -> st.SearchStrategy[Any]:
    odd = st.sampled_from(odd_values(field))
    if isinstance(field, serializers.ListSerializer):
        odd |= st.lists(any_body(field.child), min_size=1, max_size=2)
    elif isinstance(field, serializers.Serializer):
        odd |= any_body(field)
    return valid_value(field) | odd


def _body(
    serializer: serializers.Serializer[Any], value: Callable[[Field], st.SearchStrategy[Any]], *, full: bool = False
) -> st.SearchStrategy[dict[str, Any]]:
    fields = serializer.fields
    optional = [name for name, field in fields.items() if not field.required]
    required = [name for name, field in fields.items() if field.required]

    @st.composite
    def draw(draw: st.DrawFn) -> dict[str, Any]:
        some = draw(st.lists(st.sampled_from(optional), unique=True)) if optional else []
        chosen = list(fields) if full else required + some
        return {name: draw(value(fields[name])) for name in draw(st.permutations(chosen))}

    return draw()


def valid_body(serializer: Field, *, full: bool = False) -> st.SearchStrategy[dict[str, Any]]:
    """A body of valid values that the serializer's ``validate`` accepts too; ``full``: with every field."""
    return _body(serializer, valid_value, full=full).map(lambda body: _consistent(serializer, body))


def _consistent(serializer: serializers.Serializer[Any], body: dict[str, Any]) -> dict[str, Any]:
    if isinstance(serializer, FlowCloseSerializer) and body["flow_state"] == "completed":
        body.pop("abort_reason", None)
        body["outcome_type"] = body.get("outcome_type") or "answered"
    if isinstance(serializer, IngestItemSerializer):
        body.setdefault("trigger_type", "opened")
        if "started_at" in body and "ended_at" in body.get("close", {}):
            body["close"]["ended_at"] = body["started_at"]
    return body


def any_body(serializer: Field) -> st.SearchStrategy[Any]:
    """Any mix of valid and odd values; or a valid body with a field left out or an unknown one added; or not
    a plain dict at all."""
    names = list(serializer.fields)
    left_out = st.tuples(valid_body(serializer), st.sampled_from(names)).map(
        lambda pair: {k: v for k, v in pair[0].items() if k != pair[1]}
    )
    unknown = valid_body(serializer).map(lambda body: {**body, "unknown_field": 1})
    others: st.SearchStrategy[Any] = st.sampled_from([None, [], "body", 1]) | valid_body(serializer).map(OrderedDict)
    return st.one_of(_body(serializer, any_value), valid_body(serializer), left_out, unknown, others)


def variants(serializer: Field, body: dict[str, Any]) -> Iterator[Any]:
    """``body`` with one thing made odd: for every field, each odd value and leaving it out, at every depth
    (a nested body, the first item of a list of bodies); and the body itself not a plain dict, or with an
    unknown field."""
    form = MultiValueDict({key: [value] for key, value in body.items()})
    yield from [None, [], "body", 1, OrderedDict(body), form, {**body, "unknown_field": 1}]
    for name, field in serializer.fields.items():
        yield {k: v for k, v in body.items() if k != name}
        for odd in odd_values(field):
            yield {**body, name: odd}
        value = body.get(name)
        if isinstance(field, serializers.ListSerializer) and value:
            yield {**body, name: tuple(value)}
            if longest := getattr(field, "max_length", None):
                yield {**body, name: [value[0]] * (longest + 1)}
            for item in variants(field.child, value[0]):
                yield {**body, name: [item, *value[1:]]}
        elif isinstance(field, serializers.Serializer) and isinstance(value, dict):
            for inner in variants(field, value):
                yield {**body, name: inner}


# --- The properties ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("serializer_class", SERIALIZERS)
def test_every_ingest_serializer_and_the_catalogue_are_compiled(serializer_class: type[StrictSerializer]) -> None:
    assert compile_serializer(serializer_class()) is not None


@pytest.mark.parametrize("serializer_class", SERIALIZERS)
def test_every_edge_case_gets_drfs_answer(serializer_class: type[StrictSerializer]) -> None:
    # Not shrunk: the failing variant is in the assertion's message, and shrinking a full ingest body takes minutes.
    @settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck), phases=NO_SHRINKING)
    @given(valid_body(serializer_class(), full=True))
    def run(body: dict[str, Any]) -> None:
        for variant in variants(serializer_class(), body):
            check_equivalence(serializer_class, variant)
        if drf_answer(serializer_class, body)[0] == "accepted":
            assert check_equivalence(serializer_class, body)

    run()


@pytest.mark.parametrize("serializer_class", SERIALIZERS)
def test_any_body_gets_drfs_answer(serializer_class: type[StrictSerializer]) -> None:
    @PROPERTY
    @given(any_body(serializer_class()))
    def run(body: Any) -> None:
        check_equivalence(serializer_class, body)

    run()


@pytest.mark.parametrize("serializer_class", SERIALIZERS)
def test_a_body_drf_keeps_as_sent_takes_the_fast_path(serializer_class: type[StrictSerializer]) -> None:
    @PROPERTY
    @given(valid_body(serializer_class()) | valid_body(serializer_class(), full=True))
    def run(body: Any) -> None:
        accepted = check_equivalence(serializer_class, body)
        assert accepted or drf_answer(serializer_class, body)[0] != "accepted"

    run()


@pytest.mark.parametrize("zone", ["Europe/Paris", "America/St_Johns"])
def test_times_are_given_in_the_current_time_zone_as_drf_gives_them(zone: str) -> None:
    body = {"kind": "retrieval", "agent": "planner", "summary_text": "Looked it up.", "started_at": "2024-05-01T10:00Z"}
    with django_timezone.override(zone):
        assert check_equivalence(StepCreateSerializer, body)
        assert str(validated(StepCreateSerializer, body)["started_at"].tzinfo) == zone
        # A naive time is DRF's to place in the zone.
        assert not check_equivalence(StepCreateSerializer, {**body, "started_at": "2024-05-01T10:00:00"})


@pytest.mark.parametrize("zone", ["Europe/Paris", "America/St_Johns"])
def test_within_one_time_zone_times_are_given_in_the_zone_current_on_entry(zone: str) -> None:
    """A batch reads the time zone once (record_spans, the ingest route): its times are DRF's."""
    bodies = [
        {"kind": "retrieval", "agent": "planner", "summary_text": "Looked it up.", "started_at": f"2024-05-0{d}T10:00Z"}
        for d in range(1, 4)
    ]
    with django_timezone.override(zone), one_time_zone():
        for body in bodies:
            assert check_equivalence(StepCreateSerializer, body)
            assert str(validated(StepCreateSerializer, body)["started_at"].tzinfo) == zone
    with django_timezone.override("Asia/Tokyo"), one_time_zone():
        assert str(validated(StepCreateSerializer, bodies[0])["started_at"].tzinfo) == "Asia/Tokyo"
    # Outside any batch, the zone current at each value.
    with django_timezone.override(zone):
        assert str(validated(StepCreateSerializer, bodies[0])["started_at"].tzinfo) == zone


def test_without_time_zones_times_go_to_drf() -> None:
    body = {"kind": "retrieval", "agent": "planner", "summary_text": "Looked it up.", "started_at": "2024-05-01T10:00Z"}
    with override_settings(USE_TZ=False):
        assert not check_equivalence(StepCreateSerializer, body)


class UntranslatedField(StrictCharField):
    """A subclass may change what the field accepts: the translator does not know it."""


@pytest.mark.parametrize(
    "field",
    [
        UntranslatedField(),
        serializers.EmailField(),
        StrictCharField(source="other"),
        StrictCharField(required=False, default="x"),
        StrictCharField(read_only=True),
    ],
)
def test_a_serializer_with_a_field_the_translator_does_not_know_has_no_fast_path(field: Field) -> None:
    serializer_class = type("Body", (StrictSerializer,), {"name": field})
    assert compile_serializer(serializer_class()) is None


def test_a_serializer_overriding_a_drf_hook_has_no_fast_path() -> None:
    class Lenient(StrictSerializer):
        name = StrictCharField()

        def to_internal_value(self, data: Any) -> Any:
            return data

    assert compile_serializer(Lenient()) is None


def test_field_methods_and_validate_run_on_the_fast_path() -> None:
    class Shouting(StrictSerializer):
        name = StrictCharField(max_length=10)
        count = StrictIntegerField(required=False)

        def validate_name(self, value: str) -> str:
            return value.upper()

        def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
            if attrs.get("count") == 0:
                raise serializers.ValidationError({"count": ["Not zero."]})
            return {**attrs, "seen": True}

    fast = compile_serializer(Shouting())
    assert fast is not None
    assert fast({"name": "ada"}) == {"name": "ADA", "seen": True}
    assert fast({"name": "ada", "count": 0}) is None
    with pytest.raises(ValidationError) as refused:
        validated(Shouting, {"name": "ada", "count": 0})
    assert refused.value.detail == {"count": ["Not zero."]}
