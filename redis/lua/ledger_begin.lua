-- Looks an idempotency key up and, when it is free, claims it, atomically:
-- the Redis twin of retryfuse.MemoryLedger.Begin.
--
-- KEYS[1]  the key's record: a hash of
--            fp  fingerprint of what was sent under the key (32 bytes)
--            s   state: f (in flight), u (uncertain), c (completed)
--            t   the owner's token (kept after the claim ends, so that a
--                re-sent end is recognised)
--            r   the stored result, encoded, when completed with one
-- ARGV[1]  the caller's fingerprint
-- ARGV[2]  a new random owner token
-- ARGV[3]  in-flight expiry, in milliseconds (PEXPIRE)
-- Returns {0} free and now claimed with ARGV[2]; {1} in flight; {2, t} in
-- flight after an uncertain outcome, t the token that may end it once the
-- outcome is known; {3, r} completed, r nil when no
-- result is stored; {4} conflict: another fingerprint, whatever the state.
--
-- An expired record is gone (PEXPIRE), so the key is simply free.
local v = redis.call('HMGET', KEYS[1], 'fp', 's', 't', 'r')
local fp, s, t, r = v[1], v[2], v[3], v[4]
if not s then
  redis.call('DEL', KEYS[1]) -- a record without a state is not ours: start afresh
  redis.call('HSET', KEYS[1], 'fp', ARGV[1], 's', 'f', 't', ARGV[2])
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
  return {0}
end
if fp ~= ARGV[1] then return {4} end
if s == 'f' then
  if t == ARGV[2] then return {0} end -- this very claim, sent again by the client
  return {1}
end
if s == 'u' then return {2, t} end
return {3, r}
