"""Prices, usage metering, daily usage aggregates and budgets (README "Prices, usage and budgets")."""
