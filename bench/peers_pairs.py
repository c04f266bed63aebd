"""This project against a peer (MLflow or Phoenix) in alternating single runs of the peers' harness.

The peers' harness (``../shared/peers``, its README says how to install the peers' virtualenvs)
measures one system at a time: three runs and a kill -9 probe of one, then of the other. On a
shared VM whose speed moves by half within minutes, each system's median then comes from its own
minutes, and the ratio of two medians measured ten minutes apart moves with the machine. Here the
same harness runs one measured run of each system in turn, ``--pairs`` times (this project first in
odd pairs, the peer first in even ones), so each pair's two runs are minutes apart at most; then one
kill -9 probe each. It prints each pair as it ends, and at the end:

    peers_pairs=<n> peer=<peer> flows_per_request=<n> ours_median=<spans/s> peer_median=<spans/s>
    ratio_of_medians=<x> pair_ratio_median=<x> pair_ratio_min=<x> pair_ratio_max=<x>
    quiet_pairs=<n> quiet_pair_ratio_median=<x or na> ours_lost_after_kill=<n> peer_lost_after_kill=<n>

Every figure is the harness's own ``durable_spans_per_s`` (this project: OTLP to ``/v1/traces``).
A pair is quiet when neither of its runs had more than ``QUIET_SHARE`` of the machine taken
elsewhere (the harness's ``background_cpu_share``; its README calls a run above ~0.1 disturbed).

    .venv/bin/python bench/peers_pairs.py --pairs 8 --flows-per-request 10
    .venv/bin/python bench/peers_pairs.py --peer phoenix --pairs 3

The peers are not installed by this project (nothing of theirs goes into it): the script stops,
pointing at the peers' README, when the peer's virtualenv is missing.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PEERS = {"mlflow": "mlflow_ingest.py", "phoenix": "phoenix_ingest.py"}
# The most of the machine taken elsewhere in either run of a quiet pair.
QUIET_SHARE = 0.10


@dataclass(frozen=True)
class Run:
    """One measured run as the harness logged it."""

    durable_spans_per_s: float
    background_cpu_share: float


def measured_run(log: str) -> Run:
    """The first measured run's figures in a harness's output (its JSON line with ``"run"``)."""
    for line in log.splitlines():
        start = line.find("{")
        if start < 0 or '"run"' not in line:
            continue
        row = json.loads(line[start:])
        return Run(float(row["durable_spans_per_s"]), float(row.get("background_cpu_share") or 0.0))
    raise ValueError("the harness logged no measured run")


def lost_after_kill(log: str) -> int:
    """The kill -9 probe's count of acknowledged spans not found after the restart."""
    for line in log.splitlines():
        start = line.find("{")
        if start >= 0 and '"lost_after_kill"' in line:
            return int(json.loads(line[start:])["lost_after_kill"])
    raise ValueError("the harness logged no kill -9 probe")


def pair_ratio(pair: tuple[Run, Run]) -> float | None:
    """Our durable spans/s over the peer's in one pair (None when the peer made none durable)."""
    ours, peer = pair
    return ours.durable_spans_per_s / peer.durable_spans_per_s if peer.durable_spans_per_s else None


def is_quiet(pair: tuple[Run, Run]) -> bool:
    """Whether neither run of the pair had more than QUIET_SHARE of the machine taken elsewhere."""
    return max(run.background_cpu_share for run in pair) <= QUIET_SHARE


def summary(pairs: list[tuple[Run, Run]]) -> dict[str, float | int | None]:
    """The medians of each side, the ratio of the medians, the spread of the pairs' ratios, and the
    median ratio of the quiet pairs (None when no pair was quiet)."""
    ours = [pair[0].durable_spans_per_s for pair in pairs]
    peer = [pair[1].durable_spans_per_s for pair in pairs]
    ratios = [ratio for pair in pairs if (ratio := pair_ratio(pair)) is not None]
    if not ratios:
        raise ValueError("the peer made no span durable in any pair")
    quiet = [ratio for pair in pairs if is_quiet(pair) and (ratio := pair_ratio(pair)) is not None]
    return {
        "ours_median": round(statistics.median(ours), 1),
        "peer_median": round(statistics.median(peer), 1),
        "ratio_of_medians": round(statistics.median(ours) / (statistics.median(peer) or float("nan")), 2),
        "pair_ratio_median": round(statistics.median(ratios), 2),
        "pair_ratio_min": round(min(ratios), 2),
        "pair_ratio_max": round(max(ratios), 2),
        "quiet_pairs": len(quiet),
        "quiet_pair_ratio_median": round(statistics.median(quiet), 2) if quiet else None,
    }


def _harness(command: list[str], env: dict[str, str], peers_dir: Path) -> str:
    done = subprocess.run(command, cwd=peers_dir, env=env, capture_output=True, text=True, timeout=1800)
    output = done.stdout + done.stderr
    if done.returncode:
        sys.exit(f"{command[1]} failed (exit {done.returncode}):\n{output[-3000:]}")
    return output


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=6, help="measured runs of each system (default 6)")
    parser.add_argument("--flows-per-request", type=int, default=10)
    parser.add_argument("--peer", choices=sorted(PEERS), default="mlflow")
    parser.add_argument("--peers-dir", type=Path, default=ROOT.parent / "shared" / "peers")
    parser.add_argument(
        "--peer-python", type=Path, help="the peer's interpreter (default $PEERS_ROOT/<peer>-venv/bin/python)"
    )
    parser.add_argument("--no-kill", action="store_true", help="skip the two kill -9 probes")
    args = parser.parse_args()
    if args.pairs < 1:
        parser.error("--pairs must be at least 1")
    # Where the peers' README installs them (the harness's own PEERS_ROOT).
    peers_root = Path(os.environ.get("PEERS_ROOT", "/tmp/peers"))  # noqa: S108
    peer_python = args.peer_python or peers_root / f"{args.peer}-venv" / "bin" / "python"
    if not (args.peers_dir / PEERS[args.peer]).is_file():
        sys.exit(f"no peers' harness at {args.peers_dir} (--peers-dir)")
    if not peer_python.is_file():
        sys.exit(f"no {args.peer} interpreter at {peer_python}: install it as {args.peers_dir}/README.md says")

    common = ["--store", "postgres", "--keep-pg", "--flows-per-request", str(args.flows_per_request)]
    ours_command = [sys.executable, "rft_ingest.py", *common]
    peer_command = [str(peer_python), PEERS[args.peer], *common]
    env = dict(os.environ, RFT_BENCH_FORMAT="otlp", PROJECT=str(ROOT))

    def one(command: list[str]) -> Run:
        return measured_run(_harness([*command, "--runs", "1", "--no-kill"], env, args.peers_dir))

    pairs: list[tuple[Run, Run]] = []
    for index in range(1, args.pairs + 1):
        if index % 2:
            ours = one(ours_command)
            peer = one(peer_command)
        else:
            peer = one(peer_command)
            ours = one(ours_command)
        pairs.append((ours, peer))
        ratio = pair_ratio((ours, peer))
        print(
            f"{time.strftime('%H:%M:%S')} pair {index}/{args.pairs}: ours {ours.durable_spans_per_s:,.0f} spans/s"
            f" (machine busy elsewhere {ours.background_cpu_share:.0%}), {args.peer} {peer.durable_spans_per_s:,.0f}"
            f" ({peer.background_cpu_share:.0%}): " + ("no peer span durable" if ratio is None else f"{ratio:.2f}x"),
            flush=True,
        )
    figures = summary(pairs)
    line = f"peers_pairs={args.pairs} peer={args.peer} flows_per_request={args.flows_per_request} " + " ".join(
        f"{name}={'na' if value is None else value}" for name, value in figures.items()
    )
    if not args.no_kill:
        kill = ["--runs", "0"]
        line += f" ours_lost_after_kill={lost_after_kill(_harness([*ours_command, *kill], env, args.peers_dir))}"
        line += f" peer_lost_after_kill={lost_after_kill(_harness([*peer_command, *kill], env, args.peers_dir))}"
    print(line, flush=True)


if __name__ == "__main__":
    main()
