"""Hosted tools across wire formats: which a target honours, and the counterparts ``web_search`` maps to.

A hosted tool (the Responses API's ``web_search``, ``file_search``, ...) is one the provider runs on
its own servers. What each wire format does with one, decided in one place so the adapters (which
build the request) and the surfaces (which warn about or refuse what a target drops) agree:

* an adapter that runs them itself declares ``hosted_support(kind, model, functions)`` returning
  ``NATIVE`` for every kind (an OpenAI Responses upstream); the request's ``HostedTools`` are its;
* Anthropic maps ``web_search`` (any dated variant) to its server web search tool,
  ``web_search_20250305`` (the version every web-search model takes; ``filters.allowed_domains`` and
  ``user_location`` carried over);
* Gemini maps it to Google Search grounding (``googleSearch``): alone on any model; beside function
  declarations only on Gemini 3 and later (tool combination, with
  ``toolConfig.includeServerSideToolInvocations``), since earlier models refuse the pair;
* everything else (Chat Completions, LiteLLM, the mock) honours none.

Mapping happens only when the route allows it (``HostedTools.mapped``). What a target ran comes back as
``HostedToolCall`` s, bounded here: at most ``MAX_HOSTED_CALLS`` per answer, ``MAX_SOURCES`` sources
each, every string cut at ``MAX_HOSTED_CHARS`` (an upstream's answer is untrusted).
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

import orjson

from gateway.canonical import HostedToolCall, HostedTools

NATIVE = "native"
MAPPED = "mapped"
WEB_SEARCH = "web_search"
ANTHROPIC_WEB_SEARCH = "web_search_20250305"
MAX_HOSTED_CALLS = 64
MAX_SOURCES = 64
MAX_HOSTED_CHARS = 2048
_GEMINI_VERSION = re.compile(r"gemini-(\d+)")
_LOCATION_KEYS = ("city", "region", "country", "timezone")


def is_web_search(kind: str) -> bool:
    """``web_search``, ``web_search_preview`` and their dated variants."""
    return kind.startswith(WEB_SEARCH)


def support(adapter: Any, kind: str, model: str, functions: bool) -> str | None:
    """``NATIVE``, ``MAPPED`` or None: what a target (its adapter and model) does with a hosted tool of ``kind``.

    ``functions``: whether the call also offers function tools (Gemini cannot pair them before version 3).
    """
    declared = getattr(adapter, "hosted_support", None)
    return declared(kind, model, functions) if declared is not None else None


def mapped_web_search(hosted: HostedTools | None) -> dict[str, Any] | None:
    """The caller's web search tool when targets may map it, else None."""
    if hosted is None or not hosted.mapped:
        return None
    return hosted.first(WEB_SEARCH)


def runs_natively(kind: str, model: str, functions: bool) -> str | None:
    """An OpenAI Responses upstream's: it runs every hosted tool itself."""
    return NATIVE


def anthropic_supports(kind: str, model: str, functions: bool) -> str | None:
    return MAPPED if is_web_search(kind) else None


def gemini_supports(kind: str, model: str, functions: bool) -> str | None:
    if not is_web_search(kind):
        return None
    if not functions:
        return MAPPED
    version = _GEMINI_VERSION.search(model)
    return MAPPED if version is not None and int(version.group(1)) >= 3 else None


def anthropic_web_search(tool: dict[str, Any]) -> dict[str, Any]:
    """A Responses ``web_search`` tool as Anthropic's server web search tool."""
    native: dict[str, Any] = {"type": ANTHROPIC_WEB_SEARCH, "name": WEB_SEARCH}
    filters = tool.get("filters")
    domains = filters.get("allowed_domains") if isinstance(filters, dict) else None
    if isinstance(domains, list) and domains and all(isinstance(d, str) for d in domains):
        native["allowed_domains"] = domains
    location = tool.get("user_location")
    if isinstance(location, dict):
        kept = {key: location[key] for key in _LOCATION_KEYS if isinstance(location.get(key), str)}
        if kept:
            native["user_location"] = {"type": "approximate", **kept}
    return native


def _cut(value: Any) -> str:
    return value[:MAX_HOSTED_CHARS] if isinstance(value, str) else ""


def search_call(call_id: str, queries: list[Any], sources: list[tuple[Any, Any]],
                failed: bool = False) -> HostedToolCall:
    """A web search a target ran, as a ``HostedToolCall`` (bounded: see the module docstring).

    ``sources``: (url, title) pairs, the ones that are no string URL left out.
    """
    said = [_cut(query) for query in queries[:MAX_SOURCES] if isinstance(query, str) and query]
    action: dict[str, Any] = {"type": "search", "query": said[0] if said else ""}
    if len(said) > 1:
        action["queries"] = said
    kept = []
    for url, title in sources:
        if isinstance(url, str) and url:
            source = {"type": "url", "url": _cut(url)}
            if isinstance(title, str) and title:
                source["title"] = _cut(title)
            kept.append(source)
            if len(kept) == MAX_SOURCES:
                break
    action["sources"] = kept
    return HostedToolCall(WEB_SEARCH, _cut(call_id), action, "failed" if failed else "completed")


def anthropic_search(block: dict[str, Any], uses: dict[str, Any]) -> HostedToolCall | None:
    """A ``web_search_tool_result`` block (``uses``: the web search ``server_tool_use`` inputs by id) as the search
    it reports; None when no such use is in the message."""
    call_id = block.get("tool_use_id")
    if not isinstance(call_id, str) or call_id not in uses:
        return None
    used = uses[call_id]
    query = used.get("query") if isinstance(used, dict) else None
    content = block.get("content")
    results = content if isinstance(content, list) else []
    sources = [(r.get("url"), r.get("title")) for r in results[:MAX_SOURCES] if isinstance(r, dict)]
    return search_call(call_id, [query], sources, failed=not isinstance(content, list))


def anthropic_search_uses(content: list[Any]) -> dict[str, Any]:
    """The inputs of the ``server_tool_use`` blocks of web search among ``content``, by id."""
    return {block["id"]: block.get("input") for block in content
            if isinstance(block, dict) and block.get("type") == "server_tool_use"
            and block.get("name") == WEB_SEARCH and isinstance(block.get("id"), str)}


def gemini_search(grounding: dict[str, Any], response_id: str) -> HostedToolCall | None:
    """A candidate's ``groundingMetadata`` as the Google Search it reports (its queries and web sources); None
    when it names neither."""
    queries = grounding.get("webSearchQueries")
    chunks = grounding.get("groundingChunks")
    queries = queries if isinstance(queries, list) else []
    chunks = chunks[:MAX_SOURCES] if isinstance(chunks, list) else []
    webs = [chunk.get("web") for chunk in chunks if isinstance(chunk, dict)]
    sources = [(web.get("uri"), web.get("title")) for web in webs if isinstance(web, dict)]
    if not queries and not sources:
        return None
    call_id = f"ws_{response_id}" if response_id else "ws_" + hashlib.blake2b(
        orjson.dumps([queries[:MAX_SOURCES], sources]), digest_size=8).hexdigest()
    return search_call(call_id, queries, sources)


def web_search_of(item: dict[str, Any]) -> HostedToolCall | None:
    """An OpenAI Responses ``web_search_call`` output item as the search it reports (its search action's query and
    sources); None for another action (opening a page, finding in it) or an item of the wrong shape."""
    action = item.get("action")
    if not isinstance(action, dict) or action.get("type", "search") != "search":
        return None
    queries = action.get("queries")
    queries = queries if isinstance(queries, list) else [action.get("query")]
    sources = action.get("sources")
    sources = sources[:MAX_SOURCES] if isinstance(sources, list) else []
    listed = [(source.get("url"), source.get("title")) for source in sources if isinstance(source, dict)]
    return search_call(_cut(item.get("id")) or "ws", queries, listed, failed=item.get("status") == "failed")
