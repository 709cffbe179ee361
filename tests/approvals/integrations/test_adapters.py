"""The framework adapters on the real libraries (scripted model, no network) and real Redis:
OpenAI Agents SDK interruptions and LangGraph interrupts, decided through the service."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any, TypedDict

import pytest
from agents import Agent, ModelResponse, Runner, Usage, function_tool, set_tracing_disabled
from agents.models.interface import Model
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)

from approvals._internal.transports import RedisTransport
from approvals.client import ApprovalClient
from approvals.integrations.langgraph import (
    PAYLOAD_TYPE,
    approval_node,
    approval_payload,
    approval_resume,
    request_approval,
)
from approvals.integrations.openai_agents import parse_arguments, resolve_interruptions
from bot.core.context import BotContext
from tests.support import decide_next


@pytest.fixture
async def client(ctx: BotContext) -> AsyncIterator[ApprovalClient]:
    made = ApprovalClient(RedisTransport(ctx.redis, ctx.keys, owns_redis=False))
    yield made
    await made.aclose()


# -- OpenAI Agents SDK ----------------------------------------------------------------------


class ScriptedModel(Model):
    """First turn: call `tool` with `arguments`; next turn: say what the tool returned."""

    def __init__(self, tool: str, arguments: dict[str, Any]) -> None:
        self.tool, self.arguments = tool, arguments
        self.turns = 0

    async def get_response(
        self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any
    ) -> ModelResponse:
        self.turns += 1
        if self.turns == 1:
            output: list[Any] = [
                ResponseFunctionToolCall(
                    id="fc_1",
                    call_id="call_1",
                    type="function_call",
                    name=self.tool,
                    arguments=json.dumps(self.arguments),
                )
            ]
        else:
            results = [
                i.get("output")
                for i in input
                if isinstance(i, dict) and i.get("type") == "function_call_output"
            ]
            output = [
                ResponseOutputMessage(
                    id="msg_1",
                    type="message",
                    role="assistant",
                    status="completed",
                    content=[
                        ResponseOutputText(
                            type="output_text", annotations=[], text=f"tool said: {results[-1]}"
                        )
                    ],
                )
            ]
        return ModelResponse(output=output, usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError


def make_agent(ran: list[str]) -> tuple[Agent[Any], ScriptedModel]:
    @function_tool(needs_approval=True)
    def deploy(env: str, replicas: int) -> str:
        """Deploy the service."""
        ran.append(env)
        return f"deployed {env} x{replicas}"

    model = ScriptedModel("deploy", {"env": "prod", "replicas": 3})
    return Agent(name="ops-agent", instructions="deploy", model=model, tools=[deploy]), model


@pytest.fixture(autouse=True)
def _no_tracing() -> None:
    set_tracing_disabled(True)  # the SDK would otherwise export traces over the network


async def test_openai_agents_approve_runs_the_tool(client: ApprovalClient, ctx: BotContext) -> None:
    ran: list[str] = []
    agent, _ = make_agent(ran)
    result = await Runner.run(agent, "deploy prod")
    assert [i.name for i in result.interruptions] == ["deploy"] and ran == []
    decider = asyncio.create_task(decide_next(ctx.service, "deploy"))
    state = await resolve_interruptions(result, client, timeout=10, run_id="run-1")
    request = await decider
    assert request.event.arguments == {"env": "prod", "replicas": 3}
    assert request.event.agent == "ops-agent"
    assert request.event.call_id == "openai-agents:run-1:call_1"
    result = await Runner.run(agent, state)
    assert ran == ["prod"]
    assert result.final_output == "tool said: deployed prod x3"


async def test_openai_agents_deny_rejects_with_the_reason(
    client: ApprovalClient, ctx: BotContext
) -> None:
    ran: list[str] = []
    agent, _ = make_agent(ran)
    result = await Runner.run(agent, "deploy prod")
    decider = asyncio.create_task(
        decide_next(ctx.service, "deploy", "deny", reason="change freeze")
    )
    state = await resolve_interruptions(result, client, timeout=10)
    await decider
    result = await Runner.run(agent, state)
    assert ran == []
    assert result.final_output == "tool said: denied: change freeze"


async def test_openai_agents_timeout_rejects_and_withdraws(
    client: ApprovalClient, ctx: BotContext
) -> None:
    ran: list[str] = []
    agent, _ = make_agent(ran)
    result = await Runner.run(agent, "deploy prod")
    state = await resolve_interruptions(result, client, timeout=0.3)
    result = await Runner.run(agent, state)
    assert ran == []
    assert result.final_output == "tool said: denied: approval timeout"
    assert await ctx.store.list_pending() == []
    assert [e.event for e in await ctx.store.audit_entries()][-1] == "cancelled"


def test_parse_arguments_always_gives_an_object() -> None:
    assert parse_arguments('{"a": 1}') == {"a": 1}
    assert parse_arguments("[1, 2]") == {"arguments": [1, 2]}
    assert parse_arguments("not json") == {"raw_arguments": "not json"}
    assert parse_arguments(None) == {}


# -- LangGraph -------------------------------------------------------------------------------


class DeployState(TypedDict, total=False):
    env: str
    result: str


def deploy_node(state: DeployState) -> dict[str, Any]:
    answer = request_approval("lg_deploy", {"env": state["env"]}, config={"kind": "input"})
    if not answer["approved"]:
        return {"result": f"denied: {answer['reason']}"}
    return {"result": f"deployed {state['env']} ({answer['input']}, by {answer['decided_by']})"}


def deploy_graph() -> Any:
    graph = StateGraph(DeployState)
    graph.add_node("deploy", deploy_node)
    graph.add_edge(START, "deploy")
    graph.add_edge("deploy", END)
    return graph.compile(checkpointer=InMemorySaver())


async def test_langgraph_interrupt_approve_resumes_with_the_answer(
    client: ApprovalClient, ctx: BotContext
) -> None:
    graph = deploy_graph()
    thread = {"configurable": {"thread_id": "t-approve"}}
    out = await graph.ainvoke({"env": "prod"}, thread)
    interrupts = out["__interrupt__"]
    assert interrupts[0].value == approval_payload(
        "lg_deploy", {"env": "prod"}, config={"kind": "input"}
    )
    assert interrupts[0].value["type"] == PAYLOAD_TYPE
    decider = asyncio.create_task(decide_next(ctx.service, "lg_deploy", input="after 5pm"))
    command = await approval_resume(client, interrupts, timeout=10)
    request = await decider
    assert request.config.kind == "input" and request.event.agent == "langgraph"
    assert request.event.call_id == f"langgraph:{interrupts[0].id}"
    out = await graph.ainvoke(command, thread)
    assert out["result"] == "deployed prod (after 5pm, by U0REVIEWER)"
    assert "__interrupt__" not in out


async def test_langgraph_deny_and_the_same_interrupt_finds_the_same_request(
    client: ApprovalClient, ctx: BotContext
) -> None:
    graph = deploy_graph()
    thread = {"configurable": {"thread_id": "t-deny"}}
    out = await graph.ainvoke({"env": "staging"}, thread)
    decider = asyncio.create_task(
        decide_next(ctx.service, "lg_deploy", "deny", reason="use the canary")
    )
    first = await approval_resume(client, out["__interrupt__"][0], timeout=10)
    await decider
    # A second resolver (say, a restarted worker) gets the same decided request.
    again = await approval_resume(client, out["__interrupt__"][0], timeout=10)
    assert again.resume == first.resume and first.resume["status"] == "denied"
    out = await graph.ainvoke(first, thread)
    assert out["result"] == "denied: use the canary"


class GateState(TypedDict, total=False):
    arguments: dict[str, Any]
    approval: dict[str, Any]
    other: dict[str, Any]


async def test_langgraph_parallel_interrupts_resume_by_id(
    client: ApprovalClient, ctx: BotContext
) -> None:
    graph = StateGraph(GateState)
    graph.add_node("gate_a", approval_node("lg_a"))
    graph.add_node("gate_b", approval_node("lg_b", result_key="other"))
    graph.add_edge(START, "gate_a")
    graph.add_edge(START, "gate_b")
    graph.add_edge("gate_a", END)
    graph.add_edge("gate_b", END)
    app = graph.compile(checkpointer=InMemorySaver())
    thread = {"configurable": {"thread_id": "t-parallel"}}
    out = await app.ainvoke({"arguments": {"n": 1}}, thread)
    assert len(out["__interrupt__"]) == 2
    deciders = [
        asyncio.create_task(decide_next(ctx.service, "lg_a")),
        asyncio.create_task(decide_next(ctx.service, "lg_b", "deny", reason="no")),
    ]
    command = await approval_resume(client, out["__interrupt__"], timeout=10)
    await asyncio.gather(*deciders)
    out = await app.ainvoke(command, thread)
    assert out["approval"]["approved"] is True and out["approval"]["decided_by"] == "U0REVIEWER"
    assert (out["other"]["approved"], out["other"]["reason"]) == (False, "no")


async def test_langgraph_timeout_answers_a_denial(client: ApprovalClient) -> None:
    command = await approval_resume(client, approval_payload("lg_slow", {}), timeout=0.3)
    assert command.resume["approved"] is False
    assert (command.resume["status"], command.resume["reason"]) == ("timeout", "approval timeout")
