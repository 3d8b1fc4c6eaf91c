
-- Settles an idempotency key as an operator found it, atomically: the
-- record must be as read by ledger_inspect.lua, else nothing changes. It
-- follows ledger_guard.lua (ARGV[1..4], KEYS[2], and the local seq).
--
-- KEYS[1]  the key's record (see ledger_begin.lua)
-- ARGV[5]  "applied" or "not_applied"
-- ARGV[6]  the state read: "f" (in flight, its claim expired or not) or "u"
-- ARGV[7]  the token read
-- ARGV[8]  the stamp read: e for "f", at for "u" ("" when absent)
-- ARGV[9]  "1" when the claim read had expired (e passed), else "0"
-- ARGV[10] the TTL of a completed key, in milliseconds
-- ARGV[11] optional, with "applied": the result to store, encoded
-- Returns {1, seq} when settled, {0, seq} when the record is not as read.
-- A settled key keeps no token: its owner's no longer ends it.
local v = redis.call('HMGET', KEYS[1], 's', 't', 'e', 'at')
local s, t = v[1], v[2]
if s ~= ARGV[6] or t ~= ARGV[7] then return {0, seq} end
local stamp, lapsed = v[4] or '', '0'
if s == 'f' then
  stamp = v[3] or ''
  local e = tonumber(v[3])
  if e and e <= ms then lapsed = '1' end
end
if stamp ~= ARGV[8] or lapsed ~= ARGV[9] then return {0, seq} end
if ARGV[5] == 'not_applied' then
  redis.call('DEL', KEYS[1])
  return {1, seq}
end
redis.call('HSET', KEYS[1], 's', 'c', 'at', ms)
redis.call('HDEL', KEYS[1], 't', 'e', 'r')
if ARGV[11] then redis.call('HSET', KEYS[1], 'r', ARGV[11]) end
redis.call('PEXPIRE', KEYS[1], ARGV[10])
return {1, seq}
