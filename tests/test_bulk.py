"""core.bulk: insert_rows (one statement for any number of rows, storing what save() would),
execute_writes (several writes as one statement) and fetch (instances by key, as the ORM would
load them)."""

from __future__ import annotations

import json
import math
import uuid
from datetime import UTC, date, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

import pytest
from django.db import IntegrityError, ProgrammingError, connection, transaction
from django.test.utils import CaptureQueriesContext
from encrypted_model_fields import fields as encrypted_fields

from core.bulk import (
    Write,
    _json_default,
    after_commit,
    bytea_array,
    execute_unplanned,
    execute_writes,
    fetch,
    in_one_statement,
    insert_rows,
    insert_write,
    int_array,
    json_text,
    new_instance,
    one_statement,
    opaque_array,
    sql_constant,
    text_array,
    uuid_array,
)
from reasoning.models import ReasoningFlow, ReasoningStep

pytestmark = pytest.mark.django_db

AWKWARD = ["plain", 'with "quotes"', "back\\slash", "comma, and {braces}", "NULL", "", "ünïcødé ✓", " spaced "]


def flow() -> ReasoningFlow:
    made = ReasoningFlow(trigger_type="user_question", trace_id="t", request_hash="h")
    made.save()
    return made


def step(owner: ReasoningFlow, position: int, **fields: object) -> ReasoningStep:
    base: dict[str, object] = {"kind": "retrieval", "agent": "a", "summary_text": "s", "request_hash": "h"}
    return ReasoningStep(
        id=uuid.uuid4(), flow=owner, flow_created_at=owner.created_at, position=position, **{**base, **fields}
    )


def test_any_text_survives_an_array_column() -> None:
    parent = step(owner := flow(), 1)
    insert_rows([parent])
    child = step(owner, 2, pii_fields=AWKWARD, extra_parent_ids=[parent.pk], inputs={"k": [1, "two", None]})

    insert_rows([child])

    stored = ReasoningStep.objects.get(pk=child.pk)
    assert stored.pii_fields == AWKWARD
    assert stored.extra_parent_ids == [parent.pk]
    assert stored.inputs == {"k": [1, "two", None]}


@pytest.mark.parametrize("values", [AWKWARD, [], ["\\", '"', '\\"', "{}", "a\tb\nc"]])
def test_a_text_array_literal_reads_in_postgres_as_the_list(values: list[str]) -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT %s::text[], cardinality(%s::text[])", [text_array(values), text_array(values)])
        assert cursor.fetchone() == (values, len(values))


def test_a_uuid_array_literal_reads_in_postgres_as_the_ids() -> None:
    ids = [uuid.uuid4() for _ in range(3)]
    with connection.cursor() as cursor:
        cursor.execute("SELECT %s::uuid[]", [uuid_array(ids)])
        assert cursor.fetchone() == (ids,)


@pytest.mark.parametrize("values", [[], [0, -1, 2**62], [7]])
def test_an_integer_array_literal_reads_in_postgres_as_the_list(values: list[int]) -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT %s::bigint[]", [int_array(values)])
        assert cursor.fetchone() == (values,)


@pytest.mark.parametrize("values", [[], [b""], [bytes(range(256)), b"\\x00", b'"{},\\'], [b"\x00" * 32] * 3])
def test_a_bytea_array_literal_reads_in_postgres_as_the_bytes(values: list[bytes]) -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT %s::bytea[]", [bytea_array(values)])
        assert [bytes(value) for value in cursor.fetchone()[0]] == values


def test_an_opaque_array_is_the_array_it_was_given() -> None:
    ids = [uuid.uuid4() for _ in range(3)]
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {opaque_array('uuid[]')}, {opaque_array('text[]')}", [uuid_array(ids), "{a,b}"])
        assert cursor.fetchone() == (ids, ["a", "b"])


@pytest.mark.parametrize("value", [3, 0, "aborted", "llm_prompt", "v1.2:x-y"])
def test_a_constant_reads_in_postgres_as_itself(value: int | str) -> None:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {sql_constant(value)}")
        assert cursor.fetchone() == (value,)


@pytest.mark.parametrize("value", ["it's", "a b", "x; DROP TABLE reasoning_flow", "\\", 1.5, True, None])
def test_only_integers_and_plain_words_are_constants(value: object) -> None:
    # A value of another type is refused at the call when core.bulk runs compiled (core/compiled.py).
    with pytest.raises((ValueError, TypeError), match=r"not a constant for a statement's text|object expected"):
        sql_constant(value)  # type: ignore[arg-type]


def test_encrypted_fields_are_encrypted_as_save_would() -> None:
    owner = flow()
    row = step(owner, 1, inputs_pii='{"name": "Jane Example"}', reasoning_content="Thinking about Jane Example")

    insert_rows([row])

    with connection.cursor() as cursor:
        cursor.execute("SELECT inputs_pii, reasoning_content FROM reasoning_step WHERE id = %s", [row.pk])
        ciphertexts = cursor.fetchone()
    assert all("Jane" not in value for value in ciphertexts)
    stored = ReasoningStep.objects.get(pk=row.pk)
    assert (stored.inputs_pii, stored.reasoning_content) == ('{"name": "Jane Example"}', "Thinking about Jane Example")


def test_encrypted_text_is_read_back_as_given_even_when_it_is_a_token_of_the_key() -> None:
    """The fields' get_db_prep_save first decrypts what it is given when it can: text that is a token
    of the key would be stored as its plaintext. The write path stores the text it was given."""
    token = encrypted_fields.encrypt_str("Jane Example").decode()
    row = step(flow(), 1, reasoning_content=token)

    insert_rows([row])

    assert ReasoningStep.objects.get(pk=row.pk).reasoning_content == token


def test_one_statement_whatever_the_number_of_rows() -> None:
    """The same statement, its rows one parameter: prepared once for every batch size."""
    owner = flow()
    sent: list[tuple[str, int]] = []

    def record(execute, sql, params, many, context):  # type: ignore[no-untyped-def]
        sent.append((sql, len(params)))
        return execute(sql, params, many, context)

    with connection.execute_wrapper(record):
        insert_rows([step(owner, 1)])
        insert_rows([step(owner, position) for position in range(2, 202)])

    assert len(sent) == 2 and sent[0] == sent[1]
    assert sent[0][1] == 1
    assert ReasoningStep.objects.filter(flow=owner).count() == 201


def test_nothing_to_insert_is_no_statement() -> None:
    with CaptureQueriesContext(connection) as queries:
        insert_rows([])

    assert len(queries) == 0


@pytest.mark.parametrize("value", [0.0, 0.5, 1e-300, 1.0])
def test_floats_round_trip(value: float) -> None:
    row = step(flow(), 1, confidence=value)

    insert_rows([row])

    assert ReasoningStep.objects.get(pk=row.pk).confidence == value


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_a_float_json_cannot_spell_reaches_postgres_as_itself(value: float) -> None:
    """JSON has no NaN or infinity: they travel as text, so the column's own check refuses
    them, exactly as it refuses them from save()."""
    owner = flow()
    with pytest.raises(IntegrityError, match="reasoning_step_confidence_range"), transaction.atomic():
        step(owner, 1, confidence=value).save()
    with pytest.raises(IntegrityError, match="reasoning_step_confidence_range"), transaction.atomic():
        insert_rows([step(owner, 1, confidence=value)])


# Values of every type the write path puts in a JSON parameter, with the awkward ones, and the
# column type Postgres reads each into: what it reads from json_text's encoding must be what it
# read from json.dumps's.
JSON_VALUES: list[tuple[object, str]] = [
    (uuid.UUID("12345678-1234-5678-1234-567812345678"), "uuid"),
    (datetime(2026, 12, 5, 2, 52, 51, 526326, tzinfo=UTC), "timestamptz"),
    (datetime(2026, 12, 5, 4, 52, tzinfo=timezone(timedelta(hours=2))), "timestamptz"),
    (date(2026, 12, 5), "date"),
    (Decimal("0.000123400"), "numeric"),
    (Decimal("12"), "numeric"),
    (0.30000000000000004, "float8"),
    (1e16, "float8"),
    (2**70, "numeric"),
    *((text, "text") for text in AWKWARD),
    ("tab\tnew\nline \u2028 \x7f", "text"),
    (["a", "b, c"], "text[]"),
    ({"nested": [1, 2.5, None, True, {"k": "é"}], "n": 1e16}, "jsonb"),
]


@pytest.mark.parametrize(("value", "column"), JSON_VALUES, ids=repr)
def test_json_text_reads_in_postgres_as_json_dumps_did(value: object, column: str) -> None:
    old = json.dumps([{"v": value}], default=_json_default, allow_nan=False)
    new = json_text([{"v": value}])

    read = f"SELECT v::text FROM json_to_recordset(%s::json) AS r(v {column})"
    with connection.cursor() as cursor:
        cursor.execute(read, [old])
        before = cursor.fetchone()
        cursor.execute(read, [new])
        after = cursor.fetchone()
    assert after == before


def test_json_text_falls_back_to_json_dumps_for_what_msgspec_refuses() -> None:
    """A lone surrogate (a JSON body may escape one): json.dumps's escape, which Postgres then
    refuses in jsonb as it always did."""
    assert json_text(["\ud800"]) == json.dumps(["\ud800"])
    with pytest.raises(TypeError, match="no JSON form"):
        json_text([object()])


def test_fetch_loads_instances_as_the_orm_does_in_key_order() -> None:
    owner = flow()
    rows = [
        step(owner, position, inputs_pii=f'{{"name": "Jane {position}"}}', inputs={"n": position})
        for position in (1, 2, 3)
    ]
    insert_rows(rows)

    loaded = fetch(ReasoningStep, [rows[2].pk, rows[0].pk, uuid.uuid4()])

    assert [s.pk for s in loaded] == sorted([rows[2].pk, rows[0].pk])
    for got in loaded:
        want = ReasoningStep.objects.get(pk=got.pk)
        assert {f.attname: getattr(got, f.attname) for f in ReasoningStep._meta.concrete_fields} == {
            f.attname: getattr(want, f.attname) for f in ReasoningStep._meta.concrete_fields
        }
        assert not got._state.adding


def test_fetch_by_another_column_and_nothing_for_no_keys() -> None:
    owner = flow()
    insert_rows([step(owner, 1), step(owner, 2)])

    assert sorted(s.position for s in fetch(ReasoningStep, [owner.pk], column="flow")) == [1, 2]
    with CaptureQueriesContext(connection) as queries:
        assert fetch(ReasoningStep, []) == []
    assert len(queries) == 0


def test_then_reads_the_inserted_rows_in_the_same_statement() -> None:
    owner = flow()
    rows = [step(owner, position, agent=f"agent-{position % 2}") for position in range(1, 6)]

    with CaptureQueriesContext(connection) as captured:
        insert_rows(
            rows,
            returning="agent",
            then="INSERT INTO reasoning_flow_rollup_dirty (hour) SELECT now() FROM inserted WHERE agent = 'agent-1'",
        )

    assert len(captured) == 1
    assert ReasoningStep.objects.filter(flow=owner).count() == 5
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM reasoning_flow_rollup_dirty")
        assert cursor.fetchone() == (3,)


def _dirty_hours() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM reasoning_flow_rollup_dirty")
        return int(cursor.fetchone()[0])


MARK = "INSERT INTO reasoning_flow_rollup_dirty (hour) SELECT now() FROM inserted WHERE agent = %s"


def test_writes_sent_together_are_one_statement_each_reading_its_own_parts() -> None:
    owner = flow()
    first = [step(owner, position, agent=f"agent-{position % 2}") for position in range(1, 6)]
    second = [step(owner, position, agent="agent-1") for position in range(6, 8)]
    one = insert_write(first, returning="agent", then=MARK)
    two = insert_write(second, returning="agent", then=MARK)
    assert one is not None and two is not None  # both name their part "inserted"
    one = Write(one.body, (*one.params, "agent-0"), one.parts)
    two = Write(two.body, (*two.params, "agent-1"), two.parts)

    with CaptureQueriesContext(connection) as captured:
        rows = execute_writes([one, None, two], returning="hour")

    assert len(captured) == 1
    assert "w0_inserted" in captured[0]["sql"] and "w1_inserted" in captured[0]["sql"]
    assert ReasoningStep.objects.filter(flow=owner).count() == 7
    assert _dirty_hours() == 2 + 2  # agent-0 twice among the first five, agent-1 in both of the others
    assert len(rows) == 2  # what the last write's own statement returned


def test_nothing_to_write_is_no_statement() -> None:
    with CaptureQueriesContext(connection) as captured:
        assert execute_writes([None, insert_write([])]) == []

    assert len(captured) == 0


# --- one_statement: the writes as one statement, no transaction around it ------------------------


@pytest.mark.django_db(transaction=True)
def test_one_statement_sends_no_begin_or_commit_and_runs_after_commit_at_its_end() -> None:
    owner = flow()
    done: list[int] = []

    with CaptureQueriesContext(connection) as captured, one_statement():
        assert in_one_statement()
        ReasoningFlow.objects.filter(pk=owner.pk).exists()  # a read first
        execute_writes([insert_write([step(owner, 1)])])
        after_commit(lambda: done.append(ReasoningStep.objects.filter(flow=owner).count()))
        assert done == []

    assert done == [1]  # after the block, the row committed
    assert not in_one_statement()
    # The read, the statement, then the callback's read: no BEGIN, no COMMIT.
    assert [query["sql"].split()[0] for query in captured] == ["SELECT", "INSERT", "SELECT"]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    "other",
    [
        lambda owner: ReasoningFlow.objects.filter(pk=owner.pk).update(trace_id="u"),
        lambda owner: connection.cursor().execute("SELECT id FROM reasoning_flow WHERE id = %s FOR UPDATE", [owner.pk]),
        lambda owner: execute_writes([insert_write([step(owner, 2)])]),  # a second statement
    ],
    ids=["a write", "a lock", "a second statement"],
)
def test_one_statement_refuses_any_other_write_or_lock_before_sending_it(other: Any) -> None:
    owner = flow()
    done: list[bool] = []

    with pytest.raises(RuntimeError, match="one_statement"), one_statement():
        execute_writes([insert_write([step(owner, 1)])])
        after_commit(lambda: done.append(True))
        other(owner)

    owner.refresh_from_db()
    assert owner.trace_id == "t" and done == []  # the first statement stands alone; no callback ran
    assert list(ReasoningStep.objects.filter(flow=owner).values_list("position", flat=True)) == [1]


def test_one_statement_is_not_for_inside_a_transaction() -> None:
    with pytest.raises(RuntimeError, match="outside any transaction"), one_statement():
        pass  # pragma: no cover


@pytest.mark.filterwarnings("ignore:DateTimeField .* received a naive datetime")
@pytest.mark.parametrize(
    "started_at",
    [
        datetime(2026, 3, 1, 9, 30, 15, 123456, tzinfo=UTC),
        datetime(2026, 3, 1, 9, 30, tzinfo=timezone(timedelta(hours=-5))),
        datetime(2026, 3, 1, 9, 30),  # naive: made aware in the current time zone, as save() does
        "2026-03-01T09:30:00+02:00",
        None,
    ],
    ids=repr,
)
def test_a_datetime_column_stores_what_save_would(started_at: object) -> None:
    owner = flow()
    saved = step(owner, 1, started_at=started_at)
    saved.save()
    inserted = step(owner, 2, started_at=started_at)

    insert_rows([inserted])

    stored = ReasoningStep.objects.filter(flow=owner).order_by("position").values_list("started_at", flat=True)
    assert stored[0] == stored[1]


def test_fetch_takes_ids_as_uuids_or_as_text() -> None:
    owner = flow()
    rows = [step(owner, 1), step(owner, 2)]
    insert_rows(rows)

    assert [s.pk for s in fetch(ReasoningStep, {rows[1].pk, rows[0].pk})] == sorted(r.pk for r in rows)
    assert [s.pk for s in fetch(ReasoningStep, [str(rows[0].pk), str(uuid.uuid4())])] == [rows[0].pk]


def fields_of(obj: object) -> dict[str, object]:
    return {name: value for name, value in vars(obj).items() if name != "_state"}


@pytest.mark.parametrize(
    "values",
    [
        {"kind": "retrieval", "agent": "a", "summary_text": "s", "request_hash": "h"},
        {
            "id": uuid.uuid4(),
            "flow_id": uuid.uuid4(),
            "position": 3,
            "inputs": {"q": [1, None]},
            "confidence": 0.5,
            "started_at": datetime(2026, 3, 1, tzinfo=UTC),
            "cost_usd": Decimal("0.0012"),
            "pii_fields": ["name"],
        },
    ],
    ids=["defaults", "values"],
)
def test_new_instance_is_the_instance_the_constructor_makes(values: dict[str, object]) -> None:
    values = {**values, "created_at": datetime(2026, 3, 1, 12, tzinfo=UTC)}
    made = new_instance(ReasoningStep, dict(values))
    want = ReasoningStep(**values)

    if "id" not in values:
        made.id = want.id  # a fresh uuid4 each
    assert list(fields_of(made)) == list(fields_of(want))
    assert fields_of(made) == fields_of(want)
    assert made._state.adding and made._state.db is None
    assert new_instance(ReasoningStep, {}).inputs is not new_instance(ReasoningStep, {}).inputs  # fresh defaults


def test_new_instance_leaves_relations_by_name_and_unknown_names_to_the_constructor() -> None:
    owner = flow()
    assert new_instance(ReasoningStep, {"flow": owner}).flow_id == owner.pk
    with pytest.raises(TypeError, match="unexpected keyword"):
        new_instance(ReasoningStep, {"no_such_field": 1})


@pytest.mark.django_db
def test_execute_unplanned_runs_the_statement_unprepared_and_raises_djangos_errors() -> None:
    with connection.cursor() as cursor:
        for _ in range(10):  # past DB_PREPARE_THRESHOLD: a prepared statement would show below
            execute_unplanned(cursor, "SELECT %s::int + 1 AS unplanned_probe", [41])
            assert cursor.fetchone() == (42,)
        cursor.execute("SELECT count(*) FROM pg_prepared_statements WHERE statement LIKE %s", ["%unplanned_probe%"])
        assert cursor.fetchone() == (0,)
        with pytest.raises(ProgrammingError), transaction.atomic():  # Django's, as the chainer's loop expects
            execute_unplanned(cursor, "SELECT * FROM no_such_table_here")
