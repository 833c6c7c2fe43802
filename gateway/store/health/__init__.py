"""Shared target health (the circuit breaker across replicas): base, memory, redis."""
