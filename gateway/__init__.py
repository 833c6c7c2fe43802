"""Loopgate: an OpenAI-compatible LLM gateway that runs the tool loop server-side."""

__version__ = "0.1.0"
