"""Continuations, the tool ledger and artifacts: base (interface, Continuation, errors), memory, redis."""
