"""The upstream HTTP transport: a pooled keep-alive HTTP/1.1 client per provider, proxies, SSE framing.

It is a transport, not a provider adapter: it knows URLs, bytes, limits and timeouts, never a
wire format. Adapters build an ``UpstreamRequest`` and read the bytes; the router calls
``UpstreamPool.post`` / ``UpstreamPool.stream``; every failure is an ``upstream.errors.ProviderError``.
"""
