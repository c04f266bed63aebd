"""The OTLP write path's work in the web process, counted in CPU instructions (valgrind's callgrind).

Times and CPU seconds on a shared 2-vCPU VM move by a quarter to a half within minutes (the other
benchmarks' blocks in docs/performance.md show it), so a change of a few percent in the web
process's work cannot be seen in them. The number of instructions a piece of work executes does not
depend on the machine's speed: two runs of the same code give the same count within about 1 %.

1. Creates a throw-away database (``rft_bench_instructions``) and migrates it.
2. Runs this file's ``--child`` twice at once under ``valgrind --tool=callgrind`` (Debian's
   ``valgrind``; ``make bench`` installs it when missing), one with one set of requests and one
   with two. A set is ``--flows`` traces of the ingest benchmark's workload (``bench_ingest.py``:
   a root span and 5 step spans, 10 ``reasoning.*`` attributes each), encoded as OTLP protobuf
   requests of ``--flows-per-request`` traces; each child decodes every request and writes it as
   ``POST /v1/traces`` does, in process (``otlp.map_request``, then ``traces.record_spans``: the
   mapping, the validation, the flows', steps' and audit events' rows, the close), after a
   warm-up set, with the cyclic garbage collector off (its passes fall at different moments).
   Every set has its own traces (no replays); both children build three sets.
3. The difference of the two counts is one set's work, without the interpreter's start, Django's
   set-up and the workload's generation; divided by its spans it prints
   ``ingest_web_instructions_per_span=<n> flows_per_request=<n>`` against ``bench/baseline.txt``.
   PostgreSQL's work is not counted (another process); nor are the HTTP stack's fixed costs.

Run with ``make bench`` (both request shapes), or ``make bench-instructions``.
"""

from __future__ import annotations

import argparse
import gc
import os
import re
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from bench_common import ROOT, child_env, drop_database, manage, recreate_database, report, server_url

BENCH_DB = "rft_bench_instructions"
SEED = 4242


def _child(sets: int, flows: int, flows_per_request: int, first_seed: int) -> None:
    """Write ``sets`` sets of requests after a warm-up set (run under callgrind by the parent)."""
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    import django

    django.setup()
    from bench_ingest import encode, generate
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    from reasoning.recording import otlp, traces

    def requests(seed: int) -> list[ExportTraceServiceRequest]:
        decoded = []
        for _, body in encode(generate(flows, seed), flows_per_request):
            request = ExportTraceServiceRequest()
            request.ParseFromString(body)
            decoded.append(request)
        return decoded

    # Both children build three sets, whatever they write: building them is not in the difference.
    warm_up, *measured = [requests(first_seed + n) for n in range(3)]

    def write(batch: list[ExportTraceServiceRequest]) -> None:
        for request in batch:
            spans, problems = otlp.map_request(request)
            outcome = traces.record_spans(spans, actor="token:bench-instructions")
            if problems or outcome.rejected or outcome.parked:
                raise SystemExit(f"FAILED: a request was not written whole: {problems or outcome.rejected}")

    write(warm_up)
    gc.collect()
    gc.disable()
    for batch in measured[:sets]:
        write(batch)


def _instructions(env: dict[str, str], args: argparse.Namespace, sets: int, first_seed: int, out: Path) -> int:
    command = [
        "valgrind",
        "--tool=callgrind",
        f"--callgrind-out-file={out}",
        sys.executable,
        __file__,
        "--child",
        str(sets),
        "--first-seed",
        str(first_seed),
        "--flows",
        str(args.flows),
        "--flows-per-request",
        str(args.flows_per_request),
    ]
    # The same string hashes in every run: dict and set layouts, and so the work, repeat exactly.
    done = subprocess.run(command, env={**env, "PYTHONHASHSEED": "0"}, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"FAILED: the child under valgrind exited {done.returncode}:\n{done.stderr[-3000:]}")
    found = re.search(r"Collected : (\d+)", done.stderr)
    if found is None:
        raise SystemExit(f"FAILED: no instruction count in valgrind's output:\n{done.stderr[-3000:]}")
    return int(found.group(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--flows", type=int, default=200, help="traces in a set (default 200: 1,200 spans)")
    parser.add_argument("--flows-per-request", type=int, default=10, help="traces per OTLP request (default 10)")
    parser.add_argument("--child", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--first-seed", type=int, default=SEED, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(args.child, args.flows, args.flows_per_request, args.first_seed)
        return
    if shutil.which("valgrind") is None:
        raise SystemExit("FAILED: valgrind is not installed (make bench installs Debian's valgrind)")

    url = server_url()
    env = child_env(url, BENCH_DB)
    print(f"[1/2] creating database {BENCH_DB} and migrating", flush=True)
    recreate_database(url, BENCH_DB)
    manage(env, "migrate", "--no-input")
    try:
        print(
            f"[2/2] counting instructions: one set and two sets of {args.flows} traces, "
            f"{args.flows_per_request} a request, under callgrind (about a minute)",
            flush=True,
        )
        with tempfile.TemporaryDirectory() as scratch, ThreadPoolExecutor(2) as pool:
            # Other seeds for each child: no trace is written twice, so none is a replay.
            one = pool.submit(_instructions, env, args, 1, SEED, Path(scratch, "one.out"))
            two = pool.submit(_instructions, env, args, 2, SEED + 10, Path(scratch, "two.out"))
            difference = two.result() - one.result()
        spans = args.flows * 6
        print(f"  one set: {one.result():,} instructions, two sets: {two.result():,}", flush=True)
        report(
            f"ingest_web_instructions_per_span={round(difference / spans)} flows_per_request={args.flows_per_request}"
        )
    finally:
        drop_database(url, BENCH_DB)


if __name__ == "__main__":
    main()
