"""Fixtures shared by the self-improvement loop's route tests (reasoning.admin), one module per route.

What a dispatcher or an operator checks: status codes, bodies, the rows, the audit trail,
that a rejected request writes nothing, that free text is encrypted at rest and stays out
of the trail, and that concurrent pullers never share a row.
"""

from __future__ import annotations
