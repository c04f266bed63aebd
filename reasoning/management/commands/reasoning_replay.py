"""Replay the replay cases through an agent; exit 1 when the drifting share is over the threshold.

Exit codes (docs/evaluation.md): 0 within the threshold, 1 over it, 2 for a usage error (a bad
flag, an unreadable or invalid case or corpus, a server that refuses the token).
"""

from __future__ import annotations

import json
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from reasoning.evaluation import EXIT_FAILED, EXIT_USAGE, InputError, services
from reasoning.evaluation.invokers import DEFAULT_TIMEOUT, FlowReader, HttpInvoker, ReferenceInvoker, StubInvoker
from reasoning.evaluation.replay import AgentInvoker, ReplayReport, ReplayResult, Status, load_cases, run_replay
from reasoning.evaluation.signatures import Corpus, load_corpus
from reasoning.models import EvaluationRun

ACTOR = "system:cli"

INVOKERS = ("stub", "reference", "http")
URL_VARIABLE = "REASONING_FLOW_URL"  # as the SDK reads them
TOKEN_VARIABLE = "REASONING_FLOW_TOKEN"  # noqa: S105  # the variable's name, not a secret


def usage(message: str) -> CommandError:
    return CommandError(message, returncode=EXIT_USAGE)


class Command(BaseCommand):
    help = "Replay the replay cases through an agent and compare the flows it records with the corpus."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--invoker", default="stub", help=f"One of {', '.join(INVOKERS)} (default: stub).")
        parser.add_argument("--cases", default=None, help="A directory of case files (default: the fixture cases).")
        parser.add_argument("--corpus", default=None, help="The signature corpus (default: the fixture corpus).")
        parser.add_argument(
            "--threshold",
            default="0",
            help="The largest drifting share (0..1) that still passes (default: 0, any drift fails).",
        )
        parser.add_argument("--json", action="store_true", help="One JSON document instead of lines.")
        parser.add_argument("--record", action="store_true", help="Store the run for the evaluation page (audited).")
        parser.add_argument("--url", default=None, help="http: the agent service each case is POSTed to.")
        parser.add_argument("--server", default=None, help=f"reference, http: the server (default: ${URL_VARIABLE}).")
        parser.add_argument(
            "--token",
            default=None,
            help=f"reference, http: a token with reasoning.admin (reference: and reasoning.write) "
            f"(default: ${TOKEN_VARIABLE}).",
        )
        parser.add_argument(
            "--timeout",
            default=str(DEFAULT_TIMEOUT),
            help=f"reference, http: seconds to wait for each flow to reach the server (default: {DEFAULT_TIMEOUT:g}).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        threshold = _number(options["threshold"], "--threshold", 0.0, 1.0)
        timeout = _number(options["timeout"], "--timeout", 0.1, 600.0)
        try:
            corpus = load_corpus(options["corpus"])
            cases = load_cases(options["cases"], corpus)
        except InputError as exc:
            raise usage(str(exc)) from None
        invoker = self.invoker(options, corpus, timeout)
        try:
            report = run_replay(cases, invoker, threshold=threshold)
        finally:
            invoker.close()
        if options["json"]:
            self.stdout.write(json.dumps(report.as_json(), indent=2))
        else:
            for result in report.results:
                self.stdout.write(_line(result))
            self.stdout.write(_summary(report))
        if options["record"]:
            record(report)
        if not report.passed:
            raise CommandError(
                f"drift {report.drift_share:.1%} is over the threshold {report.threshold:.1%}", returncode=EXIT_FAILED
            )

    def invoker(self, options: dict[str, Any], corpus: Corpus, timeout: float) -> AgentInvoker:
        name = options["invoker"]
        if name not in INVOKERS:
            raise usage(f"--invoker: {name!r} is not one of {', '.join(INVOKERS)}")
        if options["url"] and name != "http":
            raise usage("--url: only the http invoker POSTs to an agent service")
        if name == "stub":
            return StubInvoker(corpus)
        server = options["server"] or settings.REASONING_FLOW_URL
        token = options["token"] or settings.REASONING_FLOW_TOKEN  # or <NAME>_FILE
        if not server:
            raise usage(f"--server: the {name} invoker reads the flows back from the server (or set {URL_VARIABLE})")
        if not server.startswith(("http://", "https://")):
            raise usage(f"--server: {server!r} is not an http(s) URL")
        if not token:
            raise usage(f"--token: the {name} invoker needs a token with reasoning.admin (or set {TOKEN_VARIABLE})")
        if name == "http" and not options["url"]:
            raise usage("--url: the http invoker needs the agent service's URL")
        if name == "http" and not options["url"].startswith(("http://", "https://")):
            raise usage(f"--url: {options['url']!r} is not an http(s) URL")
        reader = FlowReader(server, token, timeout=timeout)
        problem = reader.check()
        if problem is not None:
            reader.close()
            raise usage(f"--server/--token: {problem}")
        if name == "http":
            return HttpInvoker(options["url"], server, token, timeout=timeout, reader=reader)
        try:
            return ReferenceInvoker(server, token, timeout=timeout, reader=reader)
        except ImportError:
            reader.close()
            raise usage("--invoker reference: needs the reasoning-flow-sdk package (pip install -e sdk)") from None


def record(report: ReplayReport) -> None:
    by_trigger_type: dict[str, dict[str, int]] = {}
    for result in sorted(report.results, key=lambda r: r.trigger_type):
        entry = by_trigger_type.setdefault(result.trigger_type, {"total": 0, "drifting": 0, "skipped": 0})
        entry["total"] += 1
        entry["drifting"] += result.drifting
    services.record_evaluation_run(
        kind=EvaluationRun.Kind.REPLAY,
        source=report.invoker,
        total=report.total,
        drifting=report.drifting,
        skipped=0,
        threshold=report.threshold,
        passed=report.passed,
        by_trigger_type=by_trigger_type,
        findings=[
            {"id": r.case_id, "trigger_type": r.trigger_type, "status": r.status.value}
            for r in report.results
            if r.status is not Status.MATCHED
        ],
        actor=ACTOR,
    )


def _number(raw: str, flag: str, low: float, high: float) -> float:
    try:
        value = float(raw)
    except ValueError:
        raise usage(f"{flag}: {raw!r} is not a number") from None
    if not low <= value <= high:
        raise usage(f"{flag}: {raw!r} is not between {low:g} and {high:g}")
    return value


def _kinds(kinds: tuple[str, ...]) -> str:
    return " → ".join(kinds) or "(no steps)"


def _line(result: ReplayResult) -> str:
    head = f"{result.case_id}  {result.trigger_type}  {result.status.value}"
    actual, expected = result.actual, result.expected
    if result.status is Status.ERROR:
        return f"{head}: {result.error}"
    if actual is None or result.status is Status.MATCHED:
        return head
    flow = f" (flow {actual.flow_id})" if actual.flow_id else ""
    if result.status is Status.SEQUENCE_DRIFT:
        return f"{head}: expected {_kinds(expected.step_kinds)}, got {_kinds(actual.step_kinds)}{flow}"
    want = expected.outcome + (f" ({expected.verdict})" if expected.verdict else "")
    got = actual.outcome + (f" ({actual.verdict})" if actual.verdict else "")
    return f"{head}: expected {want}, got {got}{flow}"


def _summary(report: ReplayReport) -> str:
    verdict = "passed" if report.passed else "FAILED"
    return (
        f"{report.invoker}: {report.total} cases, {report.drifting} drifting ({report.drift_share:.1%}), "
        f"threshold {report.threshold:.1%}: {verdict}"
    )
