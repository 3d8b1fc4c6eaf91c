-- Ends a claim on an idempotency key, atomically, if the token owns it:
-- the Redis twin of retryfuse.MemoryLedger's Complete, Release, Uncertain.
--
-- KEYS[1]  the key's record (see ledger_begin.lua)
-- ARGV[1]  "complete", "release" or "uncertain"
-- ARGV[2]  the owner's token
-- ARGV[3]  expiry of a completed or uncertain key, in milliseconds
-- ARGV[4]  optional, with "complete": the result to store, encoded
-- Returns 1 when the claim was ended (or, for complete and uncertain, had
-- already been ended so by this token: the client sent it again), 0 when
-- the token does not own the key: wrong, already used, or expired. An
-- uncertain claim may still be completed or released with its token, once
-- its outcome is known.
local v = redis.call('HMGET', KEYS[1], 's', 't')
local s, t = v[1], v[2]
local op = ARGV[1]
if t ~= ARGV[2] then return 0 end
if s ~= 'f' then
  if (op == 'complete' and s == 'c') or (op == 'uncertain' and s == 'u') then return 1 end
  if s ~= 'u' or op == 'uncertain' then return 0 end
end
if op == 'release' then
  redis.call('DEL', KEYS[1])
  return 1
end
if op == 'complete' then
  redis.call('HSET', KEYS[1], 's', 'c')
  if ARGV[4] then redis.call('HSET', KEYS[1], 'r', ARGV[4]) end
else
  redis.call('HSET', KEYS[1], 's', 'u')
end
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1
