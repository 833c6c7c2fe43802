"""The Lua scripts of the Redis store: each check-and-change on one key (or one hash tag) runs atomically.

Every script touches only the keys it is given. The step scripts (``SAVE``, ``INDEX``, ``CLAIM``, ...)
touch keys that share a hash tag (see redis.py), so each runs unchanged on one server, behind
Sentinel and on a Cluster. ``PAUSE``, ``FIND_CLAIM`` and ``FINISH_ALL`` are the same steps as one script across
a continuation's record and its tenant's keys: one round trip where one server holds every key
(a single server or Sentinel), never sent to a Cluster (``FIND_CLAIM`` even reads a record key it was not
given: it learns the continuation's id from the index).
"""

# Replies are tables {code, payload}: code 'ok' | 'nf' (404) | 'conflict' (409, payload = status).
# Missing hash fields read as false; an unknown key, another tenant or a cancelled record is 'nf'.
from gateway.store.continuations.redis_listing import LIST_ADD

LOAD = """
local v = redis.call('HMGET', KEYS[1], 't', 's', 'cu')
if not v[1] or v[1] ~= ARGV[1] or v[2] == 'cancelled' then return {'nf'} end
local s = v[2]
local cu = tonumber(v[3] or '') or 0
"""

# The record: tenant, status, claimed until, body, tool-call ids (JSON), TTL s.
_SAVE = """
local function save(rec, tenant, status, cu, body, ids, ex)
  redis.call('DEL', rec)
  redis.call('HSET', rec, 't', tenant, 's', status, 'cu', cu, 'b', body, 'ids', ids)
  redis.call('EXPIRE', rec, ex)
end
"""

# KEYS: the record. ARGV: tenant, status, claimed until, body, tool-call ids (JSON), TTL s.
SAVE = _SAVE + """
save(KEYS[1], ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6])
return 1
"""

# ARGV: tenant, now, claimed_until, '1' to have the body back ('' when the caller has read it already)
CLAIM = LOAD + """
if s == 'claimed' and cu > tonumber(ARGV[2]) then return {'conflict', s} end
if s ~= 'pending' and s ~= 'claimed' then return {'conflict', s} end
redis.call('HSET', KEYS[1], 's', 'claimed', 'cu', ARGV[3])
if ARGV[4] == '' then return {'ok'} end
return {'ok', redis.call('HGET', KEYS[1], 'b')}
"""

# ARGV: tenant
RELEASE = LOAD + """
if s ~= 'pending' and s ~= 'claimed' then return {'conflict', s} end
redis.call('HSET', KEYS[1], 's', 'pending', 'cu', '')
return {'ok'}
"""

_FINISH = LOAD + """
if s ~= 'claimed' then return {'conflict', s} end
redis.call('HSET', KEYS[1], 's', 'resumed', 'cu', '')
if ARGV[2] ~= '' then redis.call('HSET', KEYS[1], 'r', ARGV[2]) end
if ARGV[3] ~= '' then redis.call('HSET', KEYS[1], 'b', ARGV[3]) end
"""

# ARGV: tenant, result (JSON bytes; '' for none): kept in field 'r' until the record's TTL, the body the record keeps
# once resumed ('': the one it has; never given where the finish may be undone, see UNFINISH)
FINISH = _FINISH + """
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

# The index keys KEYS[first..] (one tenant's): deletes only entries that still point at continuation ``cid`` (or,
# given ``r``, the resumed marker, makes them "<r> <cid>": base.RESUMED_TOOL_CALL); takes it out of an ambiguous
# entry's list (base.without_holder: the one left holds the id alone again), keeping the entry's TTL. ``m``: the
# ambiguous marker.
_UNINDEX = """
local function unindex(first, cid, m, r)
  local n = 0
  for i = first, #KEYS do
    local k = KEYS[i]
    local held = redis.call('GET', k)
    if held == cid then
      if r and r ~= '' then redis.call('SET', k, r .. ' ' .. cid, 'KEEPTTL') else redis.call('DEL', k) end
      n = n + 1
    elseif held and m and string.sub(held, 1, #m) == m then
      local left, was = {}, false
      for id in string.gmatch(string.sub(held, #m + 1), '%S+') do
        if id == cid then was = true else left[#left + 1] = id end
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
end
"""

# KEYS: index keys of one tenant (one hash tag); ARGV[1]: continuation id, ARGV[2]: the ambiguous marker.
UNINDEX = _UNINDEX + """
return unindex(1, ARGV[1], ARGV[2])
"""

# A resumed or cancelled continuation leaves its tenant's keys (one hash tag): KEYS: the listing's sorted set
# and hash, then the index keys of its tool-call ids. ARGV: continuation id, the ambiguous marker, the resumed
# marker ('' for a cancelled one: its entries go).
DROP = _UNINDEX + """
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
return unindex(3, ARGV[1], ARGV[2], ARGV[3])
"""

# The way-A index of a pause's tool-call ids (KEYS[first..], one hash tag: the tenant's): continuation ``cid``
# for ``ex`` s. An id another live continuation holds becomes "<m> <id> <id>..." (base.with_holder; "+": more
# than ``most`` were kept), which a lookup resolves to none; one a resumed continuation held (``r``, the resumed
# marker) is taken over.
_INDEX = """
local function index(first, cid, ex, m, most, r)
  for i = first, #KEYS do
    local k = KEYS[i]
    local held = redis.call('GET', k)
    local value = cid
    if held and string.sub(held, 1, #r) == r then held = false end
    if held and held ~= cid then
      local ids = {}
      if string.sub(held, 1, #m) == m then
        for id in string.gmatch(string.sub(held, #m + 1), '%S+') do ids[#ids + 1] = id end
      else
        ids[1] = held
      end
      local present, overflow = false, false
      for _, id in ipairs(ids) do
        if id == cid then present = true end
        if id == '+' then overflow = true end
      end
      if not present then
        if overflow or #ids >= tonumber(most) then ids = {'+'} else ids[#ids + 1] = cid end
      end
      value = m .. ' ' .. table.concat(ids, ' ')
    end
    redis.call('SET', k, value, 'EX', ex)
  end
end
"""

# KEYS: the index keys. ARGV: continuation id, TTL s, the ambiguous marker, the most holders kept, the resumed marker.
INDEX = _INDEX + """
index(1, ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5])
return #KEYS
"""

# A pause in one script (one server holds every key): KEYS: the record, the listing's sorted set and hash, then
# the index keys of the pending tool-call ids. ARGV: tenant, status, claimed until, body, tool-call ids (JSON),
# TTL s, continuation id, the ambiguous marker, the most holders kept, listing score, summary ('': not listed),
# the resumed marker.
PAUSE = _SAVE + _INDEX + LIST_ADD + """
save(KEYS[1], ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6])
index(4, ARGV[7], ARGV[6], ARGV[8], ARGV[9], ARGV[12])
if ARGV[11] ~= '' then list_add(KEYS[2], KEYS[3], ARGV[7], ARGV[10], ARGV[11], ARGV[6]) end
return 1
"""

# The end of a resume in one script (one server holds every key): FINISH, then DROP. KEYS: the record, the
# listing's sorted set and hash, the index keys. ARGV: tenant, result ('' for none), the body kept ('' for the
# one it has), continuation id, the ambiguous marker, the resumed marker.
FINISH_ALL = _UNINDEX + _FINISH + """
redis.call('ZREM', KEYS[2], ARGV[4])
redis.call('HDEL', KEYS[3], ARGV[4])
unindex(4, ARGV[4], ARGV[5], ARGV[6])
return {'ok'}
"""

# Way A in one step (one server holds every key): the index, the record, and the claim when it can be taken.
# KEYS: the tenant's index keys of the trailing tool-call ids, in order. ARGV: tenant, the ambiguous marker, the
# record key's head and tail (keys.RECORD_HEAD/TAIL), now, claimed until ('': read only, no claim), the resumed
# marker. The first id indexed to one continuation (a resumed one too: then read, never claimed) is read (an
# ambiguous entry names none: counted, and the next id tried) and, when CLAIM would take it (pending, or its lease
# over), claimed. Reply: {id or false, ambiguous entries seen} when no id names one or its record is not the
# tenant's; else {id, ambiguous, t, s, cu, b, r, 1 if claimed else 0}.
FIND_CLAIM = """
local m, r = ARGV[2], ARGV[7]
local found, ambiguous = false, 0
for i = 1, #KEYS do
  local held = redis.call('GET', KEYS[i])
  if held then
    if string.sub(held, 1, #r) == r then found = string.sub(held, #r + 2); break end
    if string.sub(held, 1, #m) == m then ambiguous = ambiguous + 1 else found = held; break end
  end
end
if not found then return {false, ambiguous} end
local rec = ARGV[3] .. (string.gsub(found, '[%%{}]', {['%'] = '%25', ['{'] = '%7B', ['}'] = '%7D'})) .. ARGV[4]
local v = redis.call('HMGET', rec, 't', 's', 'cu', 'b', 'r')
if v[1] ~= ARGV[1] or not v[4] then return {found, ambiguous} end
local taken, lease = 0, tonumber(v[3] or '') or 0
if ARGV[6] ~= '' and (v[2] == 'pending' or (v[2] == 'claimed' and lease <= tonumber(ARGV[5]))) then
  redis.call('HSET', rec, 's', 'claimed', 'cu', ARGV[6])
  taken = 1
end
return {found, ambiguous, v[1], v[2], v[3], v[4], v[5], taken}
"""
