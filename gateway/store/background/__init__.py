"""Background runs: base (interface, BackgroundRun, errors), memory, redis."""
