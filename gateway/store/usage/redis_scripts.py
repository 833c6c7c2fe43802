"""The Lua scripts of the Redis usage store (gateway/store/usage/redis.py): adds, budget reads,
reservations and their release. Each runs atomically; all keys of one call share a tenant's hash tag.
"""

# KEYS: the rows, day rows first; ARGV[1]: TTL in seconds, ARGV[2]: how many of the first keys are day
# rows (they also take the breakdown), ARGV[3]: how many field, amount pairs follow for every row
# (only the non-zero ones), then those pairs, then the breakdown's pairs (day rows only).
# Sent as EVAL (not EVALSHA): a pipeline of them needs no NOSCRIPT handling, and Redis caches it.
ADD = """
local ttl, days, last = tonumber(ARGV[1]), tonumber(ARGV[2]), 3 + 2 * tonumber(ARGV[3])
for i = 1, #KEYS do
  for j = 4, last, 2 do
    redis.call('HINCRBY', KEYS[i], ARGV[j], ARGV[j + 1])
  end
  if i <= days then
    for j = last + 1, #ARGV, 2 do
      redis.call('HINCRBY', KEYS[i], ARGV[j], ARGV[j + 1])
    end
  end
  redis.call('EXPIRE', KEYS[i], ttl)
end
return 1
"""
# KEYS: rows; one string "p:c:n,p:c:n,..." (redis-py parses a reply array element by element, at a
# cost per element comparable to a whole command: a budget check reads one string).
SPENT = """
local out = {}
for i = 1, #KEYS do
  local v = redis.call('HMGET', KEYS[i], 'p', 'c', 'n')
  out[i] = (v[1] or '0') .. ':' .. (v[2] or '0') .. ':' .. (v[3] or '0')
end
return table.concat(out, ',')
"""
# Budget admission. KEYS: per want its row, reservation zset and reservation hash, then the first
# want's released-before zset ("rx", see RELEASE). ARGV: now, the reservation's end, its member
# ("rid|tokens|nano"), tokens, nano, the keys' TTL in ms, then per want usd (1/0) and limit.
# Expired reservations (their request never reported back) are dropped first. A member already in
# "rx" was given back before it got here (its caller stopped waiting: a hung store, a disconnect):
# it reserves nothing. Returns "refused,tokens:nano:rtokens:rnano,...": refused is the 0-based
# index of the exhausted want, or -1; per want what it spent and what requests in flight reserved.
RESERVE = """
local n = (#KEYS - 1) / 3
local rx = KEYS[#KEYS]
local out = {}
local refused = -1
local given_back = false
if redis.call('EXISTS', rx) == 1 then
  redis.call('ZREMRANGEBYSCORE', rx, '-inf', ARGV[1])
  given_back = redis.call('ZSCORE', rx, ARGV[3]) ~= false
end
for i = 1, n do
  local rz, rh = KEYS[3 * i - 1], KEYS[3 * i]
  local gone = redis.call('ZRANGEBYSCORE', rz, '-inf', ARGV[1])
  for _, m in ipairs(gone) do
    local t, c = string.match(m, '|(%-?%d+)|(%-?%d+)$')
    redis.call('HINCRBY', rh, 't', 0 - tonumber(t))
    redis.call('HINCRBY', rh, 'n', 0 - tonumber(c))
  end
  if #gone > 0 then redis.call('ZREMRANGEBYSCORE', rz, '-inf', ARGV[1]) end
  local v = redis.call('HMGET', KEYS[3 * i - 2], 'p', 'c', 'n')
  local r = redis.call('HMGET', rh, 't', 'n')
  local st, sn = tonumber(v[1] or 0) + tonumber(v[2] or 0), tonumber(v[3] or 0)
  local rt, rn = tonumber(r[1] or 0), tonumber(r[2] or 0)
  out[i] = string.format('%d:%d:%d:%d', st, sn, rt, rn)
  local spent = st + rt
  if ARGV[5 + 2 * i] == '1' then spent = sn + rn end
  if refused < 0 and spent >= tonumber(ARGV[6 + 2 * i]) then refused = i - 1 end
end
if given_back then
  redis.call('ZREM', rx, ARGV[3])
elseif refused < 0 then
  for i = 1, n do
    redis.call('ZADD', KEYS[3 * i - 1], ARGV[2], ARGV[3])
    redis.call('HINCRBY', KEYS[3 * i], 't', ARGV[4])
    redis.call('HINCRBY', KEYS[3 * i], 'n', ARGV[5])
    redis.call('PEXPIRE', KEYS[3 * i - 1], ARGV[6])
    redis.call('PEXPIRE', KEYS[3 * i], ARGV[6])
  end
end
return refused .. ',' .. table.concat(out, ',')
"""
# KEYS: reservation zset and hash pairs, then the first row's released-before zset ("rx"); ARGV:
# member, -tokens, -nano, the reservation's end, its lease in ms, now. Gives a reservation back once; one
# that is not there (its script still queued in a hung store, or lost) is marked in "rx" until its
# end, and RESERVE then reserves nothing for it: a release sent again, or before its reservation
# (which a thawed store may run late), is harmless.
RELEASE = """
local found = false
for i = 1, #KEYS - 1, 2 do
  if redis.call('ZREM', KEYS[i], ARGV[1]) == 1 then
    found = true
    redis.call('HINCRBY', KEYS[i + 1], 't', ARGV[2])
    redis.call('HINCRBY', KEYS[i + 1], 'n', ARGV[3])
  end
end
if not found and tonumber(ARGV[4]) > tonumber(ARGV[6]) then
  redis.call('ZADD', KEYS[#KEYS], ARGV[4], ARGV[1])
  redis.call('PEXPIRE', KEYS[#KEYS], ARGV[5])
end
return 1
"""
