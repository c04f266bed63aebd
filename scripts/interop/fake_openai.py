"""A fake OpenAI chat-completions server on loopback, for the interop captures (stdlib only).

``POST /v1/chat/completions`` (any prefix before ``/chat/completions`` is accepted):
  * a message containing ``markers.FAIL``          → 500 with an OpenAI error body;
  * ``tools`` given and no ``tool`` message yet    → one tool call of the first tool, whose
    arguments are ``{"query": markers.TOOL_ARGUMENT}`` (finish_reason ``tool_calls``);
  * ``stream: true``                               → the answer in SSE chunks (``markers.STREAMED``),
    usage in a last chunk when ``stream_options.include_usage``;
  * otherwise                                      → ``markers.ANSWER`` with ``reasoning_content``
    ``markers.REASONING`` and usage (prompt, completion, reasoning and cached tokens).
``POST /v1/embeddings`` → one 8-dimensional vector per input.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import markers


def _usage() -> dict[str, Any]:
    return {
        "prompt_tokens": markers.PROMPT_TOKENS,
        "completion_tokens": markers.COMPLETION_TOKENS,
        "total_tokens": markers.PROMPT_TOKENS + markers.COMPLETION_TOKENS,
        "completion_tokens_details": {"reasoning_tokens": markers.REASONING_TOKENS},
        "prompt_tokens_details": {"cached_tokens": markers.CACHED_TOKENS},
    }


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    counter = 0

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def _json(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        if self.path.rstrip("/").endswith("/models"):
            self._json(200, {"object": "list", "data": [{"id": markers.MODEL, "object": "model", "owned_by": "fake"}]})
        else:
            self._json(404, {"error": {"message": "not found", "type": "invalid_request_error"}})

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        try:
            body = json.loads(self.rfile.read(length) or b"{}")
        except ValueError:
            body = {}
        if self.path.rstrip("/").endswith("/chat/completions"):
            self._chat(body)
        elif self.path.rstrip("/").endswith("/embeddings"):
            inputs = body.get("input")
            count = len(inputs) if isinstance(inputs, list) else 1
            self._json(
                200,
                {
                    "object": "list",
                    "model": body.get("model", "text-embedding-3-small"),
                    "data": [
                        {"object": "embedding", "index": i, "embedding": [0.125 * (j + 1) for j in range(8)]}
                        for i in range(count)
                    ],
                    "usage": {"prompt_tokens": 7, "total_tokens": 7},
                },
            )
        else:
            self._json(404, {"error": {"message": f"no route {self.path}", "type": "invalid_request_error"}})

    def _chat(self, body: dict[str, Any]) -> None:
        messages = body.get("messages") or []
        text = json.dumps(messages)
        type(self).counter += 1
        completion_id = f"chatcmpl-fake{type(self).counter:04d}"
        created = int(time.time())
        model = markers.RESPONSE_MODEL
        if markers.FAIL in text:
            self._json(500, {"error": {"message": "The server had an error", "type": "server_error", "code": None}})
            return
        tools = body.get("tools") or []
        answered_tool = any(isinstance(m, dict) and m.get("role") == "tool" for m in messages)
        if tools and not answered_tool:
            name = tools[0].get("function", {}).get("name", "tool")
            message: dict[str, Any] = {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": f"call_fake{type(self).counter:04d}",
                        "type": "function",
                        "function": {"name": name, "arguments": json.dumps({"query": markers.TOOL_ARGUMENT})},
                    }
                ],
            }
            finish = "tool_calls"
        else:
            message = {"role": "assistant", "content": markers.ANSWER, "reasoning_content": markers.REASONING}
            finish = "stop"
        if body.get("stream"):
            self._stream(completion_id, created, model, message, finish, body)
            return
        self._json(
            200,
            {
                "id": completion_id,
                "object": "chat.completion",
                "created": created,
                "model": model,
                "system_fingerprint": "fp_fake",
                "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
                "usage": _usage(),
            },
        )

    def _stream(
        self, completion_id: str, created: int, model: str, message: dict[str, Any], finish: str, body: dict[str, Any]
    ) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True

        def chunk(delta: dict[str, Any], finish_reason: str | None, usage: dict[str, Any] | None = None) -> None:
            payload: dict[str, Any] = {
                "id": completion_id,
                "object": "chat.completion.chunk",
                "created": created,
                "model": model,
                "system_fingerprint": "fp_fake",
                "choices": [] if usage else [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
            }
            if usage is not None:
                payload["usage"] = usage
            self.wfile.write(b"data: " + json.dumps(payload).encode() + b"\n\n")
            self.wfile.flush()

        chunk({"role": "assistant", "content": ""}, None)
        if message.get("tool_calls"):
            call = message["tool_calls"][0]
            chunk({"tool_calls": [{"index": 0, **call}]}, None)
        else:
            chunk({"reasoning_content": markers.REASONING}, None)
            words = markers.STREAMED.split("-")
            for i, word in enumerate(words):
                chunk({"content": word + ("-" if i < len(words) - 1 else "")}, None)
        chunk({}, finish)
        if (body.get("stream_options") or {}).get("include_usage"):
            chunk({}, None, usage=_usage())
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()


def start(port: int = 0) -> tuple[ThreadingHTTPServer, str]:
    """Serve on 127.0.0.1 in a daemon thread; returns the server and its base URL (…/v1)."""
    server = ThreadingHTTPServer(("127.0.0.1", port), _Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}/v1"
