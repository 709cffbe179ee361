"""Scripted model APIs on loopback for the real-client checks (`scripts/check-claude-code`,
`scripts/check-codex`): the Anthropic Messages API and the OpenAI Responses API, streaming.

The script is in the prompt, so one server serves every run: a user message
holding `RUN[<case>]: <command>` makes the model call its shell tool once
with that command (Claude Code: `Bash {"command"}`; Codex: `exec_command
{"cmd"}`, optionally asking for escalated permissions with `RUN-ESCALATED`);
`RUN-SURROGATE` appends a lone surrogate (`\\ud800`) to the command. Once
the tool result comes back, the model answers `FINAL[<case>]: <the result>`.
Every tool result is recorded per case (`results[case]`), so a check can
see what the model read — a hook's deny reason, or the command's output.
Anything else (titles, summaries, warm-ups) gets a short text answer.
Before its tool call the model says why, in text (`reason_text(case)`): the
agent's reason the command hook reads from the session's transcript.
"""

from __future__ import annotations

import json
import re
import uuid
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from aiohttp import web

_RUN = re.compile(r"RUN(-SURROGATE|-ESCALATED)?\[([A-Za-z0-9_.-]+)\]: (.+)", re.DOTALL)


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for block in content:
            if isinstance(block, dict):
                if isinstance(block.get("text"), str):
                    parts.append(block["text"])
                elif "content" in block:
                    parts.append(_text_of(block["content"]))
                elif isinstance(block.get("output"), str):
                    parts.append(block["output"])
        return "\n".join(parts)
    return ""


def find_run(texts: Iterable[str]) -> tuple[str, str, str] | None:
    """(variant, case, command) from the first `RUN…[case]: command` line."""
    for text in texts:
        found = _RUN.search(text)
        if found:
            command = found.group(3).strip().splitlines()[0]
            return found.group(1) or "", found.group(2), command
    return None


def reason_text(case: str) -> str:
    """What the model says right before its tool call in `case`."""
    return f"Checking case {case}: the command only creates its marker file, nothing else."


def _tool_json(variant: str, payload: dict[str, Any]) -> str:
    text = json.dumps(payload)
    if variant == "-SURROGATE":  # a lone surrogate (valid JSON text, not valid Unicode) in a
        # shell comment, so the command still creates exactly its marker file if it runs
        text = text[:-2] + ' # \\ud800"}' if text.endswith('"}') else text
    return text


class FakeModels:
    """Both fake APIs on one aiohttp app: `/v1/messages` (Anthropic), `/v1/responses` (OpenAI)."""

    def __init__(self) -> None:
        self.results: dict[str, list[str]] = defaultdict(list)
        self.requests: list[dict[str, Any]] = []
        self.app = web.Application(client_max_size=64 * 1024 * 1024)
        self.app.router.add_post("/v1/messages", self.messages)
        self.app.router.add_post("/v1/messages/count_tokens", self.count_tokens)
        self.app.router.add_post("/v1/responses", self.responses)
        self.app.router.add_get("/v1/models", self.models)
        self.app.router.add_route("*", "/{tail:.*}", self.other)
        self._runner: web.AppRunner | None = None
        self.url = ""

    async def start(self) -> str:
        self._runner = web.AppRunner(self.app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{port}"
        return self.url

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def other(self, request: web.Request) -> web.Response:
        return web.json_response(
            {"error": {"type": "not_found", "message": request.path}}, status=404
        )

    async def models(self, request: web.Request) -> web.Response:
        return web.json_response({"data": [], "object": "list"})

    async def count_tokens(self, request: web.Request) -> web.Response:
        return web.json_response({"input_tokens": 10})

    # -- Anthropic Messages --------------------------------------------------------------------

    async def messages(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.requests.append({"api": "anthropic", "body": body})
        messages = body.get("messages") or []
        tools = {t.get("name") for t in body.get("tools") or [] if isinstance(t, dict)}
        blocks: list[dict[str, Any]]
        stop = "end_turn"
        # One tool call per conversation: any tool result means it came back (a client may
        # add its own user message after it).
        results = [
            b
            for m in messages
            if isinstance(m, dict) and isinstance(m.get("content"), list)
            for b in m["content"]
            if isinstance(b, dict) and b.get("type") == "tool_result"
        ]
        run = find_run(_text_of(m.get("content")) for m in messages if m.get("role") == "user")
        if results and run:
            text = "\n".join(_text_of(r.get("content")) for r in results)
            self.results[run[1]].append(text)
            blocks = [{"type": "text", "text": f"FINAL[{run[1]}]: {text}"}]
        elif run and "Bash" in tools:
            variant, case, command = run
            blocks = [
                {"type": "text", "text": reason_text(case)},
                {
                    "type": "tool_use",
                    "id": f"toolu_{uuid.uuid4().hex[:20]}",
                    "name": "Bash",
                    "input_json": _tool_json(variant, {"command": command}),
                },
            ]
            stop = "tool_use"
        else:
            blocks = [{"type": "text", "text": "ok"}]
        if not body.get("stream"):
            content = [
                {
                    **{k: v for k, v in b.items() if k != "input_json"},
                    "input": json.loads(b["input_json"]),
                }
                if b["type"] == "tool_use"
                else b
                for b in blocks
            ]
            return web.json_response(
                {
                    "id": f"msg_{uuid.uuid4().hex[:20]}",
                    "type": "message",
                    "role": "assistant",
                    "model": body.get("model", "claude-fake"),
                    "content": content,
                    "stop_reason": stop,
                    "stop_sequence": None,
                    "usage": {"input_tokens": 10, "output_tokens": 5},
                }
            )
        return await self._anthropic_stream(request, body, blocks, stop)

    async def _anthropic_stream(
        self, request: web.Request, body: dict[str, Any], blocks: list[dict[str, Any]], stop: str
    ) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)

        async def send(event: str, data: dict[str, Any]) -> None:
            await response.write(f"event: {event}\ndata: {json.dumps(data)}\n\n".encode())

        await send(
            "message_start",
            {
                "type": "message_start",
                "message": {
                    "id": f"msg_{uuid.uuid4().hex[:20]}",
                    "type": "message",
                    "role": "assistant",
                    "model": body.get("model", "claude-fake"),
                    "content": [],
                    "stop_reason": None,
                    "stop_sequence": None,
                    "usage": {"input_tokens": 10, "output_tokens": 1},
                },
            },
        )
        for index, block in enumerate(blocks):
            if block["type"] == "tool_use":
                start = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
                delta = {"type": "input_json_delta", "partial_json": block["input_json"]}
            else:
                start = {"type": "text", "text": ""}
                delta = {"type": "text_delta", "text": block["text"]}
            await send(
                "content_block_start",
                {"type": "content_block_start", "index": index, "content_block": start},
            )
            await send(
                "content_block_delta",
                {"type": "content_block_delta", "index": index, "delta": delta},
            )
            await send("content_block_stop", {"type": "content_block_stop", "index": index})
        await send(
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop, "stop_sequence": None},
                "usage": {"output_tokens": 5},
            },
        )
        await send("message_stop", {"type": "message_stop"})
        await response.write_eof()
        return response

    # -- OpenAI Responses ----------------------------------------------------------------------

    async def responses(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.requests.append({"api": "openai", "body": body})
        items = body.get("input") or []
        user_texts = [
            _text_of(i.get("content"))
            for i in items
            if isinstance(i, dict) and i.get("role") == "user"
        ]
        run = find_run(user_texts)
        outputs = [
            i for i in items if isinstance(i, dict) and i.get("type") == "function_call_output"
        ]
        response_id = f"resp_{uuid.uuid4().hex[:20]}"
        output: list[dict[str, Any]]
        if run and outputs:
            last = outputs[-1].get("output")
            text = last if isinstance(last, str) else _text_of(last)
            self.results[run[1]].append(text)
            output = [_message(f"FINAL[{run[1]}]: {text}")]
        elif run:
            variant, case, command = run
            args: dict[str, Any] = {"cmd": command}
            if variant == "-ESCALATED":
                args["sandbox_permissions"] = "require_escalated"
                args["justification"] = f"check {case} needs to run outside the sandbox"
            output = [
                _message(reason_text(case)),
                {
                    "type": "function_call",
                    "id": f"fc_{uuid.uuid4().hex[:20]}",
                    "call_id": f"call_{uuid.uuid4().hex[:20]}",
                    "name": "exec_command",
                    "arguments": _tool_json(variant, args),
                    "status": "completed",
                },
            ]
        else:
            output = [_message("ok")]
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        sequence = 0

        async def send(data: dict[str, Any]) -> None:
            nonlocal sequence
            data = {**data, "sequence_number": sequence}
            sequence += 1
            await response.write(f"event: {data['type']}\ndata: {json.dumps(data)}\n\n".encode())

        base = {"id": response_id, "object": "response", "model": body.get("model", "fake")}
        await send(
            {
                "type": "response.created",
                "response": {**base, "status": "in_progress", "output": []},
            }
        )
        for index, item in enumerate(output):
            await send({"type": "response.output_item.added", "output_index": index, "item": item})
            await send({"type": "response.output_item.done", "output_index": index, "item": item})
        usage = {
            "input_tokens": 10,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": 5,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": 15,
        }
        await send(
            {
                "type": "response.completed",
                "response": {**base, "status": "completed", "output": output, "usage": usage},
            }
        )
        await response.write_eof()
        return response


def _message(text: str) -> dict[str, Any]:
    return {
        "type": "message",
        "id": f"msg_{uuid.uuid4().hex[:20]}",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }
