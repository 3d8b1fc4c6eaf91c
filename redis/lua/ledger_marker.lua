-- Reads the marker of a hash tag of the ledger (see ledger_guard.lua),
-- making it when there is none: what a process adopts when it starts, and
-- again after a quarantine.
--
-- KEYS[1]  the marker
-- ARGV[1]  a new random id, used when there is no marker
-- Returns {id, n, ms}: ms the quarantine left (0 when none).
local now = redis.call('TIME')
local ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
local mk = redis.call('HMGET', KEYS[1], 'id', 'n', 'q')
if not mk[1] then
  redis.call('HSET', KEYS[1], 'id', ARGV[1], 'n', 0)
  return {ARGV[1], 0, 0}
end
local left = 0
local q = tonumber(mk[3])
if q and q > ms then left = q - ms end
return {mk[1], tonumber(mk[2]) or 0, left}
