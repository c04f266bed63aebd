"""The MCP server (the ``mcp`` package's low-level ``Server``): tools and resources, for a
caller whose bearer token ``token_of`` finds (stdio: the environment; HTTP: the request).

The handlers are async; every database access runs through ``sync_to_async`` with
``thread_sensitive=True`` (one thread per process owns the MCP connection, as Django
expects of sync code called from async), and each call closes connections that are past
their age or broken (``close_old_connections``) before and after, as a request would.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from asgiref.sync import sync_to_async
from mcp import types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.shared.exceptions import MCPError

from mcp_server import resources, tools

NAME = "reasoning-flow-tracker"
INSTRUCTIONS = (
    "Record your reasoning as a flow: open_flow, then add_step for each step, then close_flow; later "
    "record_outcome. Before reasoning from scratch, match_pathways for a proven path (record_pathway_hit "
    "when you reuse one); enqueue_research when none fits. Never put personal data in summaries. A tool "
    'error carries the route\'s JSON: {"field": ["message"]} names what to fix.'
)

TokenOf = Callable[[ServerRequestContext[Any]], str | None]
ClientOf = Callable[[ServerRequestContext[Any]], str]


def _tool_definitions() -> list[types.Tool]:
    return [
        types.Tool(name=spec.name, description=spec.description, input_schema=tools.input_schema(spec))
        for spec in tools.TOOLS
    ]


TEMPLATES = [
    types.ResourceTemplate(
        name="pathway",
        uri_template=resources.PATHWAY_TEMPLATE,
        description="A library pathway: its signature (trigger, step-kind sequence, agents), hit count and its "
        "Decision Dimensions radar. Needs reasoning.admin.",
        mime_type=resources.MIME_TYPE,
    ),
    types.ResourceTemplate(
        name="flow",
        uri_template=resources.FLOW_TEMPLATE,
        description="A completed flow as its PHI-safe projection (the raw export row: summaries only when they "
        "passed the guard, step kinds, confidences, timings; no step content). Needs reasoning.admin.",
        mime_type=resources.MIME_TYPE,
    ),
]


def build_server(token_of: TokenOf, client_of: ClientOf | None = None) -> Server[Any]:
    def client(ctx: ServerRequestContext[Any]) -> str:
        return client_of(ctx) if client_of is not None else "127.0.0.1"

    async def list_tools(
        ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=await sync_to_async(_tool_definitions, thread_sensitive=True)())

    async def call_tool(ctx: ServerRequestContext[Any], params: types.CallToolRequestParams) -> types.CallToolResult:
        answer = await sync_to_async(tools.call_tool, thread_sensitive=True)(
            params.name, params.arguments or {}, token_of(ctx), client(ctx)
        )
        return types.CallToolResult(content=[types.TextContent(text=answer.text)], is_error=answer.is_error)

    async def list_resources(
        ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        # Every resource is one of the templates; there are too many to list.
        return types.ListResourcesResult(resources=[])

    async def list_templates(
        ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourceTemplatesResult:
        return types.ListResourceTemplatesResult(resource_templates=TEMPLATES)

    async def read_resource(
        ctx: ServerRequestContext[Any], params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        try:
            contents = await sync_to_async(resources.read_resource, thread_sensitive=True)(
                str(params.uri), token_of(ctx)
            )
        except resources.ResourceRefused as refused:
            raise MCPError(refused.code, refused.message) from None
        return types.ReadResourceResult(
            contents=[types.TextResourceContents(uri=contents.uri, mime_type=resources.MIME_TYPE, text=contents.text)]
        )

    return Server(
        NAME,
        instructions=INSTRUCTIONS,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        on_list_resources=list_resources,
        on_list_resource_templates=list_templates,
        on_read_resource=read_resource,
    )
