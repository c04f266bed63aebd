"""Print the pathway library's statistics from a running server (operators' CLI).

Calls ``GET /admin/v1/reasoning/pathways/stats`` with the token in
``MEMORY_STORE_ADMIN_TOKEN`` (a ``reasoning.admin`` token). ``--json`` prints the raw
response for jq, e.g. ``... --json | jq .by_model``.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser


class Command(BaseCommand):
    help = "Show pathway library totals, embedding models, maturity per trigger type and top hits."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--json", action="store_true", help="Print the stats JSON (for jq).")
        parser.add_argument("--base-url", default="http://localhost:8000", help="Server base URL.")

    def handle(self, *args: Any, **options: Any) -> None:
        token = settings.MEMORY_STORE_ADMIN_TOKEN
        if not token:
            raise CommandError("MEMORY_STORE_ADMIN_TOKEN is not set (a token with the reasoning.admin scope)")
        url = options["base_url"].rstrip("/") + "/admin/v1/reasoning/pathways/stats"
        try:
            response = httpx.get(url, headers={"Authorization": f"Bearer {token}"}, timeout=10.0)
        except httpx.HTTPError as exc:
            raise CommandError(f"cannot reach {url}: {type(exc).__name__}") from exc
        if response.status_code != 200:
            raise CommandError(f"{url} answered {response.status_code}: {response.text[:200]}")
        stats = response.json()
        if options["json"]:
            self.stdout.write(json.dumps(stats, indent=2, sort_keys=True))
            return
        self.stdout.write(self.render(stats))

    @staticmethod
    def render(stats: dict[str, Any]) -> str:
        lines = [
            f"pathways: {stats['total']} total, {stats['active']} active, {stats['embedded']} embedded, "
            f"{stats['demoted']['total']} demoted",
            "",
            "embedding models:",
        ]
        lines += [f"  {model:<28} {count:>8}" for model, count in sorted(stats["by_model"].items())] or ["  (none)"]
        lines += ["", f"  {'trigger type':<28} {'active':>8}  maturity"]
        for kind, maturity in sorted(stats["maturity_by_trigger_type"].items()):
            lines.append(f"  {kind:<28} {stats['by_trigger_type'].get(kind, 0):>8}  {maturity}")
        lines += ["", "top hits:"]
        lines += [f"  {hit['hit_count']:>6}  {hit['trigger_type']:<28} {hit['id']}" for hit in stats["top_hits"]] or [
            "  (none)"
        ]
        if stats["demoted"]["by_reason"]:
            lines += ["", "demoted by reason:"]
            lines += [f"  {reason:<28} {n:>8}" for reason, n in sorted(stats["demoted"]["by_reason"].items())]
        return "\n".join(lines)
