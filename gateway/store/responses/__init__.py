"""Stored Responses-API records: base, memory, redis."""
