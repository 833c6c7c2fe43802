"""Settings every test process shares.

Trace exporters started by the tests run at ``nice`` +10, not in the idle scheduling class that is
their default: on a CI machine whose CPUs other jobs keep busy, an idle-class exporter may not run
for many seconds, and these tests wait for its spans. The default class itself is checked by
``tests/e2e/test_trace_export.py::test_the_exporter_runs_below_the_gateways_cpu_priority``.
"""

from __future__ import annotations

import os

os.environ.setdefault("LOOPGATE_TRACE_EXPORTER_NICE", "10")
