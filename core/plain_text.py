"""Which characters plain text may hold: the check behind ``core.serializers.PlainTextValidator``,
the compiled serializers' text fields and the summary guard (compiled with the write path,
``core.compiled``: it runs for every text field of every step)."""

from __future__ import annotations

import re
import unicodedata

# Unicode categories no plain text needs, all of which render invisibly or reorder what an
# operator or patient reads: controls (Cc), format characters (Cf: zero-width, bidi controls,
# soft hyphen, BOM, tags), line and paragraph separators (Zl, Zp), surrogates and private use.
FORBIDDEN_TEXT_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs", "Co"})
# The only ASCII characters of those categories are Cc: C0 and DEL (tab, LF and CR among them).
_ASCII_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_ASCII_CONTROL_MULTILINE = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
_MULTILINE_ALLOWED = frozenset("\t\n\r")
_NONE_ALLOWED: frozenset[str] = frozenset()


def has_forbidden_char(text: str, *, multiline: bool = False) -> bool:
    """Whether ``text`` holds a character of ``FORBIDDEN_TEXT_CATEGORIES`` (tab, LF and CR
    excepted when ``multiline``): none in printable text, else one regex search for ASCII text
    and a walk otherwise.

    ``str.isprintable`` is false exactly for the categories Other and Separator (the ASCII space
    excepted), which hold every forbidden one: a printable text (almost every text) is answered by
    one pass in C."""
    if text.isprintable():
        return False
    if text.isascii():
        return (_ASCII_CONTROL_MULTILINE if multiline else _ASCII_CONTROL).search(text) is not None
    allowed = _MULTILINE_ALLOWED if multiline else _NONE_ALLOWED
    return any(char not in allowed and unicodedata.category(char) in FORBIDDEN_TEXT_CATEGORIES for char in text)
