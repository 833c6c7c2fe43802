"""The rate limits' Lua scripts (redis.py calls them; lease.py explains the slices).

Replies are one bulk string, because redis-py's pure-Python reply parser costs far more per array
element than one split() does.
"""

from __future__ import annotations

from gateway.store.limits.lease import LEVEL_SHARE

# A limit of 0 (none) keeps no level: a limit an edit sets later starts with a full bucket, as a new key's does,
# not at the 0 its unlimited level was capped at. ``seen``: the HMGET of r, t (a level stored before is dropped).
_STORE_LEVELS = """
local function store_levels(key, rpm, tpm, r, t, seen)
  local fields = {'ts', ARGV[1]}
  if rpm > 0 then fields[#fields + 1] = 'r'; fields[#fields + 1] = tostring(r)
  elseif seen[1] then redis.call('HDEL', key, 'r') end
  if tpm > 0 then fields[#fields + 1] = 't'; fields[#fields + 1] = tostring(t)
  elseif seen[2] then redis.call('HDEL', key, 't') end
  redis.call('HSET', key, unpack(fields))
  redis.call('PEXPIRE', key, 120000)
end
"""

# KEYS: bucket, slots per scope. ARGV: now, tokens, member, lease_end, slot_end, then per scope:
# rpm, tpm, max_concurrent, need_r (0|1), need_t (0|tokens), need_c (0|1) (what the process's own
# lease does not cover), room_r, room_t, room_c (the largest slices wanted), debt (token
# corrections to take first), the first leased slot's number and the slot names' prefix.
# Returns "verdict kind scope retry_after" (see limits.decision), then per scope
# "r t slice_r slice_t slots" with the levels after everything taken and what was leased; slots > 0:
# that many leased slots (the request's own among them) named prefix..first, prefix..first+1, ...
ACQUIRE = _STORE_LEVELS + """
local now, est, member, lease_end, slot_end = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3], tonumber(ARGV[4]),
  tonumber(ARGV[5])
local share = """ + repr(LEVEL_SHARE) + """
local n = #KEYS / 2
local s = {}
local verdict, kind, at, retry = 1, 0, 0, 0
for i = 1, n do
  local b = 5 + 12 * (i - 1)
  local p = {}
  for j = 1, 10 do p[j] = tonumber(ARGV[b + j]) end
  local rpm, tpm, mc = p[1], p[2], p[3]
  local v = redis.call('HMGET', KEYS[2 * i - 1], 'r', 't', 'ts')
  local elapsed = math.max(0, now - (tonumber(v[3]) or now))
  p.r = math.min(rpm, (tonumber(v[1]) or rpm) + elapsed * rpm / 60)
  -- The correction (p[10], negative: an estimate given back) is applied before the cap: a bucket that
  -- refilled while it waited must not rise past its limit.
  p.t = math.min(tpm, (tonumber(v[2]) or tpm) + elapsed * tpm / 60 - p[10])
  p.card = 0
  p.seen = v
  s[i] = p
  if verdict == 1 then
    if p[4] > 0 and p.r < p[4] then verdict, kind, at, retry = 0, 0, i, (p[4] - p.r) * 60 / rpm
    elseif p[5] > 0 and p[5] > tpm then verdict, kind, at, retry = 2, 1, i, 60
    elseif p[5] > 0 and p.t < p[5] then verdict, kind, at, retry = 0, 1, i, (p[5] - p.t) * 60 / tpm
    elseif p[6] > 0 then
      p.card = redis.call('ZCARD', KEYS[2 * i])
      if p.card >= mc then
        -- Full: drop the leases that ended (a replica died), then count again.
        redis.call('ZREMRANGEBYSCORE', KEYS[2 * i], '-inf', now)
        p.card = redis.call('ZCARD', KEYS[2 * i])
        if p.card >= mc then verdict, kind, at, retry = 0, 2, i, 1 end
      end
    end
  end
end
local out = {tostring(verdict), tostring(kind), tostring(math.max(at - 1, 0)), tostring(retry)}
for i = 1, n do
  local p = s[i]
  local b = 5 + 12 * (i - 1)
  local rpm, tpm, mc = p[1], p[2], p[3]
  local got_r, got_t, got_c = 0, 0, 0
  if verdict == 1 then
    p.r, p.t = p.r - p[4], p.t - p[5]
    if p[7] > 0 and p.r >= 1 then got_r = math.floor(math.min(p[7], p.r * share)); p.r = p.r - got_r end
    if p[8] > 0 and p.t >= est then
      got_t = math.floor(math.min(p[8], p.t * share))
      if got_t < est then got_t = 0 end  -- a slice that fits no request is no use
      p.t = p.t - got_t
    end
  end
  if (rpm > 0 or tpm > 0) and (verdict == 1 or p[10] ~= 0) then
    store_levels(KEYS[2 * i - 1], rpm, tpm, p.r, p.t, p.seen)
  end
  if verdict == 1 and p[6] > 0 then
    local until_ = lease_end
    if p[9] > 0 then got_c = math.floor(math.min(p[9], (mc - p.card - 1) * share)) end
    if got_c > 0 then
      got_c = got_c + 1
      until_ = slot_end
      local first, prefix = tonumber(ARGV[b + 11]), ARGV[b + 12]
      for j = 0, got_c - 1 do redis.call('ZADD', KEYS[2 * i], slot_end, prefix .. (first + j)) end
    else
      redis.call('ZADD', KEYS[2 * i], lease_end, member)
    end
    local ttl = math.ceil((until_ - now) * 1000)
    if redis.call('PTTL', KEYS[2 * i]) < ttl then redis.call('PEXPIRE', KEYS[2 * i], ttl) end
  end
  out[#out + 1] = tostring(p.r); out[#out + 1] = tostring(p.t)
  out[#out + 1] = tostring(got_r); out[#out + 1] = tostring(got_t); out[#out + 1] = tostring(got_c)
end
return table.concat(out, ' ')
"""

# KEYS: bucket, slots per scope. ARGV: now, member, then per scope tpm, the tokens to take (negative:
# give back; 0: none) and max_concurrent (0: no slot to free here). Returns per scope its token level
# after the take ("t1 t2 ...": the limit when it has no tpm or took nothing), so a process learns
# when the bucket went below zero.
SETTLE = """
local now, member = tonumber(ARGV[1]), ARGV[2]
local out = {}
for i = 1, #KEYS / 2 do
  local tpm, extra, mc = tonumber(ARGV[3 * i]), tonumber(ARGV[3 * i + 1]), tonumber(ARGV[3 * i + 2])
  local t = tpm
  if tpm > 0 and extra ~= 0 then
    local v = redis.call('HMGET', KEYS[2 * i - 1], 't', 'ts')
    local elapsed = math.max(0, now - (tonumber(v[2]) or now))
    t = math.min(tpm, (tonumber(v[1]) or tpm) + elapsed * tpm / 60 - extra)  -- a refund never passes the limit
    redis.call('HSET', KEYS[2 * i - 1], 't', tostring(t), 'ts', ARGV[1])
    redis.call('PEXPIRE', KEYS[2 * i - 1], 120000)
  end
  if mc > 0 then redis.call('ZREM', KEYS[2 * i], member) end
  out[i] = tostring(t)
end
return table.concat(out, ' ')
"""

# One scope's lease kept: give back requests and tokens (add_t may be negative: a correction),
# release leased slots, renew the others.
# KEYS: bucket, slots. ARGV: now, rpm, tpm, add_r, add_t, slot_end, n_release, released names..., renewed names...
# Returns "r t lost..." (the levels, and the renewed names that had expired and are gone).
TIDY = _STORE_LEVELS + """
local now, rpm, tpm = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local add_r, add_t, nrel = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[7])
local r, t = 0, 0
if rpm > 0 or tpm > 0 then
  local v = redis.call('HMGET', KEYS[1], 'r', 't', 'ts')
  local elapsed = math.max(0, now - (tonumber(v[3]) or now))
  r = math.min(rpm, (tonumber(v[1]) or rpm) + elapsed * rpm / 60)
  t = math.min(tpm, (tonumber(v[2]) or tpm) + elapsed * tpm / 60)
  if add_r ~= 0 or add_t ~= 0 then
    r, t = math.min(rpm, r + add_r), math.min(tpm, t + add_t)
    store_levels(KEYS[1], rpm, tpm, r, t, v)
  end
end
for j = 8, 7 + nrel do redis.call('ZREM', KEYS[2], ARGV[j]) end
local out = {tostring(r), tostring(t)}
if #ARGV >= 8 + nrel then
  for j = 8 + nrel, #ARGV do
    if redis.call('ZSCORE', KEYS[2], ARGV[j]) then redis.call('ZADD', KEYS[2], ARGV[6], ARGV[j])
    else out[#out + 1] = ARGV[j] end
  end
  local ttl = math.ceil((tonumber(ARGV[6]) - now) * 1000)
  if redis.call('PTTL', KEYS[2]) < ttl then redis.call('PEXPIRE', KEYS[2], ttl) end
end
return table.concat(out, ' ')
"""
