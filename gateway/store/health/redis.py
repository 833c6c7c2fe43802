"""Shared target health on Redis (part of ``RedisStore``).

    loopgate:{h:<target>}:fails               integer, consecutive failures (expires after a window)
    loopgate:{h:<target>}:open                string open-until timestamp, PX = cooldown

Time comes from the replica's clock; cooldowns are seconds long, so NTP-level skew does not matter.
"""

from __future__ import annotations

import time

from gateway.store.health.base import HealthStore, failure_window
from gateway.store.redis_client.client import RedisIO
from gateway.store.redis_client.keys import PREFIX, esc, num

# KEYS: fails, open. ARGV: threshold, window_ms, open_until (string), cooldown_ms.
# Returns the open-until string while open, nil while closed.
HEALTH_FAIL = """
local n = redis.call('INCR', KEYS[1])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
if n < tonumber(ARGV[1]) then return false end
local cur = redis.call('GET', KEYS[2])
if cur then return cur end
redis.call('SET', KEYS[2], ARGV[3], 'PX', ARGV[4])
return ARGV[3]
"""


def health_keys(target: str) -> tuple[str, str]:
    base = f"{PREFIX}{{h:{esc(target)}}}"
    return f"{base}:fails", f"{base}:open"


class RedisHealth(HealthStore):
    def __init__(self, io: RedisIO) -> None:
        self.io = io
        self._health_fail = io.register(HEALTH_FAIL)

    async def health_report(self, target: str, failed: bool, threshold: int, cooldown_s: float) -> float | None:
        fails, open_ = health_keys(target)
        async with self.io.guard("health_report"):
            if not failed:
                await self.io.command("DEL", fails, open_)  # one command, one slot
                return None
            until = time.time() + cooldown_s
            raw, _ = await self.io.script(self._health_fail, [fails, open_],
                                          [int(threshold), max(1, int(failure_window(cooldown_s) * 1000)), num(until),
                                           max(1, int(cooldown_s * 1000))], False)
        return None if raw is None else float(raw)

    async def health_open_until(self, target: str) -> float | None:
        async with self.io.guard("health_open_until"):
            raw = await self.io.command("GET", health_keys(target)[1])  # every target, every second: the lean path
        if raw is None:
            return None
        until = float(raw)
        return until if until > time.time() else None
