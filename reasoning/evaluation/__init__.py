"""Evaluation and fine-tuning tooling: PHI-safe exports, lint, golden signatures, replay.

The management commands (``reasoning_export``, ``reasoning_lint``,
``reasoning_signature_check``, ``reasoning_replay``) are thin: they parse flags, call these
modules and turn ``InputError`` into a usage error (exit 2) that names the file and line or
the flag. The contracts (row shapes, rules, exit codes) are in docs/evaluation.md.
"""

from __future__ import annotations

from pathlib import Path

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"

# Exit codes shared by every command.
EXIT_OK = 0
EXIT_FAILED = 1  # the check ran and found what it gates on (a critical finding, drift over the threshold)
EXIT_USAGE = 2  # bad flags or unreadable input: nothing was checked


class InputError(Exception):
    """Input the command cannot use; the message names the file and line, or the flag."""
