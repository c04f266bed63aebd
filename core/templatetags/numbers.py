"""Numbers as pages write them: ``{% load numbers %}``, then ``{{ value|share }}`` for a share in
percent that never reads "0 %" when it is not zero (``core.svg.share``), ``|usd`` for a cost
(``core.svg.usd``: "$0.0035", never "$0.00"), ``|tokens`` for a token count; None is a dash.
Registered in TEMPLATES' ``libraries`` (``core`` is no app)."""

from __future__ import annotations

from decimal import Decimal

from django import template

from core import svg

register = template.Library()


@register.filter
def share(value: float | None) -> str:
    return "—" if value is None else svg.share(float(value))


@register.filter
def usd(value: float | Decimal | None) -> str:
    return "—" if value is None else svg.usd(float(value))


@register.filter
def tokens(value: int | None) -> str:
    return "—" if value is None else svg.tokens(value)
