"""Hostile callers and indiscreet upstreams against a real ``loopgate serve``.

The upstreams are raw-socket fakes (``tests/fakes/recording.py``) that log each request line
exactly as it arrived, so "nothing escaped" is checked on the wire, not on a parsed path.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator

import httpx
import orjson
import pytest

from tests.e2e.conftest import KEY, Gateway
from tests.fakes.recording import Answer, RecordingUpstream, Seen, ok_answer

GEMINI_KEY = "gemini-upstream-secret-0001"
ECHO_KEY = "sk-echo-upstream-secret-0002"
ECHO_HEADER = "org-header-secret-token-0003"
HTML_KEY = "anthropic-upstream-secret-0004"
FORGED = "1999-01-01 10:00:00,000 ERROR loopgate.api: [fake] admin logged in"


def plain_answer(seen: Seen) -> Answer:
    if "fails" in seen.request_line:
        return 500, {"content-type": "application/json"}, b'{"error": {"message": "down"}}'
    return ok_answer(seen)


def echo_answer(seen: Seen) -> Answer:
    """A provider that quotes the request's headers in its 401 (some do)."""
    message = f"Invalid credentials. You sent: {orjson.dumps(seen.headers).decode()}"
    return 401, {"content-type": "application/json"}, orjson.dumps({"error": {"message": message,
                                                                             "type": "invalid_request_error"}})


def html_answer(seen: Seen) -> Answer:
    page = f"<html><body><h1>502 Bad Gateway</h1><pre>{seen.headers}</pre></body></html>".encode()
    return 502, {"content-type": "text/html; charset=utf-8"}, page


def forge_answer(seen: Seen) -> Answer:
    message = f"invalid input\n{FORGED}\r\nrest"
    return 400, {"content-type": "application/json"}, orjson.dumps({"error": {"message": message,
                                                                             "type": "invalid_request_error"}})


@pytest.fixture(scope="module")
def upstreams() -> Iterator[dict[str, RecordingUpstream]]:
    started = {"plain": RecordingUpstream(plain_answer).start(), "echo": RecordingUpstream(echo_answer).start(),
               "html": RecordingUpstream(html_answer).start(), "forge": RecordingUpstream(forge_answer).start()}
    yield started
    for upstream in started.values():
        upstream.stop()


@pytest.fixture(scope="module")
def gateway(upstreams: dict[str, RecordingUpstream]) -> Iterator[Gateway]:
    plain, echo = upstreams["plain"].url, upstreams["echo"].url
    config = f"""
server: {{host: 127.0.0.1, port: __PORT__}}
auth: {{keys: [{{key: {KEY}, tenant: team-a}}]}}
routing: {{backoff_base_s: 0.01, backoff_max_s: 0.05, breaker_failures: 1000, breaker_cooldown_s: 1}}
providers:
  gem: {{type: gemini, base_url: "{plain}", api_key: {GEMINI_KEY}, timeout_s: 5}}
  azure: {{type: openai, base_url: "{plain}", api_key: azure-key-0000000, api_version: "2024-10-21", timeout_s: 5}}
  locked: {{type: openai, base_url: "{plain}", api_key: locked-key-000000, direct: false, timeout_s: 5}}
  echo: {{type: openai, base_url: "{echo}", api_key: {ECHO_KEY}, headers: {{x-org-token: "Bearer {ECHO_HEADER}"}}}}
  html: {{type: anthropic, base_url: "{upstreams["html"].url}", api_key: {HTML_KEY}}}
  forge: {{type: openai, base_url: "{upstreams["forge"].url}"}}
models:
  pro: {{targets: [{{provider: gem, model: gemini-2.5-pro}}]}}
  echoing: {{targets: [{{provider: echo, model: m}}]}}
  html_page: {{targets: [{{provider: html, model: claude-x}}]}}
  forged: {{targets: [{{provider: forge, model: m}}]}}
"""
    gw = Gateway(config).start()
    yield gw
    gw.stop()


def chat(client: httpx.Client, gw: Gateway, model: str, stream: bool = False) -> httpx.Response:
    return client.post(f"{gw.url}/v1/chat/completions", headers={"authorization": f"Bearer {KEY}"},
                       json={"model": model, "messages": [{"role": "user", "content": "hi"}], "stream": stream})


@pytest.fixture
def client() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=20) as http:
        yield http


TRAVERSALS = ["gem/../../../v1/files?", "gem/..", "gem/./x", "gem/x#frag", "gem/a b", "gem/x\u0000y", "gem/x\ny",
              "gem/tunedModels/../../v1/files", "gem/x\\..\\..\\files", "azure/../../admin",
              "azure/dep?api-version=evil", "azure/dep\u2028x"]


@pytest.mark.parametrize("model", TRAVERSALS)
def test_a_model_name_that_could_leave_its_path_segment_is_a_400(
        gateway: Gateway, upstreams: dict[str, RecordingUpstream], client: httpx.Client, model: str) -> None:
    before = len(upstreams["plain"].seen)
    response = chat(client, gateway, model)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert (error["param"], error["type"]) == ("model", "invalid_request_error")
    assert len(upstreams["plain"].seen) == before  # nothing was sent, with the gateway's key or otherwise


@pytest.mark.parametrize(("model", "request_line"), [
    ("gem/ünï", "POST /v1beta/models/%C3%BCn%C3%AF:generateContent HTTP/1.1"),
    ("gem/a%2F..%2Fb", "POST /v1beta/models/a%252F..%252Fb:generateContent HTTP/1.1"),
    ("gem/x:streamGenerateContent", "POST /v1beta/models/x%3AstreamGenerateContent:generateContent HTTP/1.1"),
    ("gem/models/gemini-2.5-flash", "POST /v1beta/models/gemini-2.5-flash:generateContent HTTP/1.1"),
    ("gem/tunedModels/my-tuned", "POST /v1beta/tunedModels/my-tuned:generateContent HTTP/1.1"),
    ("gem/files/abc", "POST /v1beta/models/files%2Fabc:generateContent HTTP/1.1"),
    ("azure/dep%2F..", "POST /openai/deployments/dep%252F../chat/completions?api-version=2024-10-21 HTTP/1.1"),
    ("azure/team/dep", "POST /openai/deployments/team%2Fdep/chat/completions?api-version=2024-10-21 HTTP/1.1"),
])
def test_direct_models_reach_the_upstream_as_one_quoted_segment(
        gateway: Gateway, upstreams: dict[str, RecordingUpstream], client: httpx.Client, model: str,
        request_line: str) -> None:
    response = chat(client, gateway, model)
    assert response.status_code == 200, response.text
    seen = upstreams["plain"].seen[-1]
    assert seen.request_line == request_line
    assert re.fullmatch(r"POST /[!-~]+ HTTP/1\.1", seen.request_line)  # printable ASCII, no space, one target


def test_configured_routes_still_use_their_model(gateway: Gateway, upstreams: dict[str, RecordingUpstream],
                                                 client: httpx.Client) -> None:
    assert chat(client, gateway, "pro").status_code == 200
    assert upstreams["plain"].seen[-1].request_line == "POST /v1beta/models/gemini-2.5-pro:generateContent HTTP/1.1"
    assert upstreams["plain"].seen[-1].headers["x-goog-api-key"] == GEMINI_KEY


@pytest.mark.parametrize("model", ["locked/gpt-4o", "locked/../x"])
def test_direct_false_makes_direct_names_unknown(gateway: Gateway, upstreams: dict[str, RecordingUpstream],
                                                 client: httpx.Client, model: str) -> None:
    before = len(upstreams["plain"].seen)
    response = chat(client, gateway, model)
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "model_not_found"
    assert len(upstreams["plain"].seen) == before


@pytest.mark.parametrize("stream", [False, True])
def test_an_upstream_echoing_the_credentials_never_shows_them(gateway: Gateway, client: httpx.Client,
                                                              stream: bool) -> None:
    response = chat(client, gateway, "echoing", stream)
    assert response.status_code == 502, response.text
    message = response.json()["error"]["message"]
    assert "You sent" in message and "[redacted]" in message
    assert ECHO_KEY not in response.text and ECHO_HEADER not in response.text
    assert ECHO_KEY not in gateway.logs() and ECHO_HEADER not in gateway.logs()


def test_an_html_error_page_is_described_not_echoed(gateway: Gateway, client: httpx.Client) -> None:
    response = chat(client, gateway, "html_page")
    assert response.status_code == 502
    message = response.json()["error"]["message"]
    assert re.search(r"upstream answered 502 with a non-JSON body \(text/html, \d+ bytes\)", message), message
    assert "<html>" not in response.text and HTML_KEY not in response.text


def test_upstream_text_cannot_forge_a_log_line(gateway: Gateway, client: httpx.Client) -> None:
    response = chat(client, gateway, "forged")
    assert response.status_code == 400
    deadline = time.monotonic() + 5
    while "[fake] admin logged in" not in gateway.logs() and time.monotonic() < deadline:
        time.sleep(0.05)
    logs = gateway.logs()
    assert f"invalid input\\n{FORGED}\\r\\nrest" in logs  # logged, escaped, on the line of its record
    assert not any(line.startswith(FORGED[:10]) for line in logs.splitlines())


def _series(gw: Gateway, client: httpx.Client) -> list[str]:
    text = client.get(f"{gw.url}/metrics").text
    return [line for line in text.splitlines() if line and not line.startswith("#")]


def test_made_up_model_names_do_not_grow_metrics_or_readyz(gateway: Gateway, client: httpx.Client) -> None:
    def burst(tag: str) -> None:
        for i in range(50):
            assert chat(client, gateway, f"made-up-{tag}-{i}").status_code == 404
            assert chat(client, gateway, f"nobody/x-{tag}-{i}").status_code == 404
            assert chat(client, gateway, f"gem/direct-{tag}-{i}").status_code == 200
            assert chat(client, gateway, f"gem/fails-{tag}-{i}").status_code == 502

    burst("a")
    first = _series(gateway, client)
    circuits = client.get(f"{gateway.url}/readyz").json()["circuits"]
    burst("b")
    second = _series(gateway, client)
    assert len(second) == len(first)
    assert {line.rsplit(" ", 1)[0] for line in second} == {line.rsplit(" ", 1)[0] for line in first}
    text = "\n".join(second)
    assert "made-up" not in text and "direct-" not in text and "fails-" not in text and "nobody" not in text
    assert 'model="unknown"' in text and 'model="gem/*"' in text and 'target="gem:*"' in text
    assert client.get(f"{gateway.url}/readyz").json()["circuits"].keys() == circuits.keys()
    assert set(circuits) <= {"gem:*", "gem:gemini-2.5-pro", "echo:m", "html:claude-x", "forge:m"}
