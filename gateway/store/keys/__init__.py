"""Managed API keys: base (interface, record conversion), memory, redis."""
