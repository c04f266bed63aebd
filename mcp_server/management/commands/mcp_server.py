"""Serve the MCP tools and resources over stdio, for a local agent (docs/mcp.md)."""

from __future__ import annotations

import os
from typing import Any

import anyio
from asgiref.sync import sync_to_async
from django.core.management.base import BaseCommand, CommandError
from django.db import connections
from mcp.server.stdio import stdio_server
from rest_framework import exceptions

from mcp_server.resources import authenticate
from mcp_server.server import build_server

TOKEN_VARIABLE = "RFT_MCP_TOKEN"  # noqa: S105 - the variable's name, not a secret


class Command(BaseCommand):
    help = (
        f"Serve the MCP server over stdio (stdin/stdout JSON-RPC) as the API token in {TOKEN_VARIABLE}. "
        "Remote agents use streamable HTTP at /mcp of the web server instead."
    )

    def handle(self, *args: Any, **options: Any) -> None:
        raw = os.environ.get(TOKEN_VARIABLE, "").strip()
        if not raw:
            raise CommandError(f"{TOKEN_VARIABLE} is not set: give it an API token (manage.py create_api_token).")
        try:
            principal = authenticate(raw)
        except exceptions.AuthenticationFailed as exc:
            raise CommandError(f"{TOKEN_VARIABLE}: {exc.detail}") from None
        # stdout is the protocol's: anything else goes to stderr.
        self.stderr.write(f"MCP server on stdio as {principal.actor}")
        connections.close_all()
        anyio.run(self._serve, raw)

    @staticmethod
    async def _serve(raw: str) -> None:
        server = build_server(lambda ctx: raw)
        try:
            async with stdio_server() as (read_stream, write_stream):
                await server.run(read_stream, write_stream, server.create_initialization_options())
        finally:
            # The thread that ran the handlers holds this process's database connection.
            await sync_to_async(connections.close_all, thread_sensitive=True)()
