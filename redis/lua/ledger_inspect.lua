-- Reads an idempotency key's record for an operator, changing nothing
-- (no guard: it writes no marker). KEYS[1] the record (see
-- ledger_begin.lua).
--
-- Returns {ms, s, fp, t, e, at, pttl, head}: ms the server's time in
-- milliseconds; s, fp, t, e, at the record's fields (false when absent);
-- pttl the record's time to live in milliseconds (negative when it has
-- none); head the first bytes of the stored result (its codec version
-- and status), false when none is stored.
local now = redis.call('TIME')
local ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
local v = redis.call('HMGET', KEYS[1], 's', 'fp', 't', 'e', 'at', 'r')
local head = false
if v[6] then head = string.sub(v[6], 1, 12) end
return {ms, v[1] or false, v[2] or false, v[3] or false, v[4] or false, v[5] or false, redis.call('PTTL', KEYS[1]), head}
