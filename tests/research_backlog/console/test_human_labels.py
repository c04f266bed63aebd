"""``|human_label`` (core.templatetags.labels), which the console uses wherever a person reads a label."""

from __future__ import annotations

import pytest

from core.templatetags.labels import human_label


@pytest.mark.parametrize(
    ("label", "shown"),
    [
        ("user_question", "User question"),
        ("failed_after_retries", "Failed after retries"),
        ("exact_ref", "Exact ref"),
        ("prefix_ref+semantic", "Prefix ref+semantic"),
        ("pending", "Pending"),
        ("_leading", "Leading"),
        ("", ""),
        (None, ""),
    ],
)
def test_human_label_reads_a_snake_case_label_as_words(label: str | None, shown: str) -> None:
    assert human_label(label) == shown


def test_human_label_is_escaped_by_the_template() -> None:
    from django.template import engines

    rendered = engines["django"].from_string("{% load labels %}{{ value|human_label }}").render({"value": "<b>_x"})

    assert rendered == "&lt;b&gt; x"
