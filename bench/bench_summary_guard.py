"""The summary guard in process (issue 42): microseconds per text for safe and unsafe summaries.

No server and no database: Django is set up only because the guard's module imports the
project's serializer helpers. The corpora are the demo's summaries (every topic's trigger, verdict
and outcome, every step of every plan with each topic's focus) and the guard tests' safe and
unsafe summaries, lookalikes and case variants; and the summaries bench_ingest.py writes (random
words of its sentence, 150-280 characters: longer than the demo's, and each holds many of the
rules' literals inside its words). Each corpus is checked ``--loops`` times in a row per
repetition; the figure is the median over ``--repeat`` repetitions of the mean time per text,
``guard_<corpus>_us_per_text``, all on one line compared with bench/baseline.txt (``report``).
These time the rules themselves (``summary_guard._check``): ``check_summary`` keeps the verdicts of
texts it has seen (by a keyed digest), and a corpus checked in a loop would time that instead;
``guard_kept_us_per_text`` is that path, a text checked again (the ingest corpus: digests of its
longer texts).
``--profile [CORPUS]`` prints a cProfile of one corpus (the safe one by default) instead.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import random
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def demo_summaries() -> list[str]:
    from reasoning.management import demo_flows

    texts: list[str] = [demo_flows.UNSAFE_SUMMARY, demo_flows.UNSAFE_VALUE_SUMMARY]
    for agent in demo_flows.AGENTS.values():
        for topic in agent.topics:
            texts += [topic.trigger, topic.verdict, topic.outcome]
            texts += [step.summary.format(focus=topic.focus) for step in agent.plan]
    return list(dict.fromkeys(texts))


def test_summaries() -> tuple[list[str], list[str]]:
    from tests.reasoning import test_summary_guard as cases

    unsafe = [text for text, _ in cases.UNSAFE + cases.LOOKALIKES + cases.CASE_VARIANTS]
    return list(cases.SAFE), unsafe


def ingest_summaries(count: int = 500) -> list[str]:
    """Summaries as bench_ingest.py writes them on every step (its ``_text``, from its seed)."""
    from bench_ingest import SEED, _text

    rng = random.Random(SEED)
    return [_text(rng, 150, 280) for _ in range(count)]


def corpora() -> dict[str, list[str]]:
    from reasoning.summary_guard import check_summary

    demo = demo_summaries()
    safe_tests, unsafe_tests = test_summaries()
    safe = [text for text in dict.fromkeys(demo + safe_tests) if check_summary(text).ok]
    unsafe = [text for text in dict.fromkeys(demo + unsafe_tests) if not check_summary(text).ok]
    return {
        "safe": safe,
        "safe_ascii": [text for text in safe if text.isascii()],
        "unsafe": unsafe,
        "ingest": ingest_summaries(),
    }


def time_per_text(check: Callable[[str], object], texts: Sequence[str], loops: int) -> float:
    """Mean microseconds per text over ``loops`` passes of the corpus."""
    start = time.perf_counter()
    for _ in range(loops):
        for text in texts:
            check(text)
    return (time.perf_counter() - start) / (loops * len(texts)) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=7, help="repetitions; the median is printed")
    parser.add_argument("--loops", type=int, default=200, help="passes over the corpus per repetition")
    parser.add_argument(
        "--profile", nargs="?", const="safe", metavar="CORPUS", help="print a cProfile of one corpus (safe)"
    )
    args = parser.parse_args()

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    import django

    django.setup()
    from bench_common import report

    from reasoning.summary_guard import _check, check_summary

    texts = corpora()
    for name, corpus in texts.items():
        print(f"corpus.{name}.texts={len(corpus)}")
    if args.profile:
        profiler = cProfile.Profile()
        profiler.runcall(time_per_text, _check, texts[args.profile], args.loops)
        pstats.Stats(profiler).sort_stats("tottime").print_stats(25)
        return
    figures = []
    for name, corpus in texts.items():
        time_per_text(_check, corpus, 5)  # warm the caches
        samples = [time_per_text(_check, corpus, args.loops) for _ in range(args.repeat)]
        figures.append(f"guard_{name}_us_per_text={statistics.median(samples):.1f}")
    report(" ".join(figures))
    time_per_text(check_summary, texts["ingest"], 1)  # every verdict kept
    kept = [time_per_text(check_summary, texts["ingest"], args.loops) for _ in range(args.repeat)]
    report(f"guard_kept_us_per_text={statistics.median(kept):.2f}")


if __name__ == "__main__":
    main()
