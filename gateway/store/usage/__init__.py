"""Usage aggregates: base (interface, UsageDelta, Spent), memory, redis."""
