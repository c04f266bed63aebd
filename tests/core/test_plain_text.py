"""core.plain_text: which characters plain text may hold, against the rule's own definition."""

from __future__ import annotations

import unicodedata

from hypothesis import given
from hypothesis import strategies as st

from core.plain_text import FORBIDDEN_TEXT_CATEGORIES, has_forbidden_char


def by_definition(text: str, *, multiline: bool) -> bool:
    allowed = "\t\n\r" if multiline else ""
    return any(char not in allowed and unicodedata.category(char) in FORBIDDEN_TEXT_CATEGORIES for char in text)


def test_every_code_point_is_judged_by_its_category() -> None:
    wrong = [
        code
        for code in range(0x110000)
        if has_forbidden_char(chr(code)) != (unicodedata.category(chr(code)) in FORBIDDEN_TEXT_CATEGORIES)
    ]
    assert wrong == []


@given(st.text(st.characters(codec=None)), st.booleans())
def test_any_text_is_judged_as_the_rule_defines(text: str, multiline: bool) -> None:
    assert has_forbidden_char(text, multiline=multiline) == by_definition(text, multiline=multiline)


@given(st.text(st.characters(max_codepoint=0x7F)), st.booleans())
def test_any_ascii_text_is_judged_as_the_rule_defines(text: str, multiline: bool) -> None:
    assert has_forbidden_char(text, multiline=multiline) == by_definition(text, multiline=multiline)


def test_tab_and_line_breaks_pass_only_in_multiline_text() -> None:
    assert has_forbidden_char("two\nlines") and not has_forbidden_char("two\nlines", multiline=True)
    assert has_forbidden_char("zero\u200bwidth", multiline=True)
    assert not has_forbidden_char("Reviewed Müller's labs — 5 mg")
