"""Identifiers people read in tables: ``{% load labels %}``.

``{{ value|breakable }}``: a label or reference (``user_question``, ``benchmark/run-7/case-3``)
may wrap only after ``_``, ``/``, ``.``, ``:`` or ``-`` (a ``<wbr>`` there), never in the
middle of a word.

``{{ value|human_label }}``: a snake_case label as a person reads it ("user_question" →
"User question"). Where an operator must type or search the raw identifier, show it too
(in a ``<code>`` or a ``title``).
"""

from __future__ import annotations

import re

from django import template
from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

register = template.Library()

_BREAK_AFTER = re.compile(r"([_/.:-])")


@register.filter(name="breakable")
def breakable(value: object) -> SafeString:
    text = escape("" if value is None else str(value))
    return mark_safe(_BREAK_AFTER.sub(r"\1<wbr>", text))  # noqa: S308 - escaped above; only <wbr> added


@register.filter(name="human_label")
def human_label(value: object) -> str:
    text = "" if value is None else str(value).replace("_", " ").strip()
    return text[:1].upper() + text[1:]
