-- Reads, or ends, the quarantine of a hash tag's marker (see
-- ledger_guard.lua): Ledger.EndQuarantine, and a process in quarantine
-- looking whether it was ended.
--
-- KEYS[1]  the marker
-- ARGV[1]  "look" (read only) or "end"
-- ARGV[2]  with "end": a new random id, for a marker that is missing
-- ARGV[3]  with "end": the reason, recorded on the marker
--
-- "end" sets q, the quarantine's end, to now: a process that knows
-- another id then adopts the marker ({-2} of the guard) rather than
-- taking it for lost data, and one in quarantine learns that it is over.
-- It records when (qe, ms of the server's clock) and why (qr). A missing
-- marker is made, ended at once: the operator has reconciled its keys.
--
-- Returns, as the marker was before: {id or false, n, ms of quarantine
-- left (0 when none), qe or 0, qr or "", now in ms of the server's
-- clock}.
local now = redis.call('TIME')
local ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
local mk = redis.call('HMGET', KEYS[1], 'id', 'n', 'q', 'qe', 'qr')
local q = tonumber(mk[3])
local left = 0
if q and q > ms then left = q - ms end
local reply = {mk[1] or false, tonumber(mk[2]) or 0, left, tonumber(mk[4]) or 0, mk[5] or '', ms}
if ARGV[1] == 'end' then
  if not mk[1] then
    redis.call('HSET', KEYS[1], 'id', ARGV[2], 'n', 0)
  end
  redis.call('HSET', KEYS[1], 'q', ms, 'qe', ms, 'qr', ARGV[3])
end
return reply
