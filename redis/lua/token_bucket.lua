-- Syncs one process's share of a token bucket, atomically: gives back the
-- tokens it leased and did not use, charges the tokens it granted on
-- credit, and leases it more. The arithmetic is that of
-- retryfuse.TokenBucket.AllowRetryAt, up to `want` tokens at a time.
--
-- KEYS[1]  the bucket: a string of two little-endian doubles, the tokens
--          and the latest time seen (µs since the epoch)
-- ARGV[1]  tokens given back unused (the bucket never holds more than its
--          capacity)
-- ARGV[2]  tokens granted on credit, to charge whatever the balance (the
--          balance may go below zero: later refills pay it back)
-- ARGV[3]  tokens wanted (the lease asked for)
-- ARGV[4]  capacity (tokens when full; the bucket starts full)
-- ARGV[5]  refill rate, in tokens per nanosecond
-- ARGV[6]  idle expiry, in milliseconds (SET PX)
-- ARGV[7]  optional: the time in µs since the epoch, for tests; absent
--          means the server's clock (TIME)
-- Returns {leased, 0}: the tokens leased (0..want).
--
-- Time earlier than the latest seen counts as no time passed, as in Go.
if redis.replicate_commands then redis.replicate_commands() end

local now
if ARGV[7] then
  now = tonumber(ARGV[7])
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

local cap = tonumber(ARGV[4])
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
    tokens = snap(math.min(cap, tokens + elapsed * tonumber(ARGV[5])))
  end
end

tokens = math.min(cap, tokens + tonumber(ARGV[1])) - tonumber(ARGV[2])

local lease = 0
if tokens >= 1 then
  lease = math.min(math.floor(tokens), tonumber(ARGV[3]))
  tokens = tokens - lease
end
redis.call('SET', KEYS[1], struct.pack('<dd', tokens, last), 'PX', ARGV[6])
return {lease, 0}
