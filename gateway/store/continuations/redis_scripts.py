"""The Lua scripts of the Redis store: each check-and-change on one key (or one hash tag) runs atomically.

Every script touches only keys that share a hash tag (see redis.py), so each runs
unchanged on one server, behind Sentinel and on a Cluster.
"""

# Replies are tables {code, payload}: code 'ok' | 'nf' (404) | 'conflict' (409, payload = status).
# Missing hash fields read as false; an unknown key, another tenant or a cancelled record is 'nf'.
LOAD = """
local v = redis.call('HMGET', KEYS[1], 't', 's', 'cu')
if not v[1] or v[1] ~= ARGV[1] or v[2] == 'cancelled' then return {'nf'} end
local s = v[2]
local cu = tonumber(v[3] or '') or 0
"""

SAVE = """
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 't', ARGV[1], 's', ARGV[2], 'cu', ARGV[3], 'b', ARGV[4], 'ids', ARGV[5])
redis.call('EXPIRE', KEYS[1], ARGV[6])
return 1
"""

# ARGV: tenant, now, claimed_until
CLAIM = LOAD + """
if s == 'claimed' and cu > tonumber(ARGV[2]) then return {'conflict', s} end
if s ~= 'pending' and s ~= 'claimed' then return {'conflict', s} end
redis.call('HSET', KEYS[1], 's', 'claimed', 'cu', ARGV[3])
return {'ok', redis.call('HGET', KEYS[1], 'b')}
"""

# ARGV: tenant
RELEASE = LOAD + """
if s ~= 'pending' and s ~= 'claimed' then return {'conflict', s} end
redis.call('HSET', KEYS[1], 's', 'pending', 'cu', '')
return {'ok'}
"""

# ARGV: tenant, result (JSON bytes; '' for none): kept in field 'r' until the record's TTL
FINISH = LOAD + """
if s ~= 'claimed' then return {'conflict', s} end
redis.call('HSET', KEYS[1], 's', 'resumed', 'cu', '')
if ARGV[2] ~= '' then redis.call('HSET', KEYS[1], 'r', ARGV[2]) end
return {'ok', redis.call('HGET', KEYS[1], 'ids')}
"""

# ARGV: tenant. Undoes a FINISH that replicas did not confirm: the resume is reported failed, so the
# continuation must be resumable again (its replicas still hold it claimed, which is resumable too).
UNFINISH = LOAD + """
if s ~= 'resumed' and s ~= 'claimed' then return {'conflict', s} end
redis.call('HSET', KEYS[1], 's', 'pending', 'cu', '')
redis.call('HDEL', KEYS[1], 'r')
return {'ok'}
"""

# ARGV: tenant, now
CANCEL = LOAD + """
if s == 'claimed' and cu > tonumber(ARGV[2]) then return {'conflict', s} end
if s ~= 'pending' and s ~= 'claimed' then return {'conflict', s} end
local ids = redis.call('HGET', KEYS[1], 'ids')
redis.call('DEL', KEYS[1])
return {'ok', ids}
"""

# KEYS: index keys of one tenant (one hash tag); ARGV[1]: continuation id, ARGV[2]: the ambiguous marker.
# Deletes only entries that still point at this continuation; takes it out of an ambiguous entry's list
# (base.without_holder: the one left holds the id alone again), keeping the entry's TTL.
UNINDEX = """
local n = 0
local m = ARGV[2]
for _, k in ipairs(KEYS) do
  local held = redis.call('GET', k)
  if held == ARGV[1] then
    redis.call('DEL', k); n = n + 1
  elseif held and m and string.sub(held, 1, #m) == m then
    local left, was = {}, false
    for id in string.gmatch(string.sub(held, #m + 1), '%S+') do
      if id == ARGV[1] then was = true else left[#left + 1] = id end
    end
    if was then
      n = n + 1
      if #left == 0 then redis.call('DEL', k)
      elseif #left == 1 and left[1] ~= '+' then redis.call('SET', k, left[1], 'KEEPTTL')
      else redis.call('SET', k, m .. ' ' .. table.concat(left, ' '), 'KEEPTTL') end
    end
  end
end
return n
"""

# The way-A index of a pause's tool-call ids (KEYS, one hash tag: the tenant's). ARGV: continuation id, TTL s,
# the ambiguous marker, the most holders kept. An id another live continuation holds becomes
# "<marker> <id> <id>..." (base.with_holder; "+": more than were kept), which a lookup resolves to none.
INDEX = """
local m = ARGV[3]
for _, k in ipairs(KEYS) do
  local held = redis.call('GET', k)
  local value = ARGV[1]
  if held and held ~= ARGV[1] then
    local ids = {}
    if string.sub(held, 1, #m) == m then
      for id in string.gmatch(string.sub(held, #m + 1), '%S+') do ids[#ids + 1] = id end
    else
      ids[1] = held
    end
    local present, overflow = false, false
    for _, id in ipairs(ids) do
      if id == ARGV[1] then present = true end
      if id == '+' then overflow = true end
    end
    if not present then
      if overflow or #ids >= tonumber(ARGV[4]) then ids = {'+'} else ids[#ids + 1] = ARGV[1] end
    end
    value = m .. ' ' .. table.concat(ids, ' ')
  end
  redis.call('SET', k, value, 'EX', ARGV[2])
end
return #KEYS
"""
