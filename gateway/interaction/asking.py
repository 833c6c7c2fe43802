"""The handlers a running tool call may use to ask the loop for something: a user's input, a model's answer.

Built once per worker from ``mcp_servers``: each server's elicitation policy (``elicitation``,
``elicitation_timeout_s``) and, when it names a ``sampling_route``, a sampling handler that runs
on that route charged to the key whose loop made the call (``interaction/sampling.py``). A tool whose
source is no MCP server (a Python tool using ``gateway.tools.interaction``) gets the policy of the
server its request names, else the defaults (pause, 600 s), and sampling in the name of a server
its request names (refused unless that server has a ``sampling_route``).
"""

from __future__ import annotations

from collections.abc import Callable

from gateway.canonical import ToolCall
from gateway.config.mcp_section import McpServerConfig
from gateway.loop.asking import AskPolicy, TurnAsks
from gateway.loop.continuations import Continuations
from gateway.loop.engine import LoopRequest
from gateway.tools.interaction import SamplingAnswer, SamplingHandler, SamplingRefused, SamplingRequest

MCP_SOURCE_PREFIX = "mcp:"

#: (the loop's request, the MCP server's config) -> the sampling handler for that server's calls
SamplerFactory = Callable[[LoopRequest, McpServerConfig], SamplingHandler]


def asking_factory(servers: dict[str, McpServerConfig], continuations: Continuations,
                   sampler: SamplerFactory | None = None) -> Callable[[LoopRequest], TurnAsks]:
    """``LoopDeps.asking``: one :class:`TurnAsks` per turn of a loop."""
    by_source = {MCP_SOURCE_PREFIX + name: server for name, server in servers.items()}
    policies = {name: AskPolicy(server.elicitation, server.elicitation_timeout_s) for name, server in servers.items()}
    default = AskPolicy()

    def policy(source: str, server: str) -> AskPolicy:
        config = by_source.get(source)
        if config is not None:
            return policies[config.name]
        return policies.get(server.removeprefix(MCP_SOURCE_PREFIX), default)

    def for_turn(request: LoopRequest) -> TurnAsks:
        async def denied(call: ToolCall) -> None:
            """Headless: no one can answer. Listed, on the span and audited like any headless denial."""
            name = call["function"]["name"]
            request.state.headless_denials.append({"tool_call_id": call["id"], "name": name, "reason": "elicitation"})
            request.span.event("loopgate.denial", {"gen_ai.tool.name": name, "gen_ai.tool.call.id": call["id"],
                                                   "loopgate.reason": "elicitation"})
            await continuations.audit_denial(request.tenant, call, "elicitation", request.key_id, request.key_name,
                                             request.plan.name)

        def sampling(source: str) -> SamplingHandler | None:
            if sampler is None:
                return None
            config = by_source.get(source)
            if config is not None:  # an MCP server's call: offered only when the server has a sampling_route
                return sampler(request, config) if config.sampling_route is not None else None
            if not any(server.sampling_route for server in servers.values()):
                return None

            handlers: dict[str, SamplingHandler] = {}  # this call's, one per server named (each counts its cap)

            async def named(question: SamplingRequest) -> SamplingAnswer:
                """Another source's call asks in the name of a configured server, which must have a route."""
                named_server = servers.get(question.server.removeprefix(MCP_SOURCE_PREFIX))
                if sampler is None or named_server is None or named_server.sampling_route is None:
                    raise SamplingRefused(f"server {question.server!r} has no sampling_route")
                handler = handlers.get(named_server.name)
                if handler is None:
                    handler = handlers[named_server.name] = sampler(request, named_server)
                return await handler(question)

            return named

        return TurnAsks(continuations.held, policy, sampling, request.headless, denied)

    return for_turn
