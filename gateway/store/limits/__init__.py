"""Rate limits: base (interface, LimitScope, Decision), memory, redis (+ lease.py, scripts.py)."""
