"""Numbers as pages write them: ``{% load numbers %}``, then ``{{ value|share }}`` for a share in
percent that never reads "0 %" when it is not zero (``core.svg.share``); None is a dash.
Registered in TEMPLATES' ``libraries`` (``core`` is no app)."""

from __future__ import annotations

from django import template

from core import svg

register = template.Library()


@register.filter
def share(value: float | None) -> str:
    return "—" if value is None else svg.share(float(value))
