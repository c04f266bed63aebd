from __future__ import annotations

from django.apps import AppConfig


class McpServerConfig(AppConfig):
    """The MCP server (docs/mcp.md): the HTTP routes of reasoning, pathways and research_backlog
    as Model Context Protocol tools, so it sits above those apps. No models."""

    name = "mcp_server"
    verbose_name = "MCP server"
