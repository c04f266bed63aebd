"""``reasoning-flow-sdk simulate`` against a real server: the figures it prints are what the server holds."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path

from reasoning_flow_sdk.agents import CANONICAL

from reasoning.models import ReasoningFlow, ReasoningStep
from tests.servers import Gunicorn, free_port

CONSOLE_SCRIPT = Path(sys.executable).with_name("reasoning-flow-sdk")
FIGURE = re.compile(r"^(?P<key>[a-z0-9_]+)=(?P<value>\S*)$", re.MULTILINE)


@dataclass(frozen=True)
class Run:
    code: int
    figures: dict[str, str]
    stdout: str
    stderr: str

    def number(self, key: str) -> float:
        return float(self.figures[key])


def simulate(*args: str) -> Run:
    """The console script in its own process, as a benchmark runs it."""
    env = {name: value for name, value in os.environ.items() if not name.startswith("REASONING_FLOW_")}
    done = subprocess.run(
        [str(CONSOLE_SCRIPT), "simulate", "--no-progress", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    figures = {match["key"]: match["value"] for match in FIGURE.finditer(done.stdout)}
    return Run(done.returncode, figures, done.stdout, done.stderr)


def test_forty_turns_reach_the_server_as_the_figures_say(sdk_server: Gunicorn, sdk_token: str, spool_dir: Path) -> None:
    run = simulate("--turns", "40", "--url", sdk_server.url, "--token", sdk_token, "--spool-dir", str(spool_dir))

    assert run.code == 0, run.stdout + run.stderr
    assert "everything was delivered" in run.stdout
    figures = run.figures
    assert (figures["turns"], figures["failed_turns"], figures["delivered"]) == ("40", "0", "1")
    assert figures["dropped"] == figures["rejected"] == "0"
    assert figures["sent"] == figures["steps"]
    assert figures["sent_flows"] == figures["flows"]
    for key in ("recorded_flows_per_s", "recorded_steps_per_s", "delivered_flows_per_s", "delivered_steps_per_s"):
        assert run.number(key) > 0
    assert 0 < run.number("sdk_call_p50_us") <= run.number("sdk_call_p99_us")
    assert int(figures["sdk_calls"]) >= int(figures["steps"])  # every step call timed, plus flows and closes

    flows = list(ReasoningFlow.objects.filter(session_id=figures["session_id"]))
    assert len(flows) == int(figures["flows"])
    assert {flow.flow_state for flow in flows} == {ReasoningFlow.State.COMPLETED}
    assert {flow.agent for flow in flows} == {"researcher", "critic", "correlator", "benchmark"}
    run_id = figures["run_id"]
    assert all(flow.trigger_ref.startswith(f"benchmark/{run_id}/") for flow in flows if flow.agent == "benchmark")

    # One trace per turn; a turn with two agents shows both under it.
    per_trace = Counter(flow.trace_id for flow in flows)
    assert len(per_trace) == 40
    assert set(per_trace.values()) == {1, 2}

    kinds: dict[tuple[str, str], list[str]] = defaultdict(list)
    for flow_id, agent, kind in (
        ReasoningStep.objects.filter(flow__session_id=figures["session_id"])
        .order_by("flow_id", "position")
        .values_list("flow_id", "flow__agent", "kind")
    ):
        kinds[(str(flow_id), agent)].append(kind)
    assert sum(len(sequence) for sequence in kinds.values()) == int(figures["steps"])
    assert len(kinds) == len(flows)
    for (_, agent), sequence in kinds.items():
        assert sequence == list(CANONICAL[agent][1])


def test_an_unreachable_server_leaves_the_flows_in_the_spool(spool_dir: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    options = ["--url", url, "--token", "any", "--spool-dir", str(spool_dir), "--flush-timeout", "1"]
    run = simulate("--turns", "12", *options)

    assert run.code == 1, run.stdout + run.stderr
    assert "Traceback" not in run.stderr
    assert "NOT everything was delivered" in run.stdout and str(spool_dir) in run.stdout
    assert run.figures["sent"] == "0"
    assert run.figures["spooled"] == run.figures["steps"] != "0"
    assert int(run.figures["spool_files"]) == len(list(spool_dir.glob("*.json"))) > 0


def test_a_mistyped_url_does_not_crash(spool_dir: Path) -> None:
    options = ["--url", "htp:/127.0.0.1", "--token", "any", "--spool-dir", str(spool_dir), "--flush-timeout", "0.5"]
    run = simulate("--turns", "3", *options)

    assert run.code == 1, run.stdout + run.stderr
    assert "Traceback" not in run.stderr
    assert run.figures["spooled"] == run.figures["steps"]


def test_a_token_the_server_refuses_is_reported_as_rejected(sdk_server: Gunicorn, spool_dir: Path) -> None:
    run = simulate("--turns", "6", "--url", sdk_server.url, "--token", "rft_not-a-token", "--spool-dir", str(spool_dir))

    assert run.code == 1, run.stdout + run.stderr
    assert run.figures["rejected"] == run.figures["steps"]
    assert "the server rejected" in run.stdout
    assert not ReasoningFlow.objects.filter(session_id=run.figures["session_id"]).exists()


def test_no_server_configured_is_exit_2() -> None:
    run = simulate("--turns", "1")

    assert run.code == 2
    assert "--url" in run.stderr
