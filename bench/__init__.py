"""Benchmarks for Loopgate (never part of the unit-test suite): see bench/README.md."""
