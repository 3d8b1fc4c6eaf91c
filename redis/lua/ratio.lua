-- Records a request, or takes one retry, in a ratio budget, atomically:
-- the Redis twin of retryfuse.RatioBudget (RecordRequestAt, AllowRetryAt).
--
-- KEYS[1]  the budget: a hash of
--            o       origin: time of the first call, in µs; ticks count from it
--            h       tick of the newest bucket
--            q, r    requests and retries in the window
--            q0..q9  requests per bucket (a ring of ten buckets)
--            r0..r9  retries per bucket
-- ARGV[1]  "request" or "retry"
-- ARGV[2]  ratio: retry credit deposited per request
-- ARGV[3]  reserve: retries granted per window whatever the traffic
-- ARGV[4]  bucket width (window / 10), in nanoseconds
-- ARGV[5]  idle expiry, in milliseconds (PEXPIRE)
-- ARGV[6]  optional: the time in µs since the epoch, for tests; absent
--          means the server's clock (TIME)
-- Returns 1 when the request was recorded or the retry granted, 0 when
-- the retry was refused.
--
-- Time earlier than the newest bucket counts as no time passed, as in Go.
if redis.replicate_commands then redis.replicate_commands() end

local N = 10

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

local st = {}
local f = redis.call('HGETALL', KEYS[1])
for i = 1, #f, 2 do st[f[i]] = tonumber(f[i + 1]) end
for i = 0, N - 1 do
  st['q' .. i] = st['q' .. i] or 0
  st['r' .. i] = st['r' .. i] or 0
end

if st.o == nil or st.h == nil then
  st.o, st.h, st.q, st.r = now, 0, 0, 0
else
  st.q, st.r = st.q or 0, st.r or 0
  local d = now - st.o
  if d >= 0 then
    local tick = math.floor(d * 1000 / tonumber(ARGV[4]))
    if tick > st.h then
      if tick - st.h >= N then
        for i = 0, N - 1 do st['q' .. i], st['r' .. i] = 0, 0 end
        st.q, st.r = 0, 0
      else
        for t = st.h + 1, tick do
          local i = t % N
          st.q = st.q - st['q' .. i]
          st.r = st.r - st['r' .. i]
          st['q' .. i], st['r' .. i] = 0, 0
        end
      end
      st.h = tick
    end
  end
end

local head = st.h % N
local ok = 1
if ARGV[1] == 'request' then
  st['q' .. head] = st['q' .. head] + 1
  st.q = st.q + 1
else
  local balance = snap(tonumber(ARGV[2]) * st.q + tonumber(ARGV[3]) - st.r)
  if balance < 1 then
    ok = 0
  else
    st['r' .. head] = st['r' .. head] + 1
    st.r = st.r + 1
  end
end

local out = {'o', string.format('%.17g', st.o), 'h', string.format('%.17g', st.h),
  'q', string.format('%.17g', st.q), 'r', string.format('%.17g', st.r)}
for i = 0, N - 1 do
  out[#out + 1] = 'q' .. i
  out[#out + 1] = string.format('%.17g', st['q' .. i])
  out[#out + 1] = 'r' .. i
  out[#out + 1] = string.format('%.17g', st['r' .. i])
end
redis.call('HSET', KEYS[1], unpack(out))
redis.call('PEXPIRE', KEYS[1], ARGV[5])
return ok
