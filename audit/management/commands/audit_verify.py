"""Verify the audit trail end to end: every link, every event, the chainer's queue, the
Merkle tree and every signed checkpoint. After retention dropped old events the walk starts
after them; ``--since-checkpoint`` starts after the latest signed checkpoint.

Exit status:
  0  intact and current: no break, no event has waited for the chainer longer than
     AUDIT_CHAIN_MAX_LAG_S, and no linked event has waited for a checkpoint longer than
     AUDIT_CHECKPOINT_MAX_AGE_S;
  1  broken: prints the first break (chain position and/or event sequence number, or the
     tree or checkpoint that contradicts the events);
  2  intact but behind: the chainer or the checkpoint signer is not running or cannot keep up.
"""

from __future__ import annotations

import sys
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser
from django.utils import timezone
from tqdm import tqdm

from audit.chain import chain_all
from audit.tree import tree_size
from audit.verify import VerifyResult, verify_chain

EXIT_BROKEN = 1
EXIT_BEHIND = 2


class Command(BaseCommand):
    help = (
        "Verify the audit hash chain, the events not chained yet and the chainer's queue. "
        "Exit 0: intact and current; 1: broken (the first break is printed); "
        "2: intact, but an event has waited for the chainer longer than AUDIT_CHAIN_MAX_LAG_S "
        "(the chainer is not running or is behind)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--chain-first",
            action="store_true",
            help="Link any committed events still waiting for the chainer before verifying.",
        )
        parser.add_argument(
            "--since-checkpoint",
            action="store_true",
            help="Verify only what follows the latest signed checkpoint (its tree edge must hash to its signed "
            "root): time proportional to the events added since. The full walk remains the complete check.",
        )
        parser.add_argument("--no-progress", action="store_true", help="Hide the progress bar.")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["chain_first"]:
            chain_all()
        total = tree_size()
        with tqdm(
            total=total,
            unit="link",
            desc="verifying",
            disable=options["no_progress"],
            file=sys.stderr,
        ) as bar:
            result = verify_chain(
                on_progress=bar.update,
                since_checkpoint=options["since_checkpoint"],
                on_start=lambda start: bar.reset(total=total - start),
            )
        if result.broken is not None:
            self.stderr.write(f"audit chain BROKEN at {result.broken.describe()}")
            self.stdout.write(f"checked {result.linked} links before the break")
            sys.exit(EXIT_BROKEN)
        age = result.oldest_pending_age_s
        tail = f"; {result.pending} events awaiting chaining, the oldest for {age:.1f} s" if age is not None else ""
        if result.start:
            # After retention (audit_dropped_partition) or with --since-checkpoint.
            verified = f"{result.linked - result.start} links verified after position {result.start}"
            self.stdout.write(f"audit chain intact: {verified} (signed checkpoints vouch for those before){tail}")
        else:
            self.stdout.write(f"audit chain intact: {result.linked} links verified{tail}")
        behind = self._report_checkpoints(result)
        limit = settings.AUDIT_CHAIN_MAX_LAG_S
        if age is not None and age > limit:
            self.stderr.write(
                f"audit chain BEHIND: an event has waited {age:.1f} s for the chainer "
                f"(AUDIT_CHAIN_MAX_LAG_S is {limit:g} s): the audit chainer is not running or is behind; "
                "start `manage.py audit_chainer` or the django-q2 worker (`manage.py qcluster`)"
            )
            sys.exit(EXIT_BEHIND)
        if behind:
            sys.exit(EXIT_BEHIND)

    def _report_checkpoints(self, result: VerifyResult) -> bool:
        """Print the tree and checkpoint line; True when signed checkpoints lag behind."""
        latest = result.latest_checkpoint
        now = timezone.now()
        if latest is None:
            self.stdout.write("merkle tree intact; no checkpoint signed yet")
            return False
        age = (now - latest.created_at).total_seconds()
        unsigned = result.linked - latest.tree_size
        self.stdout.write(
            f"merkle tree intact; {result.checkpoints} checkpoints verified, the latest (#{latest.id}) "
            f"signs {latest.tree_size} of {result.linked} links and is {age:.0f} s old"
        )
        if latest.first_unsigned_linked_at is None:
            return False
        waited = (now - latest.first_unsigned_linked_at).total_seconds()
        limit = settings.AUDIT_CHECKPOINT_MAX_AGE_S
        if waited <= limit:
            return False
        self.stderr.write(
            f"audit checkpoints BEHIND: {unsigned} linked events have waited up to {waited:.0f} s for a signed "
            f"checkpoint (AUDIT_CHECKPOINT_MAX_AGE_S is {limit:g} s): run `manage.py audit_checkpoint` or the "
            "django-q2 worker"
        )
        return True
