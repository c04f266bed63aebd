"""``make lint``'s dependency audit (scripts/audit_dependencies.py): how pip-audit's JSON report and
the allow-list are read. The audit itself needs PyPI's advisories; ``make lint`` runs it."""

from __future__ import annotations

import pytest

from tests.scripts import ROOT, load_script

audit = load_script(ROOT / "scripts" / "audit_dependencies.py", "audit_dependencies")


def test_a_known_vulnerability_fails_and_names_its_fix() -> None:
    report = {
        "dependencies": [
            {
                "name": "django",
                "version": "5.2.0",
                "vulns": [{"id": "PYSEC-1", "fix_versions": ["5.2.1"], "aliases": ["CVE-1"]}],
            },
            {"name": "requests", "version": "2.32.3", "vulns": []},
            {"name": "reasoning-flow-tracker", "skip_reason": "distribution marked as editable"},
        ],
        "fixes": [],
    }

    verdict = audit.judge(report, strict=False)

    assert verdict.code == audit.EXIT_VULNERABLE
    assert "django 5.2.0: PYSEC-1 (CVE-1); fixed in 5.2.1" in verdict.message


def test_a_clean_report_passes_and_editables_are_not_counted() -> None:
    report = {
        "dependencies": [
            {"name": "requests", "version": "2.32.3", "vulns": []},
            {"name": "reasoning-flow-sdk", "skip_reason": "distribution marked as editable"},
        ]
    }

    assert audit.judge(report, strict=True) == audit.Verdict(
        0, "dependency audit: no known vulnerabilities in 1 packages"
    )


@pytest.mark.parametrize(("strict", "code"), [(False, 0), (True, 2)])
def test_packages_the_service_could_not_answer_for_warn_or_fail(strict: bool, code: int) -> None:
    reason = "Dependency not found on PyPI and could not be audited: anyio (4.16.0)"
    report = {"dependencies": [{"name": "anyio", "skip_reason": reason}]}

    verdict = audit.judge(report, strict=strict)

    assert verdict.code == code
    assert verdict.message.startswith("dependency audit NOT DONE for 1 of 1 packages")


def test_the_allow_list_needs_a_reason_for_each_id() -> None:
    text = "# comment\n\nGHSA-aaaa-bbbb-cccc  # only the CLI is affected; we never run it\n"
    assert audit.read_allow_list(text) == {"GHSA-aaaa-bbbb-cccc": "only the CLI is affected; we never run it"}
    with pytest.raises(audit.AllowListError, match="line 1: PYSEC-2 needs a reason"):
        audit.read_allow_list("PYSEC-2\n")


def test_the_shipped_allow_list_reads() -> None:
    audit.read_allow_list((ROOT / ".pip-audit-ignore").read_text())
