"""No forged log lines: control characters escaped, tracebacks indented, secrets redacted."""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator

import pytest

from gateway import redact
from gateway.observability import logs, startup
from gateway.redact import Redactor

FORGED = "gem/x\n1999-01-01 10:00:00,000 ERROR loopgate.api: [fake] admin logged in\r\x1b[31m\u2028end"


@pytest.fixture
def captured() -> Iterator[tuple[logging.Logger, io.StringIO]]:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logs.SafeFormatter(logs.FORMAT))
    logger = logging.getLogger("loopgate.test_logs")
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    yield logger, stream
    logger.removeHandler(handler)
    redact.install(Redactor(()))


def test_caller_text_in_a_message_stays_on_one_line(captured: tuple[logging.Logger, io.StringIO]) -> None:
    logger, stream = captured
    logger.warning("unknown model %r in %s", FORGED, FORGED)
    logger.info("next")
    lines = stream.getvalue().splitlines()
    assert len(lines) == 2
    assert "\\n1999-01-01 10:00:00,000 ERROR" in lines[0] and "\\x1b[31m" in lines[0] and "\\u2028" in lines[0]
    assert "\\r" in lines[0]
    assert not any(line.startswith("1999-01-01 10:00:00,000") for line in lines)


def test_tracebacks_keep_their_lines_but_cannot_start_a_record(captured: tuple[logging.Logger, io.StringIO]) -> None:
    logger, stream = captured
    try:
        raise ValueError(FORGED)
    except ValueError:
        logger.exception("request failed")
    lines = stream.getvalue().splitlines()
    assert lines[1] == "Traceback (most recent call last):"
    assert len(lines) > 3  # still a readable multi-line traceback
    assert all(line.startswith(logs.TRACE_INDENT) for line in lines[2:])
    assert not any(line.startswith("1999-01-01") for line in lines)
    assert "\\x1b" in stream.getvalue()


def test_configured_secrets_never_reach_a_log_line(captured: tuple[logging.Logger, io.StringIO]) -> None:
    logger, stream = captured
    redact.install(Redactor(["sk-provider-secret-0001"]))
    logger.error("upstream said: %s", "bad key sk-provider-secret-0001")
    try:
        raise RuntimeError("key sk-provider-secret-0001")
    except RuntimeError:
        logger.exception("boom")
    assert "sk-provider-secret-0001" not in stream.getvalue()
    assert stream.getvalue().count("[redacted]") == 3  # message, source line, exception line


def test_configure_installs_one_safe_root_handler() -> None:
    root = logging.getLogger()
    before = list(root.handlers), root.level
    try:
        startup.configure_logging("warning")
        assert len(root.handlers) == 1 and isinstance(root.handlers[0].formatter, logs.SafeFormatter)
        assert root.level == logging.WARNING
    finally:
        for handler in list(root.handlers):
            root.removeHandler(handler)
        for handler in before[0]:
            root.addHandler(handler)
        root.setLevel(before[1])
