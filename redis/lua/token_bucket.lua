-- Takes one retry token from a bucket, atomically: the Redis twin of
-- retryfuse.TokenBucket.AllowRetryAt.
--
-- KEYS[1]  the bucket: a hash of t (tokens) and l (latest time seen, in µs)
-- ARGV[1]  capacity (tokens when full; the bucket starts full)
-- ARGV[2]  refill rate, in tokens per nanosecond
-- ARGV[3]  idle expiry, in milliseconds (PEXPIRE)
-- ARGV[4]  optional: the time in µs since the epoch, for tests; absent
--          means the server's clock (TIME)
-- Returns 1 when a token was taken, 0 when the bucket had none.
--
-- Time earlier than the latest seen counts as no time passed, as in Go.
if redis.replicate_commands then redis.replicate_commands() end

local now
if ARGV[4] then
  now = tonumber(ARGV[4])
else
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- snap takes a balance within 1e-9 of a whole number to be that number.
local function snap(x)
  local r = math.floor(x + 0.5)
  if math.abs(x - r) < 1e-9 then return r end
  return x
end

local cap = tonumber(ARGV[1])
local s = redis.call('HMGET', KEYS[1], 't', 'l')
local tokens, last = tonumber(s[1]), tonumber(s[2])
if tokens == nil or last == nil then
  tokens, last = cap, now
elseif now > last then
  local elapsed = (now - last) * 1000 -- nanoseconds, as in Go
  last = now
  if tokens < cap then
    tokens = snap(math.min(cap, tokens + elapsed * tonumber(ARGV[2])))
  end
end

local ok = 0
if tokens >= 1 then
  tokens = tokens - 1
  ok = 1
end
redis.call('HSET', KEYS[1], 't', string.format('%.17g', tokens), 'l', string.format('%.17g', last))
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return ok
