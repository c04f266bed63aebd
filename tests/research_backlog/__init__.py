"""The self-improvement loop's tests: its routes (reasoning.admin), one module per route, and the
Research Console (``console/``). Shared constants and readers are in ``support.py``.

What a dispatcher or an operator checks: status codes, bodies, the rows, the audit trail,
that a rejected request writes nothing, that free text is encrypted at rest and stays out
of the trail, and that concurrent pullers never share a row.
"""
