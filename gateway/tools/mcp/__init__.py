"""MCP servers as tool sources: the shared protocol, Streamable HTTP and stdio transports, the refresher."""
