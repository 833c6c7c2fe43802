"""The secrets a deployment seals with (``gateway/canonical/sealing.py``), in order of preference.

1. ``responses.sealing_keys`` when configured: the same on every replica by construction; rotate
   by putting a new key first and keeping the old one listed while its tokens are still sent back.
2. Otherwise the deployment's key-id key (``governance/key_ids.py``), stretched by the sealer's own
   HKDF, so the two uses never share a key: with a Redis store it is a random salt kept there, so
   every replica reads the same one and it outlives restarts; with ``memory://`` it is
   ``auth.key_id_secret`` or derived from the admin keys' secrets (stable while they are); with none
   of these it is random per process, and a warning (a note when auth is off: development) says
   that sealed items then do not survive a restart nor reach another worker (``--workers N``).

A deployment that must not tie sealing to its key ids (or that rotates admin keys) sets
``responses.sealing_keys``.
"""

from __future__ import annotations

import logging

from gateway.canonical.sealing import Sealer
from gateway.config.model import Config

log = logging.getLogger("loopgate.sealing")

#: sets the derived secret apart from any configured one
_DERIVED = b"loopgate key-id key\x00"


def deployment_sealer(config: Config, id_key: bytes, shared_store: bool) -> Sealer:
    """The sealer of this process: configured keys, else the key-id key (see the module docstring)."""
    configured = config.responses.sealing_keys
    if configured:
        return Sealer([key.encode("utf-8", "surrogatepass") for key in configured])
    if not (shared_store or config.auth.key_id_secret or config.auth.admin_keys):
        # A deployment with keys is told; a development gateway (auth off) only notes it.
        log.log(logging.WARNING if config.auth.enabled else logging.INFO,
                "items the gateway seals for callers (compaction items, reasoning items) use a key of this process "
                "only (no responses.sealing_keys, no shared store, no auth.key_id_secret or admin keys): they cannot "
                "be read after a restart or by another worker; set responses.sealing_keys")
    return Sealer([_DERIVED + id_key])
