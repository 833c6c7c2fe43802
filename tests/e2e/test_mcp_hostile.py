"""What a hostile MCP server can make the gateway do, end to end: a real gateway, the server over stdio.

* its tool's ``inputSchema`` refers to a URL (``$ref``): the gateway never fetches it (the counting HTTP
  server below sees no request) and leaves the tool out of the listing, with a warning;
* one tool call asks for 100 samplings: past ``max_sampling_calls_per_tool_call`` each is answered with
  an MCP error (the call goes on), and the samplings made appear in the response's ``gateway.sampling``.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import ROOT, Gateway, gateway_config
from tests.fakes.upstream import FakeUpstream, Reply

SERVER = Path(ROOT) / "tests" / "fakes" / "mcp_hostile_stdio.py"
ROUTES = """  hostile_agent: {targets: [{provider: primary, model: m}], tools: ['mcp:hostile'], max_tool_iterations: 3}
  minute_agent: {targets: [{provider: primary, model: m}], tools: ['mcp:minute'], max_tool_iterations: 3}
  hostile_sampler: {targets: [{provider: secondary, model: sampler-model}]}
"""
USER = [{"role": "user", "content": "Look it up."}]


class CountingServer:
    """An HTTP server that answers every GET with a JSON Schema and counts the requests it got."""

    def __init__(self) -> None:
        self.hits: list[str] = []
        hits = self.hits

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                hits.append(self.path)
                body = b'{"type": "string"}'
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/schema.json"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture(scope="module")
def counting() -> Iterator[CountingServer]:
    server = CountingServer()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def gw(fakes: dict[str, FakeUpstream], counting: CountingServer) -> Iterator[Gateway]:
    server = (f"  hostile: {{command: ['{sys.executable}', '{SERVER}'], env: {{HOSTILE_REF: '{counting.url}'}}, "
              "timeout_s: 20, sampling_route: hostile_sampler}\n"
              f"  minute: {{command: ['{sys.executable}', '{SERVER}'], env: {{HOSTILE_PREFIX: m_}}, timeout_s: 20, "
              "sampling_route: hostile_sampler, max_sampling_calls_per_tool_call: 100, "
              "max_sampling_calls_per_minute: 15}\n")
    config = gateway_config(fakes, extra_models=ROUTES).replace("models:\n", "mcp_servers:\n" + server + "models:\n", 1)
    gateway = Gateway(config).start()
    yield gateway
    gateway.stop()


def tool_results(fake: FakeUpstream) -> list[str]:
    return [m["content"] for m in fake.bodies[-1]["messages"] if m["role"] == "tool"]


def test_a_remote_ref_in_an_input_schema_is_never_fetched(gw: Gateway, fakes: dict[str, FakeUpstream],
                                                          counting: CountingServer) -> None:
    fakes["primary"].queue(Reply(tool_calls=[("lookup", {"q": 5}), ("echo", {"q": "hi"})]), Reply(text="Done."))
    completion = gw.client().chat.completions.create(model="hostile_agent", messages=USER)
    assert completion.choices[0].message.content == "Done."
    assert counting.hits == []  # no request from the gateway, ever
    # The documented outcome: the tool is left out of the listing (logged), so the model is not offered it;
    # a call to it anyway is an unknown tool's error result; the server's other tools work.
    offered = [t["function"]["name"] for t in fakes["primary"].bodies[0]["tools"]]
    assert "lookup" not in offered and "echo" in offered
    assert "tool 'lookup' left out: its input schema refers to" in gw.logs()
    lookup, echo = tool_results(fakes["primary"])
    assert "lookup" in lookup and echo == "echo: hi"
    assert [c["status"] for c in completion.model_extra["gateway"]["tool_calls"]] == ["error", "ok"]


def test_a_tool_call_sampling_100_times_is_capped_and_reported(gw: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    fakes["primary"].queue(Reply(tool_calls=[("sample_many", {"times": 100})], usage=(50, 5)),
                           Reply(text="Sampled.", usage=(60, 6)))
    fakes["secondary"].queue(*[Reply(text="an answer", usage=(1000, 4000)) for _ in range(100)])
    completion = gw.client().chat.completions.create(model="hostile_agent", messages=USER)
    assert completion.choices[0].message.content == "Sampled."
    # The default cap (10 a tool call): 10 model calls made, the other 90 answered with an MCP error,
    # and the call went on to its result.
    assert len(fakes["secondary"].bodies) == 10
    [result] = tool_results(fakes["primary"])
    assert result.startswith("answered=10 refused=90 last_error=Sampling request refused: this tool call already "
                             "made 10 sampling requests (mcp_servers.hostile.max_sampling_calls_per_tool_call)")
    # What the server sampled is on the request's own answer (its usage stays the loop's model calls).
    extension = completion.model_extra["gateway"]
    assert extension["sampling"] == {"calls": 10, "prompt_tokens": 10_000, "completion_tokens": 40_000,
                                     "refused": 90}
    assert completion.usage is not None and completion.usage.prompt_tokens == 110


def test_a_server_sampling_past_its_minute_is_refused_across_calls(gw: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    fakes["secondary"].queue(*[Reply(text="an answer", usage=(10, 2)) for _ in range(20)])
    results = []
    for _ in range(2):  # two requests, one call each: 15 samplings fit in the server's minute
        fakes["primary"].queue(Reply(tool_calls=[("m_sample_many", {"times": 10})]), Reply(text="Sampled."))
        completion = gw.client().chat.completions.create(model="minute_agent", messages=USER)
        results.append((tool_results(fakes["primary"])[0], completion.model_extra["gateway"]["sampling"]))
    assert results[0] == ("answered=10 refused=0 last_error=",
                          {"calls": 10, "prompt_tokens": 100, "completion_tokens": 20, "refused": 0})
    assert results[1][0] == ("answered=5 refused=5 last_error=Sampling request refused: MCP server minute made 15 "
                             "sampling requests in the last minute (mcp_servers.minute.max_sampling_calls_per_minute)")
    assert results[1][1] == {"calls": 5, "prompt_tokens": 50, "completion_tokens": 10, "refused": 5}
    assert len(fakes["secondary"].bodies) == 15


@pytest.mark.parametrize("surface", ["responses", "messages"])
def test_sampling_is_reported_on_the_responses_and_messages_surfaces(gw: Gateway, fakes: dict[str, FakeUpstream],
                                                                      surface: str) -> None:
    fakes["primary"].queue(Reply(tool_calls=[("sample_many", {"times": 2})]), Reply(text="Sampled."))
    fakes["secondary"].queue(*[Reply(text="an answer", usage=(7, 3)) for _ in range(2)])
    if surface == "responses":
        response = gw.post("/v1/responses", {"model": "hostile_agent", "input": "Look it up."})
    else:
        response = gw.post("/v1/messages", {"model": "hostile_agent", "max_tokens": 100, "messages": USER})
    assert response.status_code == 200, response.text
    assert response.json()["gateway"]["sampling"] == {"calls": 2, "prompt_tokens": 14, "completion_tokens": 6,
                                                      "refused": 0}
