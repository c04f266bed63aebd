"""``make lint``'s dependency audit: pip-audit over the installed environment.

Fails (exit 1) when an installed package has a known vulnerability that ``.pip-audit-ignore``
does not allow, naming each with the versions that fix it. The project and the SDK are local,
editable installs: skipped (``--skip-editable``).

pip-audit asks PyPI's JSON API for each package's advisories. Every request has a socket timeout
(``--timeout``) and the whole run a deadline (``--deadline``), so a network that does not answer
ends the audit with a message, never a hang. When the advisories cannot be had (no network, or an
index without PyPI's per-version JSON API: pip-audit then reports each package as "not found on
PyPI"), the audit has not been done: that is a warning, exit 0, unless ``--strict``
(``PIP_AUDIT_STRICT=1`` for ``make lint``), which makes it a failure (exit 2).

``.pip-audit-ignore``: one vulnerability ID a line, then ``#`` and why it is allowed (required);
blank lines and lines starting with ``#`` are comments.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
IGNORE_FILE = ROOT / ".pip-audit-ignore"
EXIT_VULNERABLE = 1
EXIT_NOT_AUDITED = 2


class AllowListError(ValueError):
    pass


def read_allow_list(text: str) -> dict[str, str]:
    """Vulnerability ID → reason, from ``.pip-audit-ignore``'s text."""
    allowed: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        vuln_id, _, reason = (part.strip() for part in line.partition("#"))
        if not reason:
            raise AllowListError(f".pip-audit-ignore line {number}: {vuln_id} needs a reason after '#'")
        if " " in vuln_id:
            raise AllowListError(f".pip-audit-ignore line {number}: one vulnerability ID a line, got {vuln_id!r}")
        allowed[vuln_id] = reason
    return allowed


@dataclass(frozen=True)
class Verdict:
    code: int
    message: str


def judge(report: dict[str, Any], *, strict: bool) -> Verdict:
    """What pip-audit's JSON report means for ``make lint``."""
    vulnerable: list[str] = []
    not_audited: list[str] = []
    audited = 0
    for dependency in report.get("dependencies", []):
        name, version = dependency.get("name", "?"), dependency.get("version", "?")
        reason = dependency.get("skip_reason")
        if reason:
            if "editable" not in reason:
                not_audited.append(f"{name} ({reason})")
            continue
        audited += 1
        for vuln in dependency.get("vulns", []):
            fixes = ", ".join(vuln.get("fix_versions") or []) or "no fixed release"
            aliases = ", ".join(vuln.get("aliases") or [])
            vulnerable.append(
                f"{name} {version}: {vuln.get('id')}{f' ({aliases})' if aliases else ''}; fixed in {fixes}"
            )
    if vulnerable:
        lines = "\n  ".join(vulnerable)
        return Verdict(
            EXIT_VULNERABLE,
            f"dependency audit: {len(vulnerable)} known vulnerabilities:\n  {lines}\n"
            "Raise the pin in pyproject.toml to a fixed release, or allow the ID in .pip-audit-ignore with a reason.",
        )
    if not_audited:
        shown = "\n  ".join(not_audited[:5]) + (
            f"\n  … and {len(not_audited) - 5} more" if len(not_audited) > 5 else ""
        )
        message = (
            f"dependency audit NOT DONE for {len(not_audited)} of {len(not_audited) + audited} packages: the "
            f"vulnerability service did not answer for them (no network, or an index without PyPI's JSON API):\n"
            f"  {shown}"
        )
        return Verdict(
            EXIT_NOT_AUDITED if strict else 0, message + ("" if strict else "\n(a warning: PIP_AUDIT_STRICT=1 fails)")
        )
    return Verdict(0, f"dependency audit: no known vulnerabilities in {audited} packages")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--strict", action="store_true", help="fail when packages could not be audited")
    parser.add_argument("--timeout", type=int, default=15, help="seconds per request to the service (default 15)")
    parser.add_argument("--deadline", type=int, default=300, help="seconds for the whole audit (default 300)")
    args = parser.parse_args(argv)
    try:
        allowed = read_allow_list(IGNORE_FILE.read_text() if IGNORE_FILE.exists() else "")
    except AllowListError as exc:
        print(exc, file=sys.stderr)
        return EXIT_VULNERABLE
    command = [sys.executable, "-m", "pip_audit", "--skip-editable", "--progress-spinner", "off"]
    command += ["--format", "json", "--aliases", "on", "--desc", "off", "--timeout", str(args.timeout)]
    for vuln_id in allowed:
        command += ["--ignore-vuln", vuln_id]
    try:
        run = subprocess.run(command, capture_output=True, text=True, timeout=args.deadline, check=False, cwd=ROOT)
    except subprocess.TimeoutExpired:
        print(f"dependency audit: pip-audit did not finish within {args.deadline} s (network?)", file=sys.stderr)
        return EXIT_NOT_AUDITED if args.strict else 0
    try:
        report = json.loads(run.stdout)
    except ValueError:
        # No report: pip-audit failed before auditing (e.g. the service refused every request).
        tail = (run.stderr.strip().splitlines() or ["no output"])[-1]
        print(f"dependency audit: pip-audit exited {run.returncode} without a report: {tail}", file=sys.stderr)
        return EXIT_NOT_AUDITED if args.strict else 0
    verdict = judge(report, strict=args.strict)
    print(verdict.message, file=sys.stderr if verdict.code or "NOT DONE" in verdict.message else sys.stdout)
    if allowed:
        print(f"dependency audit: allowed by .pip-audit-ignore: {', '.join(sorted(allowed))}")
    return verdict.code


if __name__ == "__main__":
    sys.exit(main())
