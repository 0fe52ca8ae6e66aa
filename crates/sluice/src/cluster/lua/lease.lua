-- Sluice, cluster/sync.rs: CLAIM (connection leases): what it takes and returns is documented there.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local node, want, held = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local cap, ttl = tonumber(ARGV[4]), tonumber(ARGV[5])
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
local others = 0
local all = redis.call('HGETALL', KEYS[1])
for i = 1, #all, 2 do
  local n, v = all[i], tonumber(all[i + 1])
  local exp = tonumber(redis.call('ZSCORE', KEYS[2], n))
  if not v or v < 0 or v ~= math.floor(v) or not exp or exp > now + 2 * ttl then
    redis.call('HDEL', KEYS[1], n)
    redis.call('ZREM', KEYS[2], n)
  elseif n ~= node then
    others = others + v
  end
end
local grant = math.max(0, math.min(want, cap - others))
local keep = math.max(grant, held)
if keep > 0 then
  redis.call('HSET', KEYS[1], node, keep)
  redis.call('ZADD', KEYS[2], now + ttl, node)
else
  redis.call('HDEL', KEYS[1], node)
  redis.call('ZREM', KEYS[2], node)
end
redis.call('PEXPIRE', KEYS[1], 2 * ttl)
redis.call('PEXPIRE', KEYS[2], 2 * ttl)
return grant
