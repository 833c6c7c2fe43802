"""The notification outbox: base (interface, Claimed), memory, redis."""
