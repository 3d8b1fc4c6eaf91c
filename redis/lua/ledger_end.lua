
-- Ends a claim on an idempotency key, atomically, if the token owns it:
-- the Redis twin of ledger.Memory's Complete, Release, Uncertain.
-- It follows ledger_guard.lua (ARGV[1..4], KEYS[2], and the local seq).
--
-- KEYS[1]  the key's record (see ledger_begin.lua)
-- ARGV[5]  "complete", "release", "uncertain" or "cancel"
-- ARGV[6]  the owner's token
-- ARGV[7]  expiry of a completed or uncertain key, in milliseconds
-- ARGV[8]  in-flight time, in milliseconds
-- ARGV[9]  optional, with "complete": the result to store, encoded
-- Returns {1, seq} when the claim was ended (or, for complete and
-- uncertain, had already been ended so by this token: the client sent it
-- again), {0, seq} when the token does not own the key: wrong, already
-- used, or the key since freed. A claim that expired (uncertain) or was
-- left uncertain may still be completed or released with its token, once
-- its outcome is known.
--
-- "cancel" ends the claim of a Begin whose caller gave up before sending:
-- it frees the key if the token still holds it in flight, and when there
-- is no record yet (the Begin has not run: it may still arrive), leaves a
-- mark (s = x) for InFlightTTL that stops that Begin from claiming. It
-- answers {1, seq} whatever it found.
local v = redis.call('HMGET', KEYS[1], 's', 't')
local s, t = v[1], v[2]
local op, token = ARGV[5], ARGV[6]
if op == 'cancel' then
  if not s then
    redis.call('HSET', KEYS[1], 's', 'x', 't', token)
    redis.call('PEXPIRE', KEYS[1], ARGV[8])
  elseif s == 'f' and t == token then
    redis.call('DEL', KEYS[1])
  end
  return {1, seq}
end
if t ~= token or s == 'x' then return {0, seq} end
if s == 'c' then
  if op == 'complete' then return {1, seq} end
  return {0, seq}
end
if s == 'u' and op == 'uncertain' then return {1, seq} end
if op == 'release' then
  redis.call('DEL', KEYS[1])
  return {1, seq}
end
if op == 'complete' then
  redis.call('HSET', KEYS[1], 's', 'c')
  if ARGV[9] then redis.call('HSET', KEYS[1], 'r', ARGV[9]) end
else
  redis.call('HSET', KEYS[1], 's', 'u')
end
redis.call('HSET', KEYS[1], 'at', ms) -- when the claim ended: what an operator reads (ledger_inspect.lua)
redis.call('HDEL', KEYS[1], 'e')
redis.call('PEXPIRE', KEYS[1], ARGV[7])
return {1, seq}
