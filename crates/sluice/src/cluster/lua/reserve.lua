-- Sluice, cluster/rate.rs: RESERVE: what it takes and returns is documented there.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local n, step, ahead = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local free = tonumber(redis.call('GET', KEYS[1])) or now
-- Behind now, or impossibly far ahead (not ours: no node reserves more
-- than a second ahead): start from now.
if free < now or free > now + 60000000 then free = now end
if free - now > ahead then return {-1, 0} end
redis.call('SET', KEYS[1], free + n * step, 'PX', math.floor((free - now + n * step) / 1000) + 60000)
return {free - now, n}
