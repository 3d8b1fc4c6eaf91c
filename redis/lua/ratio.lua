-- Records a request, or takes one retry, in a ratio budget, atomically:
-- the Redis twin of retryfuse.RatioBudget (RecordRequestAt, AllowRetryAt).
--
-- KEYS[1]  the budget: a string of 24 little-endian doubles:
--            origin  time of the first call, µs since the epoch; ticks
--                    (of one bucket's width) count from it
--            head    tick of the newest bucket
--            q, r    requests and retries in the window
--            q0..q9  requests per bucket (a ring of ten buckets)
--            r0..r9  retries per bucket
-- ARGV[1]  "request" or "retry"
-- ARGV[2]  ratio: retry credit deposited per request
-- ARGV[3]  reserve: retries granted per window whatever the traffic
-- ARGV[4]  bucket width (window / 10), in nanoseconds
-- ARGV[5]  idle expiry, in milliseconds (SET PX)
-- ARGV[6]  optional: the time in µs since the epoch, for tests; absent
--          means the server's clock (TIME)
-- Returns 1 when the request was recorded or the retry granted, 0 when
-- the retry was refused.
--
-- Time earlier than the newest bucket counts as no time passed, as in Go.
if redis.replicate_commands then redis.replicate_commands() end

local N = 10
local LAYOUT = '<' .. string.rep('d', 4 + 2 * N)

local now
if ARGV[6] then
  now = tonumber(ARGV[6])
else
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end

local function snap(x)
  local r = math.floor(x + 0.5)
  if math.abs(x - r) < 1e-9 then return r end
  return x
end

-- v[1..4] = origin, head, q, r; v[5..14] = q0..q9; v[15..24] = r0..r9
local v
local raw = redis.call('GET', KEYS[1])
if raw then
  if #raw ~= 8 * (4 + 2 * N) then return redis.error_reply('retryfuse: ' .. KEYS[1] .. ' is not a ratio budget') end
  v = {struct.unpack(LAYOUT, raw)}
  v[#v] = nil -- struct.unpack also returns the next position
else
  v = {now, 0, 0, 0}
  for i = 5, 4 + 2 * N do v[i] = 0 end
end

local d = now - v[1]
if d >= 0 then
  local tick = math.floor(d * 1000 / tonumber(ARGV[4]))
  if tick > v[2] then
    if tick - v[2] >= N then
      for i = 3, 4 + 2 * N do v[i] = 0 end
    else
      for t = v[2] + 1, tick do
        local i = t % N
        v[3] = v[3] - v[5 + i]
        v[4] = v[4] - v[5 + N + i]
        v[5 + i], v[5 + N + i] = 0, 0
      end
    end
    v[2] = tick
  end
end

local head = v[2] % N
local ok = 1
if ARGV[1] == 'request' then
  v[5 + head] = v[5 + head] + 1
  v[3] = v[3] + 1
elseif snap(tonumber(ARGV[2]) * v[3] + tonumber(ARGV[3]) - v[4]) < 1 then
  ok = 0
else
  v[5 + N + head] = v[5 + N + head] + 1
  v[4] = v[4] + 1
end

redis.call('SET', KEYS[1], struct.pack(LAYOUT, unpack(v)), 'PX', ARGV[5])
return ok
