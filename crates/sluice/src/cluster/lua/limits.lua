-- Sluice, cluster/limits.rs: COUNT: what it takes and returns is documented there.
local t = redis.call('TIME')
local now = tonumber(t[1])
local rcpts, bucket_secs, buckets, contain =
  tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local b = math.floor(now / bucket_secs)
local out = {}
for i = 1, #KEYS / 2 do
  local counts, mark = KEYS[2 * i - 1], KEYS[2 * i]
  local lm, lr = tonumber(ARGV[3 + 2 * i]), tonumber(ARGV[4 + 2 * i])
  redis.call('HINCRBY', counts, b .. 'm', 1)
  redis.call('HINCRBY', counts, b .. 'r', rcpts)
  local all = redis.call('HGETALL', counts)
  local m, r = 0, 0
  for j = 1, #all, 2 do
    local f = all[j]
    local fb = tonumber(string.sub(f, 1, -2))
    local n = tonumber(all[j + 1])
    -- Older than the hour, ahead of Redis's clock, or not ours: dropped.
    if fb == nil or n == nil or fb + buckets <= b or fb > b then
      redis.call('HDEL', counts, f)
    elseif string.sub(f, -1) == 'm' then
      m = m + n
    else
      r = r + n
    end
  end
  redis.call('EXPIRE', counts, bucket_secs * buckets)
  local held, newly = redis.call('EXISTS', mark), 0
  if held == 0 and ((lm > 0 and m > lm) or (lr > 0 and r > lr)) then
    if contain > 0 then
      redis.call('SET', mark, now + contain, 'EX', contain)
    else
      redis.call('SET', mark, 0)
    end
    held, newly = 1, 1
  end
  local untl = 0
  if held == 1 then untl = tonumber(redis.call('GET', mark)) or 0 end
  out[#out + 1] = held
  out[#out + 1] = newly
  out[#out + 1] = m
  out[#out + 1] = r
  out[#out + 1] = untl
end
return out
