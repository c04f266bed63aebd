"""A text's words as PostgreSQL's ``to_tsvector('english', text)`` makes them, computed here.

The word search's GIN indexes (``reasoning.flows.search``) index ``to_tsvector`` of a plain-text
field. PostgreSQL computes it for every row written, and its default parser is slow: about
40 µs for a 200-character step summary on the 2-vCPU VMs, a quarter of PostgreSQL's work per span
on the OTLP write path (docs/performance.md). ``vectors`` gives PostgreSQL the vector instead,
as the text of a ``tsvector`` (``'cat':2 'sat':3``), when it can prove it is the one PostgreSQL
would make; ``None`` when it cannot, and then the index computes it (its expression is
``coalesce(<words column>, to_tsvector('english', <text>))``). Only what is proven is given: a
wrong vector would hide a row from a search, so everything else is left to PostgreSQL.

What is proven:

* **The text's shape** (an allow-list): ASCII only; letters, digits, spaces and ``, ; ! ? ( ) " '``;
  ``.`` and ``:`` only before a space or at the end. In such a text PostgreSQL's default parser
  reads every run of letters and digits as one token and everything else as blanks
  (``tests/test_words.py`` compares thousands of random texts of that alphabet with
  PostgreSQL's own vectors). Hyphens, slashes, ``@``, decimals, ``e.g.``, non-ASCII letters (hosts,
  paths, e-mails, numbers, hyphenated words: tokens of their own) are left to PostgreSQL.
* **Each word's lexeme**, learned from PostgreSQL itself: ``to_tsvector('english', word || ' '
  || sentinel)`` for each word not seen before, in one query for a call's new words. A word whose
  answer is not "one lexeme at position 1, or none (a stop word), and the sentinel at 2" (a token
  the parser splits, such as ``1e5x``) is marked unusable, and a text holding it is left to
  PostgreSQL. What the stemmer makes of a word is PostgreSQL's answer, whatever its version or
  its ``english`` configuration.

The learned words are kept per process, at most ``MAX_WORDS`` (then forgotten and learned again).
A text's vector then costs about 5 µs of Python: lowercase, split, one dictionary lookup a word.
"""

from __future__ import annotations

import itertools
import operator
import re
from collections.abc import Iterable, Sequence
from typing import Any

from django.db import connection

CONFIG = "english"
# The most words kept; past it the lexicon is cleared and learned again from what comes.
MAX_WORDS = 100_000
# The most new words learned in one call (the rest: their texts are left to PostgreSQL).
MAX_LEARN = 5_000
# More words than this in a text: left to PostgreSQL (a lexeme keeps at most 256 positions).
MAX_TEXT_WORDS = 256
# A token whose lexeme is itself (a number: the simple dictionary), placed after each learned word.
_SENTINEL = "90210"

# Letters, digits and spaces only: split on spaces.
_PLAIN = re.compile(r"[a-z0-9 ]*")
# With punctuation that the parser reads as blanks: "." and ":" only before a space or at the end.
_PUNCTUATED = re.compile(r"(?:[a-z0-9 ,;!?()\"']|[.:](?= |$))*")
_TOKEN = re.compile(r"[a-z0-9]+")
# One entry of a tsvector's text: 'lexeme':positions.
_ENTRY = re.compile(r"'([a-z0-9]+)':([0-9,]+)")

# word -> "'lexeme':" (its entry, less the position), "" (a stop word), None (unusable).
_lexicon: dict[str, str | None] = {}
_POSITIONS = tuple(str(position) for position in range(1, MAX_TEXT_WORDS + 1))
# A text with a word not learned yet (vectors learns it, then makes the text's vector again).
_NEW = object()


def vectors(texts: Sequence[str]) -> list[str | None]:
    """Each text's ``tsvector`` as text, as ``to_tsvector('english', text)`` makes it; ``None``
    where it is not proven (see the module's docstring). Words not seen before are learned in one
    query on the default connection (a read: allowed in ``core.bulk.one_statement``)."""
    split = [_words(text) for text in texts]
    made = [_vector(words) for words in split]
    if _NEW in made:
        lexicon = _lexicon
        _learn(
            {
                word
                for words, vector in zip(split, made, strict=True)
                if vector is _NEW
                for word in words or ()
                if word not in lexicon
            }
        )
        made = [_vector(words) if vector is _NEW else vector for words, vector in zip(split, made, strict=True)]
    return [None if vector is _NEW else vector for vector in made]


def _words(text: str) -> list[str] | None:
    """The text's tokens, lowercased, when its shape is proven; else None."""
    if not text.isascii():
        return None
    low = text.lower()
    if _PLAIN.fullmatch(low):
        found = low.split()
    elif _PUNCTUATED.fullmatch(low):
        found = _TOKEN.findall(low)
    else:
        return None
    return found if len(found) <= MAX_TEXT_WORDS else None


def _vector(words: list[str] | None) -> Any:
    """The vector's text, None (not proven), or _NEW (a word not learned yet)."""
    if words is None:
        return None
    try:
        entries = list(map(_lexicon.__getitem__, words))
    except KeyError:
        return _NEW
    if None in entries:
        return None
    # Each word's entry with its position (1-based, stop words counted); PostgreSQL merges a
    # lexeme's repeated entries into one with all its positions, as to_tsvector makes it.
    return " ".join(itertools.compress(map(operator.add, entries, _POSITIONS), entries))


def _learn(new: Iterable[str]) -> None:
    wanted = sorted(new)[:MAX_LEARN]
    if len(_lexicon) + len(wanted) > MAX_WORDS:
        _lexicon.clear()
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT w, to_tsvector('{CONFIG}', w || ' ' || %s)::text FROM unnest(%s::text[]) AS w",  # noqa: S608
            [_SENTINEL, wanted],
        )
        for word, vector in cursor.fetchall():
            _lexicon[word] = _entry(vector)


def _entry(vector: str) -> str | None:
    """The learned word's entry from ``to_tsvector(word || ' ' || sentinel)``."""
    entries = _ENTRY.findall(vector)
    if " ".join(f"'{lexeme}':{positions}" for lexeme, positions in entries) != vector:
        return None  # a lexeme outside [a-z0-9]: not one this module writes
    sentinel = [positions for lexeme, positions in entries if lexeme == _SENTINEL]
    own = [(lexeme, positions) for lexeme, positions in entries if lexeme != _SENTINEL]
    if sentinel != ["2"]:
        return None  # the word took no position, or more than one
    if not own:
        return ""  # a stop word: a position, no lexeme
    if len(own) == 1 and own[0][1] == "1":
        return f"'{own[0][0]}':"
    return None


def forget() -> None:
    """Forget every learned word (tests; a changed text search configuration)."""
    _lexicon.clear()
