-- Takes one retry token from a bucket, atomically: the Redis twin of
-- retryfuse.TokenBucket.AllowRetryAt.
--
-- KEYS[1]  the bucket: a string of two little-endian doubles, the tokens
--          and the latest time seen (µs since the epoch)
-- ARGV[1]  capacity (tokens when full; the bucket starts full)
-- ARGV[2]  refill rate, in tokens per nanosecond
-- ARGV[3]  idle expiry, in milliseconds (SET PX)
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
local tokens, last
local raw = redis.call('GET', KEYS[1])
if raw then
  if #raw ~= 16 then return redis.error_reply('retryfuse: ' .. KEYS[1] .. ' is not a token bucket') end
  tokens, last = struct.unpack('<dd', raw)
end
if tokens == nil then
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
redis.call('SET', KEYS[1], struct.pack('<dd', tokens, last), 'PX', ARGV[3])
return ok
