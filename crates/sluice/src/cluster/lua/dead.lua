-- Sluice, cluster/dead.rs: SYNC_DEAD: what it takes and returns is documented there.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local pairs_n = tonumber(ARGV[1])
for i = 0, pairs_n - 1 do
  redis.call('ZADD', KEYS[1], now + tonumber(ARGV[3 + 2 * i]), ARGV[2 + 2 * i])
end
for i = 2 + 2 * pairs_n, #ARGV do
  redis.call('ZREM', KEYS[1], ARGV[i])
end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local out = {}
local marks = redis.call('ZRANGEBYSCORE', KEYS[1], now, '+inf', 'WITHSCORES', 'LIMIT', 0, 10000)
for i = 1, #marks, 2 do
  out[#out + 1] = marks[i]
  out[#out + 1] = tostring(tonumber(marks[i + 1]) - now)
end
redis.call('ZREMRANGEBYRANK', KEYS[1], 0, -10001)
return out
