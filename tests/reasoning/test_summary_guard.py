"""The summary guard: which step summaries a patient may see, and which rule stops the rest.

The corpus is synthetic: every name, number and address below is made up.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import os
import random
import re
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reasoning.summary_guard import RULES, GuardResult, check_all, check_summary

# (summary, the first rule expected to fire)
UNSAFE: list[tuple[str, str]] = [
    ("Compared two evidence branches. " * 9, "too_long"),
    ("Reviewed labs\nfor the patient", "control_chars"),
    ("Compared\tevidence branches", "control_chars"),
    ("Checked\u200bthe claim", "control_chars"),
    ("Retrieved guidelines\x00", "control_chars"),
    ("Summarised notes \u202eelbat", "control_chars"),
    ("Line one\u2028line two", "control_chars"),
    ("Sent the summary to jane.doe@example.com", "email"),
    ("Contact on file is j_smith+care@clinic.org", "email"),
    ("Reply went to jane (at) example.org", "email"),
    ("Found address JDOE@HOSPITAL.ORG in the note", "email"),
    ("Wrote to jane\uff20example.com", "email"),  # full-width @
    ("Fetched https://portal.example.org/chart?patient=abc", "url_with_id"),
    ("Opened www.example-ehr.com/records/1234567", "url_with_id"),
    ("Read portal.example.org/view?mrn=abc", "url_with_id"),
    ("Verified SSN 123-45-6789", "ssn"),
    ("Found 123 45 6789 in the intake form", "ssn"),
    ("Matched identity by SSN ending in 6789", "ssn"),
    ("Masked value ***-**-6789 was still present", "ssn"),
    ("social security number: 123456789", "ssn"),
    ("Looked up MRN 12345", "mrn_labeled"),
    ("Record MRN: A-99887 matched", "mrn_labeled"),
    ("Pulled notes for med rec #778812", "mrn_labeled"),
    ("Matched patient id 4455 to the flow", "mrn_labeled"),
    ("Opened chart number 99812", "mrn_labeled"),
    ("Checked medical record number 00123", "mrn_labeled"),
    ("Patient #5521 has new labs", "mrn_labeled"),
    ("Reviewed pt 88123 history", "mrn_labeled"),
    ("Found mrn12345 in the note", "mrn_labeled"),
    ("Verified insurance member ID XK-55201", "labeled_id"),
    ("Checked policy number 4471-2290", "labeled_id"),
    ("Account 5528831 has a balance", "labeled_id"),
    ("Prescriber NPI 1234567890 on the order", "labeled_id"),
    ("Medicare number 1EG4-TE5-MK73 on file", "labeled_id"),
    ("Confirmed DOB: 03/14/1962", "date_of_birth"),
    ("Patient born 1962-03-14", "date_of_birth"),
    ("Noted date of birth March 14", "date_of_birth"),
    ("Visit on 2024-01-05 was reviewed", "date_of_birth"),
    ("Lab drawn 03/14/2024", "date_of_birth"),
    ("Appointment on 14.03.2024", "date_of_birth"),
    ("D.O.B. 4/5/62 confirmed", "date_of_birth"),
    ("Compared results from 20240314", "date_of_birth"),
    ("Born in 1948 per intake", "date_of_birth"),
    ("Symptoms began on March 14, 2024", "written_date"),
    ("Follow-up booked for 3rd of May", "written_date"),
    ("Admitted Jan 5 for observation", "written_date"),
    ("Labs from September 2023 were reviewed", "written_date"),
    ("Lives near ZIP 02139", "zip_code"),
    ("Address ends with 02139-4307", "zip_code"),
    ("Moved to Boston, MA 02118", "zip_code"),
    ("Called (555) 123-4567 for follow-up", "us_phone"),
    ("Left a message at 555-123-4567", "us_phone"),
    ("Number on file is 555.123.4567", "us_phone"),
    ("Texted +1 555 123 4567", "us_phone"),
    ("Dialled 5551234567 twice", "us_phone"),
    ("Reached the clinic at 1-800-555-0199", "us_phone"),
    ("Called back on +44 20 7946 0958", "us_phone"),
    ("Extension 555-0142 noted", "us_phone"),
    ("Call back on 555 0142", "us_phone"),
    ("Filtered trials enrolling 200-1000 adults", "us_phone"),  # accepted false positive: a range
    ("Left a message at 555\u2013123\u20134567", "us_phone"),  # en dashes
    ("Called \uff15\uff15\uff15-\uff11\uff12\uff13-\uff14\uff15\uff16\uff17", "us_phone"),  # full-width digits
    ("Matched record 123456789", "bare_long_id"),
    ("Linked identifier 1234567890123", "bare_long_id"),
    ("Used reference 123-456-789", "bare_long_id"),
    ("Card 4111 1111 1111 1111 on file", "bare_long_id"),
    ("Linked record 3f2a9c1e-8b4d-4e2a-9f6b-1c2d3e4f5a6b", "opaque_id"),
    ("Found identifier AB1234567 in notes", "opaque_id"),
    ("Device serial SN8842197X recorded", "opaque_id"),
    ("Request came from 192.168.10.24", "ip_address"),
    ("Logged 2001:0db8:85a3:0000:0000:8a2e:0370:7334", "ip_address"),
    ("Patient lives at 42 Oak Street", "street_address"),
    ("Mailed to 1600 Pennsylvania Ave", "street_address"),
    ("Address 221B Baker St on file", "street_address"),
    ("Lives at 77 elm street", "street_address"),
    ("Sent letter to PO Box 1234", "street_address"),
    ("Moved to apartment 4B downtown", "street_address"),
    ("Admitted to room 312", "street_address"),
    ("Patient is a 67-year-old man", "age"),
    ("Reviewed notes for a 45 yo woman", "age"),
    ("Guidance for a patient aged 92", "age"),
    ("Patient in her 80s asked about sleep", "age"),
    ("Age: 54, reviewed labs", "age"),
    ("Retrieved guidelines for adults aged 65 and older", "age"),  # guideline ages fire too
    ("Blood pressure was 150/95", "clinical_value"),
    ("Noted A1c 7.2%", "clinical_value"),
    ("Weight 82 kg recorded", "clinical_value"),
    ("Glucose of 180 mg/dL reviewed", "clinical_value"),
    ("Temperature reached 101.3\u00b0F", "clinical_value"),
    ("LDL was 160 last month", "clinical_value"),
    ("Heart rate 112 bpm at rest", "clinical_value"),
    ("Reviewed metformin 500mg dosing", "medication_dose"),
    ("Patient takes 500 mg twice daily", "medication_dose"),
    ("Increased to 0.5mL weekly", "medication_dose"),
    ("Uses 10 units of insulin at night", "medication_dose"),
    ("Takes 2 tablets each morning", "medication_dose"),
    ("Using 2 puffs of the inhaler", "medication_dose"),
    ("Applied hydrocortisone 1% cream", "medication_dose"),
    ("Given 25 \u00b5g daily", "medication_dose"),  # micro sign
    ("Takes one capsule at bedtime", "medication_dose"),
    ("Started lisinopril 20 in the morning", "medication_dose"),
    ("Dose of 1,000 IU vitamin D", "medication_dose"),
    ("Used 3 drops in each eye", "medication_dose"),
    ("Take 1/2 tablet at night", "medication_dose"),
    ("Coded as E11.9 in the chart", "icd10"),
    ("Diagnosis I10 noted", "icd10"),
    ("Matched J45.909 to asthma guidance", "icd10"),
    ("Listed Z79.4 for long-term insulin", "icd10"),
    ("Billing code CPT 99213 attached", "icd10"),
    ("ICD-10 code F32.A applies", "icd10"),
    ("dx e11.65 confirmed", "icd10"),
    ("Reviewed vitamin B12 evidence", "icd10"),  # accepted false positive: B12 is code-shaped
    ("Consulted Dr. Jane Smith", "titled_name"),
    ("Message from Mrs. Lee", "titled_name"),
    ("Reviewed Dr Patel's note", "titled_name"),
    ("Forwarded to Doctor Alvarez", "titled_name"),
    ("Spoke with Mr. O'Brien", "titled_name"),
    ("Note signed by Prof. Nakamura", "titled_name"),
    ("Checked in with Ms Garcia", "titled_name"),
    ("reviewed dr. smith notes", "titled_name"),
    ("Patient name: Jordan", "labeled_name"),
    ("Confirmed the patient's name is Alex", "labeled_name"),
    ("Mother's name is Maria", "labeled_name"),
    ("A caregiver named Sam called", "labeled_name"),
    ("Asked whether the patient Jordan slept well", "labeled_name"),
    ("Patient John Smith asked about sleep", "labeled_name"),
]

# Lookalike characters: each reads as the Latin text of an UNSAFE example but was not caught
# before the guard checked a confusables skeleton and folded digits, spaces and dashes.
LOOKALIKES: list[tuple[str, str]] = [
    ("Reviewed chart for \u041cRN 4455", "mrn_labeled"),  # Cyrillic capital EM
    ("Checked 42 \u041eak Street", "street_address"),  # Cyrillic capital O
    ("Patient is a 67 ye\u0430r old man", "age"),  # Cyrillic small A
    ("Reviewed \u039cR\u039d 4455", "mrn_labeled"),  # Greek capitals MU and NU
    ("Spoke with \u041crs. Lee", "titled_name"),  # Cyrillic EM in "Mrs."
    ("Started lisin\u043epril 20 in the morning", "medication_dose"),  # Cyrillic small O in the drug name
    ("Opened the M\u0301RN 4455 record", "mrn_labeled"),  # a combining accent on a letter
    ("Looked up MRN \u0664\u0664\u0665\u0665", "mrn_labeled"),  # Arabic-Indic digits
    ("Called 555\u058a123\u058a4567", "us_phone"),  # Armenian hyphens
    ("Compared results from \u0968\u0966\u0968\u096a\u0966\u0969\u0967\u096a", "date_of_birth"),  # Devanagari digits
    ("Card 4111\u16801111\u16801111\u16801111 on file", "bare_long_id"),  # Ogham space marks
    ("Used reference 123\u058a456\u058a789", "bare_long_id"),  # Armenian hyphens
]

# Upper-, lower- and mixed-case spellings of the seed's banned patterns.
CASE_VARIANTS: list[tuple[str, str]] = [
    ("Consulted dr. Jane Foster", "titled_name"),
    ("Consulted DR JANE FOSTER", "titled_name"),
    ("Consulted dr Jane Foster", "titled_name"),
    ("Spoke with Mrs smith", "titled_name"),
    ("Spoke with MRS SMITH", "titled_name"),
    ("Spoke with mr jones", "titled_name"),
    ("Spoke with MR. JONES", "titled_name"),
    ("Reviewed ms garcia notes", "titled_name"),
    ("Note signed by prof nakamura", "titled_name"),
    ("Forwarded to doctor Alvarez", "titled_name"),
    ("Looked up mrn 4455", "mrn_labeled"),
    ("Looked up Mrn: 4455", "mrn_labeled"),
    ("Matched by ssn ending in 6789", "ssn"),
    ("Confirmed Dob 03/14/1962", "date_of_birth"),
    ("Noted dob: march 14", "date_of_birth"),
    ("Symptoms began on march 14", "written_date"),
    ("Symptoms began on MARCH 14", "written_date"),
    ("Admitted may 5 for observation", "written_date"),
    ("Labs from september 2023 were reviewed", "written_date"),
    ("Lives at 42 oak st", "street_address"),
    ("Lives at 42 OAK ST", "street_address"),
    ("Lives at 42 Oak street", "street_address"),
    ("Mailed to 1600 pennsylvania ave", "street_address"),
    ("Moved to boston, ma 02118", "zip_code"),
    ("Asked whether patient Jordan slept well", "labeled_name"),
    ("PATIENT JOHN SMITH asked about sleep", "labeled_name"),
    ("A caregiver named sam called", "labeled_name"),
]

SAFE: list[str] = [
    "Reviewed recent medications",
    "Retrieved current guidelines for blood pressure",
    "Compared two evidence branches",
    "Checked the claim against 3 sources",
    "Step 2 of 5 completed",
    "Retrieved the top 5 results from the guideline index",
    "2 of 4 checks passed",
    "Kept claims with confidence above 0.9",
    "Looked at lab results from the last 30 days",
    "Used version 2 of the scoring prompt",
    "Patient asked whether a medication change is needed",
    "Recommended a follow-up visit with the care team",
    "Retrieved recent lab results and current guidelines",
    "Walked the decision graph from the trigger node",
    "Aggregated signals from 12 related claims",
    "Asked the model to summarise the evidence",
    "Critic found one unsupported statement and flagged it",
    "Verdict: the recommendation is supported",
    "Confidence in the verdict is 85%",
    "Matched 80% of the expected evidence",
    "Dropped 3 low-quality sources",
    "Searched the memory store for related notes",
    "Reviewed the COVID-19 vaccination guidance",
    "Phase 1 retrieval finished in 300 ms.",
    "Ran 3 retrieval passes with different query phrasings",
    "Ranked 20 candidate passages by relevance",
    "Summarised findings for the care team",
    "Compared the new claim with 2 earlier claims",
    "Checked for drug interactions among current medications",
    "Identified a possible side effect worth discussing with the doctor",
    "Suggested asking the care team about dosing",
    "Evidence from 4 randomized trials was consistent",
    "Waited 2 minutes for the retrieval service",
    "Retried the model call once after a timeout",
    "Found no contradicting evidence in the last 12 months",
    "Escalated to a human reviewer because confidence was low",
    "Reviewed sleep and activity trends over 7 days",
    "Grouped 15 notes into 3 themes",
    "Checked whether the guideline applies to adults",
    "Cross-checked the summary against the source passages",
    "Provenance check passed for all 6 sentences",
    "Hallucination guard removed 1 unsupported sentence",
    "Pulled the latest diabetes management guidelines",
    "Reviewed the patient's recent questions about sleep",
    "Scored each branch between 0 and 1",
    "Used the 2024 guideline edition",
    "Retrieved 10 passages with similarity above 0.75",
    "Merged duplicate evidence from 2 sources",
    "Correlated symptom reports with recent activity changes",
    "Flagged the claim for review by the care team",
    "Completed evidence assembly with 9 supporting passages",
    "Closed the flow after 3 steps",
    "Top 3 passages all came from peer-reviewed sources",
    "Re-ran the check with a stricter threshold of 0.8",
    "Noted that the evidence comes from 2019-2023 studies",
    "Asked the critic agent to challenge the verdict",
    "Checked 2 guideline versions for changes",
    "Looked up general information about vitamin D",
    "Used a 7-day window for trend detection",
    "The first 2 retrieval attempts returned nothing",
    "Gave the recommendation a medium confidence of 0.6",
    "Split the question into 3 sub-questions",
    "Linked the verdict to the supporting claim",
    "Summary written at a grade 6 reading level",
    "Spent 1.5 seconds on retrieval",
    "Confirmed the guideline is still current",
    "Evaluated 4 alternative explanations and kept 1",
    "Noted that the guidance changed in 2021",
    "Retrieved 25 results; 18 were relevant",
    "Used the Critic agent's graph walk to find 5 related nodes",
    "Checked results against the ADA Standards of Care",
    "Reviewed how often the medication is usually taken",
    "Mapped the question to 2 guideline chapters under ICD-10 categories",
    "Improved recall by 12% over the previous pass",
    "Retrieved an overview of type 2 diabetes care",
    "Ranked evidence on a 1 to 5 quality scale",
    "Benchmark case finished all 5 pipeline phases",
    "Checked that the MRN field was present without reading it",
    "Reviewed MS guidelines from 3 professional societies",
    "Compared statins as a drug class",
    "Verdict reached in 4.2 seconds with 3 of 3 checks passing",
    "Called the model at temperature 0.2",
    "Adjusted the branch weight to 0.7",
    "Reviewed the mRNA vaccine evidence summary",
    "Kept the top 10% of results",
    # Near misses for the case-insensitive and lookalike rules.
    "Took 12 ms per retrieval step",
    "Finished in 300 ms. Then ranked the passages",
    "Checks 1 and 2 may conflict",
    "Step 2 may be skipped next time",
    "Compared 3 options in a row",
    "Checked 3 sources the same way",
    "Found 2 factors that drive the result",
    "Reviewed the MR imaging guidance",
    "Asked the doctor about dosing",
    "Reviewed 3 studies named after their authors",
    "Nurse advice line guidance reviewed",
    "Compared the caf\u00e9 study with 2 others",
    "Kept 3 passages with similarity \u2265 0.8",
    "Evidence from 2019\u20132023 was consistent",
    "Marked the claim \u201cnot supported\u201d after 2 checks",
    "Ran 2 passes \u00d7 3 prompts",
]


def _unsafe_params() -> list[object]:
    seen: dict[str, int] = {}
    params: list[object] = []
    for text, rule in UNSAFE:
        seen[rule] = seen.get(rule, 0) + 1
        params.append(pytest.param(text, rule, id=f"{rule}-{seen[rule]}"))
    return params


def test_corpus_is_large_enough() -> None:
    assert len(UNSAFE) >= 60
    assert len(SAFE) >= 60
    assert len(set(SAFE)) == len(SAFE)
    assert len({text for text, _ in UNSAFE}) == len(UNSAFE)


@pytest.mark.parametrize(("text", "rule"), _unsafe_params())
def test_unsafe_summary_is_stopped_by_its_rule(text: str, rule: str) -> None:
    assert check_summary(text) == GuardResult(ok=False, rule=rule)


@pytest.mark.parametrize(("text", "rule"), LOOKALIKES, ids=[f"{rule}-{i}" for i, (_, rule) in enumerate(LOOKALIKES)])
def test_lookalike_characters_are_stopped_like_their_latin_spelling(text: str, rule: str) -> None:
    assert not text.isascii()
    assert check_summary(text) == GuardResult(ok=False, rule=rule)


@pytest.mark.parametrize(
    ("text", "rule"), CASE_VARIANTS, ids=[f"{rule}-{i}" for i, (_, rule) in enumerate(CASE_VARIANTS)]
)
def test_case_variants_are_stopped(text: str, rule: str) -> None:
    assert check_summary(text) == GuardResult(ok=False, rule=rule)


def test_lookalike_letters_in_a_safe_summary_still_pass() -> None:
    # The skeleton only unmasks; a harmless summary in lookalike letters stays harmless.
    assert check_summary("Reviewed r\u0435cent medic\u0430tions").ok
    assert check_summary("C\u043emp\u0430red two evidence branches").ok


@pytest.mark.parametrize("text", SAFE, ids=[text[:48] for text in SAFE])
def test_safe_summary_passes(text: str) -> None:
    assert check_summary(text) == GuardResult(ok=True, rule=None)


def test_every_rule_is_exercised_by_the_unsafe_corpus() -> None:
    assert {rule for _, rule in UNSAFE} == set(RULES)


def test_rule_names_are_unique_and_fit_the_model_column() -> None:
    # ReasoningFlow.summary_guard_rule is a CharField(max_length=64).
    assert len(set(RULES)) == len(RULES)
    assert all(re.fullmatch(r"[a-z0-9_]{1,64}", rule) for rule in RULES)


def test_the_empty_string_passes() -> None:
    assert check_summary("") == GuardResult(ok=True, rule=None)


def test_a_280_char_safe_summary_passes_and_281_is_too_long() -> None:
    text = ("Cross-checked the verdict against the retrieved guideline passages. " * 5)[:279] + "."
    assert len(text) == 280
    assert check_summary(text).ok
    assert check_summary(text + "x") == GuardResult(ok=False, rule="too_long")


def test_a_drug_name_alone_is_not_a_dose() -> None:
    assert check_summary("Reviewed metformin").ok
    assert check_summary("Reviewed metformin 500mg").rule == "medication_dose"


def test_earlier_rules_win_when_several_fire() -> None:
    # A phone number and a titled name: us_phone comes first in RULES.
    assert RULES.index("us_phone") < RULES.index("titled_name")
    assert check_summary("Dr. Smith called from 555-123-4567").rule == "us_phone"


def test_check_all_returns_the_first_failure_in_text_order() -> None:
    texts = [
        "Reviewed recent medications",
        "Consulted Dr. Jane Smith",  # titled_name: comes after email in RULES, but this text is first
        "Sent the summary to jane.doe@example.com",
    ]
    assert check_all(texts) == GuardResult(ok=False, rule="titled_name")


def test_check_all_passes_when_every_text_passes() -> None:
    assert check_all(SAFE) == GuardResult(ok=True, rule=None)
    assert check_all(["", "Reviewed recent medications", ""]) == GuardResult(ok=True, rule=None)
    assert check_all([]) == GuardResult(ok=True, rule=None)


def test_check_all_accepts_a_generator() -> None:
    assert check_all(text for text in ["Compared two evidence branches", "Looked up MRN 12345"]).rule == "mrn_labeled"


def test_result_carries_only_ok_and_rule() -> None:
    assert [field.name for field in dataclasses.fields(GuardResult)] == ["ok", "rule"]


@pytest.mark.parametrize(("text", "rule"), _unsafe_params())
def test_result_never_contains_the_summary(text: str, rule: str) -> None:
    result = check_summary(text)
    shown = repr(result) + str(result)
    assert text not in shown
    # Every PHI-bearing token of the input (anything with a digit or an @) is absent too.
    for token in re.findall(r"\S+", text):
        token = token.strip(".,:;()'")
        if len(token) >= 3 and re.search(r"[\d@]", token):
            assert token not in shown


@pytest.mark.parametrize(
    ("text", "phi"),
    [
        ("Consulted Dr. Jane Smith", "Smith"),
        ("Sent the summary to jane.doe@example.com", "jane.doe"),
        ("Verified SSN 123-45-6789", "6789"),
        ("Reviewed metformin 500mg dosing", "metformin"),
        ("Patient name: Jordan", "Jordan"),
    ],
)
def test_result_never_contains_the_matched_text(text: str, phi: str) -> None:
    result = check_summary(text)
    assert not result.ok
    assert phi not in repr(result)


def test_the_guard_logs_nothing(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    check_all(text for text, _ in UNSAFE)
    for text, _ in UNSAFE:
        check_summary(text)
    assert caplog.records == []


# --- The prefilters (and the rules' quick refusal) skip only alternatives that cannot match -------------

_FRAGMENTS = [
    "Dr. Smith",
    "DR JANE",
    "mrs jones",
    "jane.doe@example.com",
    "jane (at) example",
    "DOB 01/02/1990",
    "born on March 3",
    "5 mg",
    "two tablets",
    "10 mL",
    "patient name: joe",
    "named sam",
    "www.example.com/?a=1",
    "https://x.org/a?b=1",
    "ssn 123-45-6789",
    "XXX-XX-1234",
    "BP 120/80",
    "98.6 °F",
    "ICD-10 E11.9",
    "age 45",
    "45 y/o",
    "in her 40s",
    "12 Main Street",
    "PO Box 12",
    "apt 4",
    "MRN: A12345",
    "acct 123456",
    "555-123-4567",
    "+1 555 123 4567",
    "10.0.0.1",
    "fe80:0:0:0:0:0:0:1",
    "deadbeef-dead-beef-dead-beefdeadbeef",
    "zip 02139",
    "Boston, MA 02139",
    "metformin 500",
    "sertraline: 50",
    "2% cream",
    "policy number 12345",
    "Jan 2024",
]
_WORDS = ["the", "agent", "reviewed", "guideline", "dose", "summary", "prompt", "address", "mr", "pt", "at", "name"]


@settings(max_examples=400, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.sampled_from(_FRAGMENTS),
            st.sampled_from(_WORDS),
            st.text(alphabet=st.characters(codec="utf-8"), max_size=6),
        ),
        max_size=12,
    ).map(" ".join)
)
def test_prefilters_never_change_a_verdict(text: str) -> None:
    from reasoning import summary_guard

    filtered = summary_guard._check(text)
    original = summary_guard._Prefilter.may_match
    summary_guard._Prefilter.may_match = lambda self, text, lowered, has_digit: True  # type: ignore[method-assign]
    summary_guard._QUICK_REFUSAL = False
    try:
        unfiltered = summary_guard._check(text)
    finally:
        summary_guard._Prefilter.may_match = original  # type: ignore[method-assign]
        summary_guard._QUICK_REFUSAL = True

    assert filtered == unfiltered, text


# --- The one-pass refusal (one automaton over every rule's needles) gives the same verdicts -------------


def _verdicts(text: str) -> tuple[GuardResult, GuardResult, GuardResult]:
    """The verdict three ways: as callers get it (the automaton's one pass decides which
    alternatives run), with each alternative's own ``may_match`` (the substring checks the one
    pass replaced), and with every alternative run on every text."""
    from reasoning import summary_guard

    one_pass = summary_guard._check(text)
    summary_guard._QUICK_REFUSAL = False
    try:
        per_alternative = summary_guard._check(text)
        with mock.patch.object(summary_guard._Prefilter, "may_match", lambda self, text, lowered, has_digit: True):
            unfiltered = summary_guard._check(text)
    finally:
        summary_guard._QUICK_REFUSAL = True
    return one_pass, per_alternative, unfiltered


def _every_rule(text: str) -> tuple[tuple[bool, ...], tuple[bool, ...]]:
    """Whether each rule fires on each view of the text (every rule, not only the first that fires),
    as callers get it and with every alternative run on every text."""
    from reasoning import summary_guard

    folded = summary_guard._fold(text)
    views = [summary_guard._view(folded), summary_guard._view(summary_guard._skeleton(folded))]

    def fired() -> tuple[bool, ...]:
        return tuple(fires(text, view) for _, fires in summary_guard._RULES for view in views)

    one_pass = fired()
    summary_guard._QUICK_REFUSAL = False
    try:
        with mock.patch.object(summary_guard._Prefilter, "may_match", lambda self, text, lowered, has_digit: True):
            unfiltered = fired()
    finally:
        summary_guard._QUICK_REFUSAL = True
    return one_pass, unfiltered


def _demo_summaries() -> list[str]:
    from reasoning.management import demo_flows

    texts = [demo_flows.UNSAFE_SUMMARY, demo_flows.UNSAFE_VALUE_SUMMARY]
    for agent in demo_flows.AGENTS.values():
        for topic in agent.topics:
            texts += [topic.trigger, topic.verdict, topic.outcome]
            texts += [step.summary.format(focus=topic.focus) for step in agent.plan]
    return texts


def test_one_pass_refusal_keeps_every_verdict_of_the_demo_and_the_corpus() -> None:
    texts = _demo_summaries() + SAFE + [text for text, _ in UNSAFE + LOOKALIKES + CASE_VARIANTS]
    assert len(texts) > 300
    differing = [text for text in texts if len(set(_verdicts(text))) != 1]
    assert differing == []


# Pieces that hold needles inside, beside or over one another ("mrs" holds "mr", "ms" and "rs"),
# with and without optional dots ("d.o.b", "y.o."), and words that hold a needle without being PHI.
_NEEDLE_PIECES = [
    "mrs",
    "MRS.",
    "Mister",
    "ms.",
    "mx",
    "Dr",
    "d.o.b",
    "do.b.",
    "DOB:",
    "m.r.n",
    "MRN12345",
    "med.rec",
    "y.o.",
    "y/o",
    "yrs",
    "capsules",
    "breaths",
    "birthday",
    "icd-10",
    "E11.9",
    "e11.65",
    "MA",
    "ma",
    "02139",
    "1962-03-14",
    "4/5/62",
    "100%",
    "symptoms",
    "items",
    "hundred",
    "drafted",
    "reason",
    "prompt",
    "named",
    "(at)",
]


@settings(max_examples=1500, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.sampled_from(_FRAGMENTS),
            st.sampled_from(_WORDS + _NEEDLE_PIECES),
            st.sampled_from(SAFE),
            st.text(alphabet="abdmorsxyMRSDOB0123456789./-:# ", max_size=8),
            st.text(alphabet=st.characters(codec="utf-8"), max_size=4),
        ),
        max_size=10,
    )
    .flatmap(lambda parts: st.sampled_from([" ", "", ", "]).map(lambda sep: sep.join(parts)))
    .flatmap(lambda text: st.sampled_from([text, text.upper(), text.lower(), text.title()]))
)
def test_one_pass_refusal_keeps_every_verdict(text: str) -> None:
    one_pass, per_alternative, unfiltered = _verdicts(text)
    assert one_pass == per_alternative == unfiltered, text


# --- Needles count only at the word edges their regex requires ------------------------------------------
# The prefilter knows, per needle, whether its regex puts it at a word start or end ("\b", "\s",
# "(?![a-z])", a digit before a unit): "pt" inside "assumptions" is no hit. The texts below probe
# those edges with every kind of neighbour the regexes tell apart (letters, accented letters,
# digits of any script, underscore, apostrophes, dashes, punctuation, case) and compare verdicts
# with every alternative's regex run on every text.


def _prefilter_needs(alternative: str) -> list[set[tuple[str, int, int]]]:
    from reasoning import summary_guard

    needs = summary_guard._prefilter(alternative).needs
    return [{(needle.text, needle.start, needle.end) for needle in options} for options in needs]


@pytest.mark.parametrize(
    ("alternative", "needs"),
    [
        (r"\bpt\s+\d", [{("pt", 2, 2)}]),
        (r"(?<![\w:])pt[\s:]", [{("pt", 2, 2)}]),
        (r"(?<!\d)pt(?:\.|\s)", [{("pt", 0, 2)}]),  # "(?<!\d)" leaves letters before it
        (r"(?i:\d\s*-?\s*mg(?![a-z]))", [{("mg", 1, 1)}]),  # after a digit, "-" or a space; before a non-letter
        (r"\d\s*mg(?![a-z])", [{("mg", 1, 0)}]),  # case-sensitive: "MG" may follow
        (r"(?i:\b[a-z]*pril\b)", [{("pril", 0, 2)}]),
        (r"(?i:\b(?:full\s+|sur)?name\s*:)", [{("name", 0, 2)}, {(":", 0, 0)}]),  # "surname"
        (r"(?i:\b(?:ssn|social\s+security))", [{("ssn", 2, 0), ("social", 2, 2)}, {("sn", 0, 0), ("security", 2, 0)}]),
        (r"\bpt_\d", [{("pt", 2, 1)}]),  # the underscore is a word character, not a letter
        (r"(?i:\bmg/dl\b)", [{("dl", 2, 2)}]),  # a needle with a "/" stands for its (last) longest run of letters
        (r"(?i:\d\s*a1c\b)", [{("c", 1, 2)}]),
        (r"\bp\.?\s?o\.?\s*box\b", [{("p", 2, 0)}, {("box", 0, 2)}]),  # "box" holds the "o"
        (r"(?:\bpt|xpt)\b", [{("pt", 2, 2), ("xpt", 0, 2)}]),
        (r"\s(?:pt)+\s", [{("pt", 0, 0)}]),  # a repetition's neighbours are other repetitions ("ptpt")
        (r"pt", [{("pt", 0, 0)}]),
    ],
)
def test_needles_know_their_word_edges(alternative: str, needs: list[set[tuple[str, int, int]]]) -> None:
    assert sorted(map(sorted, _prefilter_needs(alternative))) == sorted(map(sorted, needs))


@pytest.mark.parametrize(
    ("alternative", "needs_run"),
    [
        (r"(?i:\b[0-9a-f]{8}-?[0-9a-f]{4}\b)", True),  # a UUID's first group
        (r"\b[0-9A-F]{8,}\b", True),
        (r"(?:x[0-9a-f]{8}|[0-9]{9})", True),  # each branch has its run
        (r"(?:x[0-9a-f]{8}|[0-9]{3})", False),
        (r"[0-9a-f]{7}", False),  # too short
        (r"[0-9a-g]{8}", False),  # "g" is no hexadecimal digit
        (r"\w{8}", False),
        (r"(?:[0-9a-f]{8})?x", False),  # optional
    ],
)
def test_a_run_of_hexadecimal_digits_is_required_only_when_every_match_holds_one(
    alternative: str, needs_run: bool
) -> None:
    from reasoning import summary_guard

    assert summary_guard._prefilter(alternative).needs_hex_run is needs_run


@pytest.mark.parametrize(
    "text",
    [
        "see deadbeef-cafe-babe-face-decadefacade in the log",  # letters only, either case below
        "see DEADBEEF-CAFE-BABE-FACE-DECADEFACADE in the log",
        "the key 9f86d081884c7d65 was used",
    ],
)
def test_an_opaque_id_without_a_needle_is_still_refused(text: str) -> None:
    assert check_summary(text) == GuardResult(ok=False, rule="opaque_id")
    assert _verdicts(text)[0] == _verdicts(text)[2]


def _alternatives_run(text: str) -> list[tuple[str, int]]:
    """The (rule, alternative) pairs whose needles an ASCII text holds (those whose regex runs)."""
    from reasoning import summary_guard

    view = summary_guard._view(text)
    assert view.needles is not None
    names = {id(pattern): name for name, pattern in vars(summary_guard).items() if isinstance(pattern, re.Pattern)}
    return [
        (names[id(pattern)], index)
        for pattern, prefilters in summary_guard._PREFILTERS.items()
        for index, prefilter in enumerate(prefilters)
        if all(view.needles & mask for mask in summary_guard._requirements(prefilter))
    ]


def test_needles_inside_words_run_no_regex() -> None:
    # The ingest benchmark's sentence: "pt" in "assumptions", "son" in "comparison" and "reasons",
    # "ms" in "items", "two" without a unit, "in" without "her", "is" without "name".
    text = (
        "the agent checks the assumptions and the reasons behind the comparison of two sources and "
        "flags items where data is missing in the northern region before proposing a concise answer"
    )
    assert check_summary(text).ok
    # The UUID alternative needs no literal, but eight hexadecimal digits in a row.
    assert _alternatives_run(text) == []
    with_digit = _alternatives_run("the comparison of 5 items in two reasons")
    assert not [run for run in with_digit if run[0] in {"_TITLED_NAME", "_LABELED_NAME", "_MEDICATION_DOSE"}]
    assert ("_TITLED_NAME", 0) in _alternatives_run("spoke with ms garcia")
    assert ("_MEDICATION_DOSE", 1) in _alternatives_run("took two tabs")


# Neighbours the regexes tell apart: letters (ASCII, accented, lookalikes, ones that fold to ASCII
# under (?i): Kelvin sign, long s, dotted capital I), digits (ASCII, Arabic-Indic, superscript),
# underscore, apostrophes, dashes (ASCII, en, em, non-breaking hyphen), punctuation, spaces (plain,
# no-break), a combining accent, full-width letters.
_EDGE_CHARS = [
    *" xQz7_'.,/:;()#%@+=?-",
    "\u2019",
    "\u2013",
    "\u2014",
    "\u2011",
    "\u00e9",
    "\u00c9",
    "\u00df",
    "\u0130",
    "\u017f",
    "\u212a",
    "\u0661",
    "\u00b2",
    "\u00a0",
    "\u0301",
    "\u041c",
    "\u043e",
    "\uff2d",
    "\u00b5",
    "\u00b0",
]
# The ingest benchmark's sentence (bench/bench_ingest.py PHRASE).
_INGEST_PHRASE = (
    "the user asks about quarterly revenue growth in the northern region and "
    "whether the forecast model over weights holiday effects so the agent "
    "retrieves recent reports compares the baseline with adjusted numbers checks "
    "the assumptions cites two sources and flags uncertainty where data is "
    "missing before proposing a concise answer with caveats and next steps"
)
# Words that hold needles without being PHI, and the ingest benchmark's words.
_HOLDERS = [
    "assumptions",
    "reasons",
    "comparison",
    "items",
    "two",
    "crisp",
    "adopt",
    "mgmt",
    "named",
    "surname",
    "hba1c",
    "a1c",
    "mg/dl",
    "y/o",
    "yo",
    "dob",
    "d.o.b",
    "www",
    "pt",
    "p.o.",
    "st",
    "ave",
    *_INGEST_PHRASE.split(),
]


def _needle_texts() -> list[str]:
    from reasoning import summary_guard

    return sorted({needle.text for needle in summary_guard._NEEDLE_BITS})


def probe_text(rng: random.Random) -> str:
    """A text that puts needles and PHI next to every kind of neighbour: fragments, needles and words
    that hold them, joined with or without spaces, in any case, then with characters put in at
    random places and spaces swapped for other neighbours. At most 280 characters."""
    needles = _needle_texts()
    parts = []
    for _ in range(rng.randint(1, 6)):
        pick = rng.random()
        if pick < 0.3:
            part = rng.choice(_FRAGMENTS + [text for text, _ in UNSAFE + CASE_VARIANTS])
        elif pick < 0.55:
            part = rng.choice(needles)
        elif pick < 0.75:
            part = rng.choice(_HOLDERS + _NEEDLE_PIECES)
        elif pick < 0.9:
            part = rng.choice(SAFE)
        else:
            part = "".join(rng.choice(_EDGE_CHARS + list("0123456789abcdmnoprsty")) for _ in range(rng.randint(1, 6)))
        part = rng.choice([part, part, part.upper(), part.lower(), part.title(), part.swapcase()])
        parts.append(part + rng.choice([" ", " ", "", rng.choice(_EDGE_CHARS)]))
    text = "".join(parts)
    for _ in range(rng.randint(0, 3)):
        at = rng.randint(0, len(text))
        text = text[:at] + rng.choice(_EDGE_CHARS) + text[at:]
    spaces = [at for at, char in enumerate(text) if char == " "]
    for at in rng.sample(spaces, k=min(len(spaces), rng.randint(0, 2))):
        text = text[:at] + rng.choice(_EDGE_CHARS) + text[at + 1 :]
    return text[:280]


def test_phi_glued_to_every_neighbour_keeps_every_verdict() -> None:
    # Each fragment and unsafe summary with each neighbour before it, after it, or in place of its spaces.
    phi = _FRAGMENTS + [text for text, _ in UNSAFE + LOOKALIKES + CASE_VARIANTS]
    texts = [
        (f"{char}{text}", f"{text}{char}", text.replace(" ", char))[(row + column) % 3]
        for row, text in enumerate(phi)
        for column, char in enumerate(_EDGE_CHARS)
    ]
    differing = [text for text in texts if len(set(_verdicts(text))) != 1]
    assert differing == []


@settings(max_examples=1500, deadline=None)
@given(st.randoms(use_true_random=False))
def test_needles_next_to_any_neighbour_keep_every_verdict(rng: random.Random) -> None:
    from reasoning import summary_guard

    text = probe_text(rng)
    assert summary_guard._view(text).has_digit == (re.search(r"\d", text) is not None)
    one_pass, per_alternative, unfiltered = _verdicts(text)
    assert one_pass == per_alternative == unfiltered, text
    every_rule, every_rule_unfiltered = _every_rule(text)
    assert every_rule == every_rule_unfiltered, text


# The campaign (run by hand): RFT_GUARD_CAMPAIGN=250000 .venv/bin/pytest tests/reasoning/test_summary_guard.py
# -k campaign -s. Seeded, so a failure replays; compares the verdicts and every rule on every view,
# and prints how many texts each verdict got.
_CAMPAIGN = int(os.environ.get("RFT_GUARD_CAMPAIGN", "0"))


@pytest.mark.skipif(not _CAMPAIGN, reason="set RFT_GUARD_CAMPAIGN to a number of texts")
def test_campaign_of_probe_texts_keeps_every_verdict() -> None:
    verdicts: collections.Counter[str] = collections.Counter()
    differing = []
    for seed in range(_CAMPAIGN):
        text = probe_text(random.Random(seed))
        one_pass, per_alternative, unfiltered = _verdicts(text)
        every_rule, every_rule_unfiltered = _every_rule(text)
        verdicts[unfiltered.rule or "ok"] += 1
        if not one_pass == per_alternative == unfiltered or every_rule != every_rule_unfiltered:
            differing.append((seed, text))
    print(f"\ncampaign: {_CAMPAIGN} texts, {len(differing)} differing; verdicts {dict(verdicts.most_common())}")
    assert differing == []


# --- The verdicts a process keeps ---------------------------------------------------------------


def test_a_kept_verdict_is_the_rules_verdict_and_keeps_no_text() -> None:
    from reasoning import summary_guard

    summary_guard._verdicts.clear()
    texts = ["Retrieved the guideline", "Called patient Jane Doe", "MRN 123456789 reviewed", "Retrieved the guideline"]
    first = [check_summary(text) for text in texts]
    again = [check_summary(text) for text in texts]  # from the kept verdicts
    assert first == again == [summary_guard._check(text) for text in texts]
    assert not first[1].ok and not first[2].ok
    assert len(summary_guard._verdicts) == 3
    assert all(isinstance(key, bytes) and len(key) == 16 for key in summary_guard._verdicts)
    assert not any(text.encode() in key for key in summary_guard._verdicts for text in texts)


def test_the_kept_verdicts_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    from reasoning import summary_guard

    monkeypatch.setattr(summary_guard, "_VERDICTS_KEPT", 10)
    summary_guard._verdicts.clear()
    for n in range(25):
        assert check_summary(f"Step {n} reviewed the evidence").ok
    assert len(summary_guard._verdicts) <= 10
