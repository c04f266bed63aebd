"""Run agent turns against a server with one capturing recorder, then print the figures.

A turn is one ``turn()`` in which one or two of the reference agents (Researcher, Critic,
Correlator) or a benchmark case answer a generated question, so the flows of a turn share a
trace id. ``--concurrency`` agent threads share the turns. At the end the recorder is flushed
(at most ``--flush-timeout`` seconds) and one summary is printed: the human lines, then the same
figures as ``key=value`` lines for a benchmark to parse. The time "inside SDK calls" is each
``flow()`` / ``step()`` / ``llm_step()`` / ``complete()`` call an agent makes, timed on its own
(wall time: with several agent threads it includes waiting for the GIL); the offline model's
time is not in it. Exit code 0 when everything recorded reached the server,
1 otherwise (the summary says why), 2 when no server is configured.

Simulated flows use a spool of their own (``--spool-dir``), so they never mix with the batches
a real agent left in ``REASONING_FLOW_SPOOL_DIR``.
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import random
import sys
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Any, ParamSpec, TypeVar, cast

from reasoning_flow_sdk._config import default_spool_dir
from reasoning_flow_sdk._flow import Flow, Step
from reasoning_flow_sdk._turn import turn
from reasoning_flow_sdk.agents import Correlator, Critic, OfflineModel, Researcher, run_benchmark_case
from reasoning_flow_sdk.recorder import BaseRecorder, ReasoningFlowRecorder

logger = logging.getLogger(__name__)

P = ParamSpec("P")
R = TypeVar("R")

# The agents of each turn, taken in turn so that any run of six turns holds all of them.
PLANS: tuple[tuple[str, ...], ...] = (
    ("researcher",),
    ("researcher", "critic"),
    ("correlator",),
    ("benchmark",),
    ("researcher", "correlator"),
    ("critic",),
)
_DRUGS = ("metformin", "atorvastatin", "lisinopril", "semaglutide", "apixaban", "sertraline")
_OUTCOMES = ("HbA1c", "LDL cholesterol", "blood pressure", "body weight", "stroke risk", "relapse rate")
_GROUPS = ("adults over 65", "adults with type 2 diabetes", "people with CKD stage 3", "smokers")
STATS_SHOWN = ("sent", "retried", "spooled", "dropped", "rejected")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--turns", type=_positive_int, default=1000, help="agent turns to run (default 1000)")
    parser.add_argument("--url", help="the server (default: REASONING_FLOW_URL)")
    parser.add_argument("--token", help="a reasoning.write token (default: REASONING_FLOW_TOKEN)")
    parser.add_argument(
        "--spool-dir",
        type=Path,
        default=None,
        help=f"where undeliverable batches wait (default: {simulate_spool_dir()})",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the questions and the offline model")
    parser.add_argument("--concurrency", type=_positive_int, default=4, help="agent threads (default 4)")
    parser.add_argument(
        "--flush-timeout",
        type=_non_negative_float,
        default=30.0,
        help="seconds to wait at the end for delivery (default 30)",
    )
    parser.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="show a progress bar on stderr (default: when stderr is a terminal)",
    )


def simulate_spool_dir() -> Path:
    return default_spool_dir(None).parent.parent / "simulate-spool"


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def _non_negative_float(text: str) -> float:
    value = float(text)
    if not value >= 0:  # also refuses nan
        raise argparse.ArgumentTypeError(f"must be 0 or more, not {text}")
    return value


# --- timing the SDK calls ------------------------------------------------------------------------
class _TimedFlow:
    """A flow whose recording calls are timed; everything else is the flow's."""

    def __init__(self, flow: Flow, samples: list[int]) -> None:
        self._flow = flow
        self._samples = samples

    def _time(self, call: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
        started = time.perf_counter_ns()
        try:
            return call(*args, **kwargs)
        finally:
            self._samples.append(time.perf_counter_ns() - started)

    def step(self, *args: Any, **kwargs: Any) -> Step:
        return self._time(self._flow.step, *args, **kwargs)

    def llm_step(self, *args: Any, **kwargs: Any) -> Step:
        return self._time(self._flow.llm_step, *args, **kwargs)

    def complete(self, *args: Any, **kwargs: Any) -> None:
        self._time(self._flow.complete, *args, **kwargs)

    def set_outcome(self, *args: Any, **kwargs: Any) -> None:
        self._time(self._flow.set_outcome, *args, **kwargs)

    def abort(self, *args: Any, **kwargs: Any) -> None:
        self._time(self._flow.abort, *args, **kwargs)

    def __enter__(self) -> _TimedFlow:
        self._flow.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._time(self._flow.__exit__, *exc)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._flow, name)


class _TimedRecorder:
    """One agent thread's view of the recorder: ``flow()`` and the flow's calls are timed.

    Each thread has its own, so its samples list needs no lock."""

    def __init__(self, recorder: BaseRecorder) -> None:
        self.recorder = recorder
        self.samples: list[int] = []  # nanoseconds, one per SDK call

    def flow(self, *args: Any, **kwargs: Any) -> _TimedFlow:
        started = time.perf_counter_ns()
        try:
            flow = self.recorder.flow(*args, **kwargs)
        finally:
            self.samples.append(time.perf_counter_ns() - started)
        return _TimedFlow(flow, self.samples)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.recorder, name)


# --- the turns -----------------------------------------------------------------------------------
class _Worker:
    """An agent thread: the three agents on its timed recorder, and the turns it ran."""

    def __init__(self, recorder: BaseRecorder, model: OfflineModel, run_id: str, seed: int) -> None:
        self.timed = _TimedRecorder(recorder)
        # The agents take a BaseRecorder; the timed view has the part of its API they use.
        view = cast(BaseRecorder, self.timed)
        self.agents = {
            "researcher": Researcher(view, model),
            "critic": Critic(view, model),
            "correlator": Correlator(view, model),
        }
        self.view = view
        self.model = model
        self.run_id = run_id
        self.seed = seed
        self.failed = 0

    def run_turn(self, index: int) -> None:
        rng = random.Random(f"{self.seed}/{index}")
        question = (
            f"Does {rng.choice(_DRUGS)} lower {rng.choice(_OUTCOMES)} in {rng.choice(_GROUPS)}? "
            f"(simulated turn {index})"
        )
        session = f"simulate-{self.run_id}"
        claim = f"claim-{self.run_id}-{index}"
        with turn():
            for name in PLANS[index % len(PLANS)]:
                if name == "benchmark":
                    run_benchmark_case(
                        self.view, self.run_id, f"case-{index:06d}", question, model=self.model, session_id=session
                    )
                else:
                    self.agents[name].run(
                        question,
                        trigger_ref=f"simulate/{self.run_id}/turn-{index}",
                        session_id=session,
                        claim_id=claim if name != "correlator" else None,
                    )


def _run_turns(workers: Sequence[_Worker], turns: int, progress: _Progress | None) -> int:
    """Run ``turns`` turns over the workers' threads; returns the number of turns that failed."""
    next_turn = iter(range(turns))
    lock = threading.Lock()
    done = [0]

    def loop(worker: _Worker) -> None:
        while True:
            with lock:
                index = next(next_turn, None)
            if index is None:
                return
            try:
                worker.run_turn(index)
            except Exception:  # a bug in a turn must not stop the run; it is counted and logged
                worker.failed += 1
                logger.exception("simulated turn %d failed", index)
            with lock:
                done[0] += 1

    threads = [
        threading.Thread(target=loop, args=(worker,), name=f"simulate-agent-{n}", daemon=True)
        for n, worker in enumerate(workers)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        while thread.is_alive():
            thread.join(0.1)
            if progress is not None:
                progress.draw(f"{done[0]}/{turns} turns", done[0] / turns)
    return sum(worker.failed for worker in workers)


class _Progress:
    """One carriage-return line on stderr."""

    WIDTH = 30

    def __init__(self, stream: IO[str]) -> None:
        self.stream = stream
        self.started = time.monotonic()

    def draw(self, label: str, fraction: float) -> None:
        filled = int(self.WIDTH * min(max(fraction, 0.0), 1.0))
        bar = "#" * filled + "." * (self.WIDTH - filled)
        elapsed = time.monotonic() - self.started
        self.stream.write(f"\r[{bar}] {label:<32} {elapsed:6.1f} s")
        self.stream.flush()

    def end(self) -> None:
        self.stream.write("\n")
        self.stream.flush()


def _flush(recorder: ReasoningFlowRecorder, timeout: float, progress: _Progress | None) -> bool:
    """Flush in short slices so the bar can show the delivery; True when everything arrived."""
    deadline = time.monotonic() + timeout
    while True:
        remaining = deadline - time.monotonic()
        if recorder.flush(max(0.0, min(0.1, remaining))):
            return True
        if progress is not None:
            stats = recorder.stats()
            recorded = max(stats.get("recorded_steps", 0), 1)
            progress.draw(f"delivering {stats.get('sent', 0)}/{recorded} steps", stats.get("sent", 0) / recorded)
        if remaining <= 0:
            return False


# --- the figures ---------------------------------------------------------------------------------
def percentile(samples: Sequence[int], share: float) -> int:
    """Nearest-rank percentile of sorted ``samples`` (0 when there are none)."""
    if not samples:
        return 0
    rank = max(1, math.ceil(share / 100 * len(samples)))
    return samples[min(rank, len(samples)) - 1]


def _rate(count: int, seconds: float) -> float:
    return count / seconds if seconds > 0 else 0.0


def _reasons(delivered: bool, stats: dict[str, int], failed: int, timeout: float, spool: Path, url: str) -> list[str]:
    """Why the run is not a clean one (empty: everything was delivered)."""
    reasons = []
    if not delivered:
        reasons.append(
            f"not everything reached {url} within --flush-timeout {timeout:g} s: "
            f"{stats.get('spool_files', 0)} batch(es) wait in the spool {spool}"
            + (" (the server was unreachable or refused to take them for now)" if stats.get("retried") else "")
        )
    if stats.get("rejected"):
        reasons.append(f"the server rejected {stats['rejected']} steps (the log says why)")
    if stats.get("dropped"):
        reasons.append(f"{stats['dropped']} steps were dropped (the recorder's queue or spool was full)")
    if failed:
        reasons.append(f"{failed} turns failed (see the log)")
    return reasons


def run(args: argparse.Namespace) -> int:
    url = args.url or os.environ.get("REASONING_FLOW_URL")
    token = args.token or os.environ.get("REASONING_FLOW_TOKEN")
    if not url or not token:
        missing = "--url (or REASONING_FLOW_URL)" if not url else "--token (or REASONING_FLOW_TOKEN)"
        print(f"reasoning-flow-sdk simulate: no server: give {missing}", file=sys.stderr)
        return 2
    spool = args.spool_dir or simulate_spool_dir()
    show = sys.stderr.isatty() if args.progress is None else args.progress
    progress = _Progress(sys.stderr) if show else None
    run_id = uuid.uuid4().hex[:12]
    model = OfflineModel(seed=args.seed)

    recorder = ReasoningFlowRecorder(base_url=url, token=token, spool_dir=spool, enabled=True)
    workers = [_Worker(recorder, model, run_id, args.seed) for _ in range(args.concurrency)]
    started = time.perf_counter()
    failed = _run_turns(workers, args.turns, progress)
    recorded_s = time.perf_counter() - started
    delivered = _flush(recorder, args.flush_timeout, progress)
    total_s = time.perf_counter() - started
    recorder.close(timeout=0.5)  # what did not arrive goes to the spool
    if progress is not None:
        progress.end()

    stats = recorder.stats()
    samples = sorted(sample for worker in workers for sample in worker.timed.samples)
    flows, steps = stats.get("recorded_flows", 0), stats.get("recorded_steps", 0)
    reasons = _reasons(delivered, stats, failed, args.flush_timeout, spool, url)
    clean = not reasons
    figures: dict[str, Any] = {
        "run_id": run_id,
        "session_id": f"simulate-{run_id}",
        "turns": args.turns,
        "failed_turns": failed,
        "flows": flows,
        "steps": steps,
        "recorded_s": round(recorded_s, 3),
        "total_s": round(total_s, 3),
        "recorded_flows_per_s": round(_rate(flows, recorded_s), 1),
        "recorded_steps_per_s": round(_rate(steps, recorded_s), 1),
        "delivered_flows_per_s": round(_rate(stats.get("sent_flows", 0), total_s), 1),
        "delivered_steps_per_s": round(_rate(stats.get("sent", 0), total_s), 1),
        "sent_flows": stats.get("sent_flows", 0),
        **{name: stats.get(name, 0) for name in STATS_SHOWN},
        "spool_files": stats.get("spool_files", 0),
        "sdk_calls": len(samples),
        "sdk_call_p50_us": round(percentile(samples, 50) / 1000, 1),
        "sdk_call_p99_us": round(percentile(samples, 99) / 1000, 1),
        "delivered": int(clean),
    }
    _print_summary(figures, reasons, url)
    return 0 if clean else 1


def _print_summary(figures: dict[str, Any], reasons: list[str], url: str) -> None:
    f = figures
    lines = [
        f"simulate {f['run_id']}: {f['turns']} turns",
        f"  recorded:  {f['flows']} flows, {f['steps']} steps in {f['recorded_s']:.2f} s: "
        f"{f['recorded_flows_per_s']:,.0f} flows/s, {f['recorded_steps_per_s']:,.0f} steps/s "
        "(the agents' turns, their model included)",
        f"  delivered: {f['sent_flows']} flows, {f['sent']} steps in {f['total_s']:.2f} s: "
        f"{f['delivered_flows_per_s']:,.0f} flows/s, {f['delivered_steps_per_s']:,.0f} steps/s "
        f"(stored by {url}, from the first turn to the end of the flush)",
        "  recorder:  " + " ".join(f"{name}={f[name]}" for name in STATS_SHOWN),
        f"  SDK calls: {f['sdk_calls']}, p50 {f['sdk_call_p50_us']} µs, p99 {f['sdk_call_p99_us']} µs "
        "(the time an agent spent inside one flow/step/llm_step/complete call)",
    ]
    if f["sent"] > f["steps"]:
        lines.append(f"  (delivered includes {f['sent'] - f['steps']} steps an earlier run left in the spool)")
    if reasons:
        lines += ["  result:    NOT everything was delivered:"] + [f"    - {reason}" for reason in reasons]
    else:
        lines.append("  result:    everything was delivered")
    lines += [f"{name}={value}" for name, value in figures.items()]
    print("\n".join(lines), flush=True)
