-- The prelude of the ledger's scripts (ledger_begin.lua, ledger_end.lua
-- are appended to it): it checks, atomically with the step that follows,
-- that Redis still holds the ledger's data.
--
-- KEYS[2]  the marker of the record's hash tag, a hash without expiry:
--            id  random, set when the marker was made
--            n   counts the scripts run on the tag since then
--            q   when the marker was remade after a loss: the end of the
--                quarantine, in milliseconds of the server's clock
-- ARGV[1]  the marker id the caller knows
-- ARGV[2]  the highest n the caller has seen
-- ARGV[3]  a new random id, for the case that the data is lost
-- ARGV[4]  the quarantine, in milliseconds
--
-- A missing marker, or one whose n went back (a snapshot restored, a
-- failover to a replica that lagged), means that records were lost: the
-- marker is remade with a new id and the quarantine's end, so that every
-- process that uses it learns of the loss, and the script returns
-- {-1, ms} (ms: the quarantine left). A marker with another id: {-1, ms}
-- during its quarantine; after it, {-2, id, n} (the caller adopts it and
-- runs the script again); without a quarantine (made by a process that
-- started on an empty Redis), the loss is marked as above.
local now = redis.call('TIME')
local ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
local mk = redis.call('HMGET', KEYS[2], 'id', 'n', 'q')
local mid, mn, mq = mk[1], tonumber(mk[2]) or 0, tonumber(mk[3])
if mid ~= ARGV[1] or mn < tonumber(ARGV[2]) then
  if mid ~= ARGV[1] and mid and mq then
    if mq > ms then return {-1, mq - ms} end
    return {-2, mid, mn}
  end
  local quarantine = tonumber(ARGV[4])
  redis.call('DEL', KEYS[2])
  redis.call('HSET', KEYS[2], 'id', ARGV[3], 'n', 0, 'q', ms + quarantine)
  return {-1, quarantine}
end
local seq = redis.call('HINCRBY', KEYS[2], 'n', 1)
