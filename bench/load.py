"""Mixed load with latency bounds and flat memory (``make load``).

1. Creates a throw-away database (``rft_load``) on the project's Postgres server, migrates
   it, schedules the jobs and loads the demo data (its operator login, its flows); then
   seeds ``--patients`` consenting patients, each with a login, a patient-bound
   ``reasoning.read`` token and ``--flows-per-patient`` completed, patient-safe flows (so
   their narratives render), and one ``reasoning.write`` token for the agents.
2. Starts the stack as ``make run`` does (``scripts/run.py``: gunicorn with
   ``config.gunicorn``, the job worker ``qcluster``, the audit chainer) on that database,
   on a free loopback port.
3. Runs ``bench/load_locustfile.py`` with locust (headless, loopback, ``--seconds``):
   agents (single-step routes and bulk ingest: open, 3 steps, close, then 2 whole flows),
   operators (dashboard, flow list, a flow's DAG page, logged in) and patients (the
   narrative API with their token and the narrative page with their session), each user
   at a fixed pace. The narrative limit (30 reads per 5 minutes per caller) stays in force:
   each patient reads once per ``LOAD_PATIENT_PACING`` seconds (default 15), alternating
   token and session, i.e. 20 reads per 5 minutes per patient and 10 per caller, so the
   run measures latency, not 429s. A per-token write limit (``API_WRITE_RATE_LIMIT``) is
   turned off in the server's environment.
4. Meanwhile samples the PSS (``/proc/<pid>/smaps_rollup``) of every process of the stack
   (the supervisor, gunicorn's master and workers, the qcluster processes, the chainer;
   not Postgres, whose PSS grows with the shared buffers it touches) every few seconds.
5. Stops the stack, verifies the audit chain, drops the database and reports per route
   the request count, errors (any answer other than 2xx/3xx, or none) and p50/p95/p99
   (nearest rank, after ``--warmup`` seconds; errors are counted over the whole run).

Fails (exit 1) when any request errs, when a write route's p99 exceeds
``--write-p99-ms`` (default 500 ms), or when a process's memory is not flat: the median
PSS of the last third of the samples after warm-up may exceed the first third's by at most
``--mem-margin-pct`` (default 10 %) or ``--mem-margin-mib`` (default 8 MiB), whichever
is larger. A process that is not there at both ends (a recycled worker) is listed, not
judged. Prints one ``key=value`` line per figure at the end.

Needs locust (``make load`` installs it into a throw-away virtualenv, ``BENCH_TOOLS``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench_common import (
    ROOT,
    child_env,
    drop_database,
    free_port,
    manage,
    percentile,
    recreate_database,
    server_url,
    wait_until_up,
)

LOAD_DB = "rft_load"
ACTOR = "system:load"
PATIENT_PASSWORD = "load-patient-2026"  # noqa: S105  (logins of a throw-away database)
WRITE_ROUTES = (
    "POST /api/reasoning/flows",
    "POST /api/reasoning/flows/{id}/steps",
    "PATCH /api/reasoning/flows/{id}",
    "POST /api/reasoning/ingest",
)
SAFE_STEPS = (
    ("retrieval", "Retrieved recent readings and current guidelines"),
    ("llm_prompt", "Compared the readings with the guideline targets"),
    ("verdict", "Concluded that a follow-up visit is the right next step"),
)


# --- The seed (runs in a child process, inside Django) ------------------------------------


def seed(patients: int, flows_per_patient: int) -> dict[str, Any]:
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    import django

    django.setup()
    from patients.services import create_patient
    from reasoning.management.commands.load_demo import OPERATOR
    from reasoning.models import ReasoningFlow
    from reasoning.recording.services import add_steps, close_flow, start_flow
    from reasoning.tokens import create_api_token

    _, write_token = create_api_token(name="load-agents", scopes=["reasoning.write"], actor=ACTOR)
    seeded = []
    for i in range(patients):
        username = f"load-patient-{i}"
        patient = create_patient(username=username, password=PATIENT_PASSWORD, consent=True, actor=ACTOR)
        _, token = create_api_token(
            name=f"load-patient-{i}", scopes=["reasoning.read"], actor=ACTOR, patient_id=patient.pk
        )
        flow_ids = []
        for j in range(flows_per_patient):
            flow, _ = start_flow(
                {
                    "trigger_type": "user_question",
                    "trigger_ref": f"load/seed/{i}/{j}",
                    "trigger_summary": "Asked whether a change in blood pressure treatment is needed",
                    "agent": "researcher",
                    "patient_id": patient.pk,
                },
                actor=ACTOR,
            )
            steps = [
                {"kind": kind, "agent": "researcher", "summary_text": text, "confidence": 0.9, "latency_ms": 100}
                for kind, text in SAFE_STEPS
            ]
            add_steps(flow.pk, steps, actor=ACTOR)
            close_flow(
                flow.pk,
                state="completed",
                outcome_type="recommendation_delivered",
                outcome_summary="Recommended a follow-up visit with the care team",
                actor=ACTOR,
            )
            flow_ids.append(str(flow.pk))
        seeded.append({"username": username, "password": PATIENT_PASSWORD, "token": token, "flow_ids": flow_ids})
    # The operators read the DAG pages of the demo's flows and of the seeded ones.
    page_flow_ids = [str(pk) for pk in ReasoningFlow.objects.order_by("created_at").values_list("pk", flat=True)[:200]]
    return {
        "write_token": write_token,
        "operator": {"username": OPERATOR[0], "password": OPERATOR[1]},
        "patients": seeded,
        "page_flow_ids": page_flow_ids,
    }


# --- Memory -------------------------------------------------------------------------------


def pss_kib(pid: int) -> int | None:
    """The process's proportional set size in KiB, or None once it is gone."""
    try:
        text = Path(f"/proc/{pid}/smaps_rollup").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("Pss:"):
            return int(line.split()[1])
    return None


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU time the process has used so far, or None once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime


def stack_processes(root_pid: int) -> dict[int, str]:
    """Every process of the stack under ``scripts/run.py`` (pid ``root_pid``), by role."""
    import psutil

    try:
        root = psutil.Process(root_pid)
        children = root.children(recursive=True)
    except psutil.Error:
        return {}
    found = {root_pid: "supervisor"}
    for proc in children:
        try:
            cmdline = " ".join(proc.cmdline())
            parent = proc.ppid()
        except psutil.Error:
            continue
        top = parent == root_pid
        if "gunicorn" in cmdline:
            role = "gunicorn master" if top else "gunicorn worker"
        elif "qcluster" in cmdline:
            role = "qcluster" if top else "qcluster child"
        elif "audit_chainer" in cmdline:
            role = "chainer"
        else:
            role = "other"
        found[proc.pid] = role
    return found


class MemorySampler(threading.Thread):
    def __init__(self, root_pid: int, interval: float) -> None:
        super().__init__(daemon=True)
        self.root_pid = root_pid
        self.interval = interval
        self.stopping = threading.Event()
        self.series: dict[int, list[tuple[float, int]]] = {}
        self.roles: dict[int, str] = {}
        self.cpu: dict[int, tuple[float, float]] = {}  # pid: (first, last) CPU seconds seen
        self.load: list[tuple[float, float]] = []  # (time, the host's 1-minute load average)

    def run(self) -> None:
        while not self.stopping.is_set():
            now = time.time()
            self.load.append((now, os.getloadavg()[0]))
            for pid, role in stack_processes(self.root_pid).items():
                value = pss_kib(pid)
                if value is not None:
                    self.roles[pid] = role
                    self.series.setdefault(pid, []).append((now, value))
                used = cpu_seconds(pid)
                if used is not None:
                    self.cpu[pid] = (self.cpu.get(pid, (used, used))[0], used)
            self.stopping.wait(self.interval)

    def stack_cpu_seconds(self) -> float:
        """CPU the stack used while sampled (processes that exited count until their last sample)."""
        return sum(last - first for first, last in self.cpu.values())


@dataclass(frozen=True)
class Flatness:
    first_kib: float
    last_kib: float
    allowed_kib: float

    @property
    def growth_kib(self) -> float:
        return self.last_kib - self.first_kib

    @property
    def flat(self) -> bool:
        return self.growth_kib <= self.allowed_kib


def flatness(
    samples: Sequence[tuple[float, int]], since: float, margin_pct: float, margin_kib: float
) -> Flatness | None:
    """The median of the last third of the samples taken at or after ``since`` against the
    first third's; None with fewer than 3 such samples."""
    values = [value for at, value in samples if at >= since]
    third = len(values) // 3
    if third == 0:
        return None
    first = statistics.median(values[:third])
    last = statistics.median(values[-third:])
    return Flatness(first, last, max(first * margin_pct / 100, margin_kib))


# --- The report ---------------------------------------------------------------------------


@dataclass(frozen=True)
class RouteFigures:
    route: str
    requests: int
    errors: int
    p50_ms: float
    p95_ms: float
    p99_ms: float
    statuses: dict[int, int]


def is_error(status: int) -> bool:
    return not 200 <= status < 400


def route_figures(records: Iterable[Sequence[Any]], since: float) -> list[RouteFigures]:
    """Per route: all requests and errors; latency percentiles of those started at or after ``since``."""
    by_route: dict[str, list[Sequence[Any]]] = {}
    for record in records:
        by_route.setdefault(str(record[0]), []).append(record)
    figures = []
    for route, rows in sorted(by_route.items()):
        statuses: dict[int, int] = {}
        for row in rows:
            statuses[int(row[3])] = statuses.get(int(row[3]), 0) + 1
        latencies = [float(row[2]) for row in rows if row[1] >= since] or [float(row[2]) for row in rows]
        figures.append(
            RouteFigures(
                route=route,
                requests=len(rows),
                errors=sum(count for status, count in statuses.items() if is_error(status)),
                p50_ms=percentile(latencies, 50),
                p95_ms=percentile(latencies, 95),
                p99_ms=percentile(latencies, 99),
                statuses=statuses,
            )
        )
    return figures


def key(route: str) -> str:
    """A ``key=value`` name for a route: ``POST /api/reasoning/flows/{id}/steps`` -> ``post_flows_id_steps``."""
    words = route.replace("/api/reasoning", "").replace("/dashboard/admin/reasoning", "admin").lower()
    slug = "".join(ch if ch.isalnum() else "_" for ch in words)
    return "_".join(part for part in slug.split("_") if part) or "root"


# --- The run ------------------------------------------------------------------------------


def locust_binary() -> str:
    found = os.environ.get("LOCUST") or shutil.which("locust")
    if not found:
        sys.exit("locust is not installed: `make load` installs it into $(BENCH_TOOLS) (/tmp/rft-bench-tools)")
    return found


def run_locust(locust: str, port: int, seconds: int, env: dict[str, str], users: int, spawn_rate: float) -> None:
    command = [
        locust,
        "-f",
        str(ROOT / "bench" / "load_locustfile.py"),
        "--headless",
        "--host",
        f"http://127.0.0.1:{port}",
        "--users",
        str(users),
        "--spawn-rate",
        f"{spawn_rate:.2f}",
        "--run-time",
        f"{seconds}s",
        "--stop-timeout",
        "10",
        "--only-summary",
        "--loglevel",
        "WARNING",
    ]
    # Locust exits 1 when a request failed: the report below says which, and decides.
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=seconds + 120)
    if not Path(env["LOAD_RESULTS_FILE"]).exists():
        sys.exit(f"locust wrote no results (exit {result.returncode}):\n{result.stdout}\n{result.stderr}")


def stop_stack(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=40)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=int, default=int(os.environ.get("LOAD_SECONDS", "600")))
    parser.add_argument("--warmup", type=int, default=30, help="seconds left out of latency and memory (default 30)")
    parser.add_argument("--workers", type=int, default=3, help="gunicorn workers (WEB_CONCURRENCY; default 3)")
    parser.add_argument("--agents", type=int, default=int(os.environ.get("LOAD_AGENTS", "4")))
    parser.add_argument("--operators", type=int, default=int(os.environ.get("LOAD_OPERATORS", "2")))
    parser.add_argument("--patients", type=int, default=int(os.environ.get("LOAD_PATIENTS", "16")))
    parser.add_argument("--flows-per-patient", type=int, default=3)
    parser.add_argument("--write-p99-ms", type=float, default=float(os.environ.get("LOAD_WRITE_P99_MS", "500")))
    parser.add_argument("--mem-margin-pct", type=float, default=10.0)
    parser.add_argument("--mem-margin-mib", type=float, default=8.0)
    parser.add_argument("--keep-db", action="store_true", help="leave the rft_load database for inspection")
    parser.add_argument("--seed", action="store_true", help=argparse.SUPPRESS)  # the child that seeds
    args = parser.parse_args()

    if args.seed:
        print(json.dumps(seed(args.patients, args.flows_per_patient)))
        return 0
    if args.seconds < 3 * args.warmup:
        sys.exit(f"--seconds must be at least 3 x --warmup ({3 * args.warmup})")
    locust = locust_binary()
    url = server_url()
    env = child_env(url, LOAD_DB)
    env.update(
        DJANGO_SECURE="0",  # plain http on loopback: cookies without Secure
        API_WRITE_RATE_LIMIT="off",  # per-token write throttling would measure 429s, not latency
        WEB_CONCURRENCY=str(args.workers),
    )
    work = Path(tempfile.mkdtemp(prefix="rft-load-"))

    print(f"[1/5] creating database {LOAD_DB}, migrating, demo data, {args.patients} patients", flush=True)
    recreate_database(url, LOAD_DB)
    manage(env, "migrate", "--no-input")
    manage(env, "setup_schedules")
    manage(env, "load_demo")
    seeding = subprocess.run(
        [sys.executable, __file__, "--seed", "--patients", str(args.patients), "--flows-per-patient",
         str(args.flows_per_patient)],
        cwd=ROOT, env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    if seeding.returncode != 0:
        sys.exit(f"seeding failed:\n{seeding.stderr}")
    seed_file = work / "seed.json"
    seed_file.write_text(seeding.stdout.strip().splitlines()[-1])

    port = free_port()
    log_path = work / "run.log"
    print(f"[2/5] starting the stack (scripts/run.py: gunicorn x{args.workers}, qcluster, chainer) on :{port}")
    with open(log_path, "wb") as log:
        stack = subprocess.Popen(
            [sys.executable, "scripts/run.py", "--state-file", str(work / "run.json")],
            cwd=ROOT,
            env=dict(env, PORT=str(port)),
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    interval = max(2.0, min(10.0, args.seconds / 30))
    sampler = MemorySampler(stack.pid, interval)
    results_file = work / "requests.json"
    started = time.time()
    try:
        wait_until_up(port, timeout=60)
        time.sleep(3)  # the job worker and the chainer settle
        sampler.start()
        users = args.agents + args.operators + args.patients
        print(
            f"[3/5] locust for {args.seconds}s: {args.agents} agents, {args.operators} operators, "
            f"{args.patients} patients; PSS every {interval:.0f}s",
            flush=True,
        )
        locust_env = dict(
            os.environ,
            LOAD_SEED_FILE=str(seed_file),
            LOAD_RESULTS_FILE=str(results_file),
            LOAD_AGENTS=str(args.agents),
            LOAD_OPERATORS=str(args.operators),
        )
        started = time.time()
        before = os.times()
        # Users (and their logins, a password hash each) arrive over the first half of the warm-up.
        run_locust(locust, port, args.seconds, locust_env, users, spawn_rate=max(1.0, users / (args.warmup / 2)))
        after = os.times()
        locust_cpu = after.children_user + after.children_system - before.children_user - before.children_system
    finally:
        sampler.stopping.set()
        restarts = sum(1 for line in log_path.read_text(errors="replace").splitlines() if "restarting in" in line)
        print("[4/5] stopping the stack", flush=True)
        stop_stack(stack)
    print("[5/5] verifying the audit chain", flush=True)
    print(f"  {manage(env, 'audit_verify', '--chain-first', '--no-progress').strip().splitlines()[-1]}", flush=True)
    if not args.keep_db:
        drop_database(url, LOAD_DB)

    since = started + args.warmup
    status = report(
        json.loads(results_file.read_text()),
        sampler,
        since,
        restarts,
        args,
        elapsed=args.seconds,
        log=log_path,
        locust_cpu=locust_cpu,
    )
    if status == 0 and not args.keep_db:
        shutil.rmtree(work, ignore_errors=True)
    else:
        print(f"the stack's log, the seed and every request's timing: {work}")
    return status


def report(
    records: list[list[Any]],
    sampler: MemorySampler,
    since: float,
    restarts: int,
    args: argparse.Namespace,
    *,
    elapsed: int,
    log: Path,
    locust_cpu: float,
) -> int:
    failures: list[str] = []
    figures = route_figures(records, since)
    print(f"\n{'route':<48} {'requests':>8} {'req/s':>6} {'errors':>6} {'p50 ms':>8} {'p95 ms':>8} {'p99 ms':>8}")
    for row in figures:
        print(
            f"{row.route:<48} {row.requests:>8} {row.requests / elapsed:>6.1f} {row.errors:>6} "
            f"{row.p50_ms:>8.1f} {row.p95_ms:>8.1f} {row.p99_ms:>8.1f}"
        )
        if row.errors:
            bad = {status: count for status, count in row.statuses.items() if is_error(status)}
            failures.append(f"{row.route}: {row.errors} errors {bad}")
        if row.route in WRITE_ROUTES and row.p99_ms > args.write_p99_ms:
            failures.append(f"{row.route}: p99 {row.p99_ms:.0f} ms over the {args.write_p99_ms:.0f} ms bound")
    missing = [route for route in WRITE_ROUTES if route not in {row.route for row in figures}]
    failures += [f"{route}: no request" for route in missing]

    print(f"\n{'process':<26} {'samples':>7} {'first MiB':>9} {'last MiB':>9} {'growth MiB':>10} {'allowed':>8}")
    end = max((s[-1][0] for s in sampler.series.values()), default=since)
    judged = 0
    worst_growth = 0.0
    for pid, samples in sorted(sampler.series.items(), key=lambda item: (sampler.roles[item[0]], item[0])):
        name = f"{sampler.roles[pid]} {pid}"
        spans = samples[0][0] <= since and samples[-1][0] >= end - sampler.interval * 1.5
        flat = flatness(samples, since, args.mem_margin_pct, args.mem_margin_mib * 1024) if spans else None
        if flat is None:
            print(f"{name:<26} {len(samples):>7} (not there for the whole run: not judged)")
            continue
        judged += 1
        worst_growth = max(worst_growth, flat.growth_kib / 1024)
        print(
            f"{name:<26} {len(samples):>7} {flat.first_kib / 1024:>9.1f} {flat.last_kib / 1024:>9.1f} "
            f"{flat.growth_kib / 1024:>10.1f} {flat.allowed_kib / 1024:>8.1f}"
        )
        if not flat.flat:
            growth, allowed = flat.growth_kib / 1024, flat.allowed_kib / 1024
            failures.append(f"{name}: PSS grew {growth:.1f} MiB (allowed {allowed:.1f})")
    if judged == 0:
        failures.append("no process was sampled for the whole run")
    if restarts:
        failures.append(f"the supervisor restarted a process {restarts} time(s) (see {log})")

    total = sum(row.requests for row in figures)
    errors = sum(row.errors for row in figures)
    write_p99 = max((row.p99_ms for row in figures if row.route in WRITE_ROUTES), default=0.0)
    print()
    print(f"load_seconds={elapsed}")
    print(f"requests={total}")
    print(f"requests_per_s={total / elapsed:.1f}")
    print(f"errors={errors}")
    for row in figures:
        name = key(row.route)
        print(f"{name}_requests={row.requests}")
        print(f"{name}_errors={row.errors}")
        print(f"{name}_p50_ms={row.p50_ms:.1f}")
        print(f"{name}_p95_ms={row.p95_ms:.1f}")
        print(f"{name}_p99_ms={row.p99_ms:.1f}")
    loads = [value for at, value in sampler.load if at >= since]
    print(f"stack_cpu_cores={sampler.stack_cpu_seconds() / elapsed:.2f}")
    print(f"locust_cpu_cores={locust_cpu / elapsed:.2f}")
    print(f"host_load_avg_median={statistics.median(loads) if loads else 0:.1f}")
    print(f"write_p99_ms={write_p99:.1f}")
    print(f"write_p99_bound_ms={args.write_p99_ms:.0f}")
    print(f"processes_judged={judged}")
    print(f"max_pss_growth_mib={worst_growth:.1f}")
    print(f"process_restarts={restarts}")
    for failure in failures:
        print(f"FAIL {failure}")
    print("load: OK" if not failures else f"load: FAILED ({len(failures)})")
    return 1 if failures else 0


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
    sys.exit(130)
