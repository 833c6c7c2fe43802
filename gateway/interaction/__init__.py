"""How the gateway answers what a running MCP tool call asks of it: a user's input, a model's answer.

The MCP tools (``gateway/tools/mcp/``) receive ``elicitation/create`` and ``sampling/createMessage``
during a call and hand them to the handlers of ``gateway.tools.interaction`` (the tool's side of
the seam). This package is the other side: ``asking`` builds each turn's handlers (a question
pauses the loop like an approval), ``sampling`` runs a generation on a server's
``sampling_route`` as work of the key whose call it is. It sits beside the tools, above the loop:
the request lifecycle it needs is given to it by the composition root (``api/runtime.py``), as
the small protocols ``sampling`` declares.
"""
