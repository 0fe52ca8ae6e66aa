-- Sluice, cluster/sync.rs: HEARTBEAT: what it takes and returns is documented there.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local dead = tonumber(ARGV[2])
redis.call('ZADD', KEYS[1], now, ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - 100 * dead)
local live = redis.call('ZRANGEBYSCORE', KEYS[1], now - dead, '+inf')
table.sort(live)
return live
