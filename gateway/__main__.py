"""``python -m gateway`` is the ``loopgate`` command."""

from gateway.cli import main

raise SystemExit(main())
