"""The audit log: base (interface, entry checks), memory, redis, pages (time-range paging over any backend)."""
