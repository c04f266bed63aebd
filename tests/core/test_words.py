"""core.words: a text's tsvector computed by the web process is PostgreSQL's own, or not given."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection

from core import words

pytestmark = pytest.mark.django_db

# Tokens of every kind the parser knows near the shape: stop words, stems, numbers, letters and
# digits mixed, scientific notation (split by the parser: never used), words of one letter.
VOCABULARY = [
    *("the", "a", "is", "don", "t", "s", "and", "or", "not"),
    *("running", "runs", "ran", "easily", "fairly", "patients", "labs", "results", "potassium", "x", "ok", "e", "g"),
    *("gpt4", "4o", "1st", "2026", "007", "0", "12345678901234567890", "a1b2", "3rd", "ab12cd", "9a", "b9", "v2"),
    *("http", "www", "com", "1e5", "0x1f", "ii", "nan", "inf", "true", "null"),
]
# Separators of the proven shape, and characters that make a text unproven.
PUNCTUATION = (
    " ", "  ", ", ", ",", ". ", ".", "; ", ";", ": ", ":", "!", "?", "(", ")", '"', "'", " '", "' ", "'s", "..", " .",
    "-", "/", "@", "&", "_", "<", ">", "#", "+", "%", "$", "*", "=", "\n", "\t", "é",
)  # fmt: skip


def postgres_vectors(texts: list[str]) -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT to_tsvector('english', t)::text FROM unnest(%s::text[]) WITH ORDINALITY AS u(t, n) ORDER BY n",
            [texts],
        )
        return [row[0] for row in cursor.fetchall()]


def as_postgres_reads(vectors: list[str | None]) -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT v::tsvector::text FROM unnest(%s::text[]) WITH ORDINALITY AS u(v, n) ORDER BY n", [vectors]
        )
        return [row[0] for row in cursor.fetchall()]


def random_texts(seed: int, count: int) -> list[str]:
    rng = random.Random(seed)
    texts = []
    for _ in range(count):
        parts = [
            rng.choice(VOCABULARY) if rng.random() < 0.6 else rng.choice(PUNCTUATION) for _ in range(rng.randint(0, 14))
        ]
        text = "".join(parts)
        texts.append(text.upper() if rng.random() < 0.3 else text)
    return texts


def test_every_vector_given_is_the_one_postgres_makes() -> None:
    texts = random_texts(seed=42, count=3000)

    given = words.vectors(texts)

    proven = [(text, vector) for text, vector in zip(texts, given, strict=True) if vector is not None]
    assert len(proven) > 600  # the test compares real vectors, not only refusals
    assert as_postgres_reads([vector for _, vector in proven]) == postgres_vectors([text for text, _ in proven])


@pytest.mark.parametrize(
    "text",
    [
        "Scheduled a follow-up visit",  # a hyphenated word: three tokens of the parser
        "Dose of 3.5 mg",  # a decimal
        "See e.g. the guideline",  # a file name to the parser
        "Read labs/2026",  # a path
        "Wrote to jane@example.com",  # an e-mail
        "Read https://example.com",  # a URL
        "Checked the patient's café order",  # not ASCII
        "snake_case value",  # an underscore
        "ratio 1e5x",  # a word the parser splits (scientific notation, then letters)
    ],
)
def test_texts_whose_words_are_not_proven_are_left_to_postgres(text: str) -> None:
    assert words.vectors([text]) == [None]


def test_stop_words_keep_their_positions_and_repeats_merge() -> None:
    (vector,) = words.vectors(["The results, and the results reviewed!"])

    assert (
        as_postgres_reads([vector])
        == ["'result':2,5 'review':6"]
        == postgres_vectors(["The results, and the results reviewed!"])
    )


def test_a_word_is_learned_once(django_assert_num_queries: Callable[..., Any]) -> None:
    with django_assert_num_queries(1):
        first = words.vectors(["Reviewed the potassium results", "Potassium results reviewed"])
    with django_assert_num_queries(0):
        again = words.vectors(["Reviewed the potassium results", "results reviewed"])

    assert first[0] == again[0] is not None


def test_a_full_lexicon_is_forgotten_and_learned_again(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(words, "MAX_WORDS", 4)
    words.vectors(["alpha beta gamma"])

    vectors = words.vectors(["delta epsilon"])

    assert as_postgres_reads(vectors) == postgres_vectors(["delta epsilon"])
    assert set(words._lexicon) == {"delta", "epsilon"}


def test_an_empty_text_has_an_empty_vector() -> None:
    assert words.vectors(["", "   ", "the"]) == ["", "", ""]
    assert postgres_vectors(["", "   ", "the"]) == ["", "", ""]
