-- Syncs one process's share of a ratio budget, atomically: deposits the
-- requests it recorded, gives back the retries it leased and did not use,
-- charges the retries it granted on credit, and leases it more. The
-- arithmetic is that of retryfuse.RatioBudget (RecordRequestAt,
-- AllowRetryAt), n requests and up to `want` retries at a time.
--
-- KEYS[1]  the budget: a string of 24 little-endian doubles:
--            origin  time of the first call, µs since the epoch; ticks
--                    (of one bucket's width) count from it
--            head    tick of the newest bucket
--            q, r    requests and retries in the window
--            q0..q9  requests per bucket (a ring of ten buckets)
--            r0..r9  retries per bucket
-- ARGV[1]  requests to deposit
-- ARGV[2]  retries granted on credit, to charge whatever the balance
-- ARGV[3]  leased retries given back unused
-- ARGV[4]  the tick those were leased at (a reply's second value)
-- ARGV[5]  retries wanted (the lease asked for)
-- ARGV[6]  ratio: retry credit deposited per request
-- ARGV[7]  reserve: retries granted per window whatever the traffic
-- ARGV[8]  bucket width (window / 10), in nanoseconds
-- ARGV[9]  idle expiry, in milliseconds (SET PX)
-- ARGV[10] optional: the time in µs since the epoch, for tests; absent
--          means the server's clock (TIME)
-- Returns {leased, tick}: the retries leased (0..want), each counted as a
-- retry in the bucket of tick, the newest.
--
-- Retries given back count only while their bucket is in the window, and
-- never below what the bucket holds: a late return gives back nothing.
-- Time earlier than the newest bucket counts as no time passed, as in Go.
if redis.replicate_commands then redis.replicate_commands() end

local N = 10
local LAYOUT = '<' .. string.rep('d', 4 + 2 * N)

local now
if ARGV[10] then
  now = tonumber(ARGV[10])
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
  local tick = math.floor(d * 1000 / tonumber(ARGV[8]))
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

local back = tonumber(ARGV[3])
local backTick = tonumber(ARGV[4])
if back > 0 and backTick <= v[2] and backTick > v[2] - N then
  local i = 5 + N + backTick % N
  back = math.min(back, v[i])
  v[i] = v[i] - back
  v[4] = v[4] - back
end

local n = tonumber(ARGV[1])
v[5 + head] = v[5 + head] + n
v[3] = v[3] + n

local credit = tonumber(ARGV[2])
v[5 + N + head] = v[5 + N + head] + credit
v[4] = v[4] + credit

local lease = 0
local free = math.floor(snap(tonumber(ARGV[6]) * v[3] + tonumber(ARGV[7]) - v[4]))
if free > 0 then lease = math.min(free, tonumber(ARGV[5])) end
v[5 + N + head] = v[5 + N + head] + lease
v[4] = v[4] + lease

redis.call('SET', KEYS[1], struct.pack(LAYOUT, unpack(v)), 'PX', ARGV[9])
return {lease, v[2]}
