
-- Looks an idempotency key up and, when it is free, claims it, atomically:
-- the Redis twin of ledger.Memory.Begin. It follows
-- ledger_guard.lua (ARGV[1..4], KEYS[2], and the local seq).
--
-- KEYS[1]  the key's record: a hash of
--            fp  fingerprint of what was sent under the key (32 bytes)
--            s   state: f (in flight), u (uncertain), c (completed),
--                x (a claim cancelled before it was made: see ledger_end)
--            t   the owner's token (kept after the claim ends, so that a
--                re-sent end is recognised)
--            e   when the claim expires, in milliseconds of the server's
--                clock: from then on it is uncertain, never free
--            r   the stored result, encoded, when completed with one
--            at  when the claim ended (completed or uncertain), in
--                milliseconds of the server's clock
-- ARGV[5]  the caller's fingerprint
-- ARGV[6]  a new random owner token
-- ARGV[7]  in-flight time, in milliseconds
-- ARGV[8]  the record's life from its claim, in milliseconds: InFlightTTL
--          + TTL, so that an expired claim stays uncertain for TTL
-- ARGV[9]  a token of this process's own whose Begin failed (it never
--          sent), or "": a claim under it is free to take
-- Returns {code, seq, ...}: code 0 free and now claimed with ARGV[6]; 1 in
-- flight; 2 uncertain (an outcome unknown, or a claim expired), with the
-- token that may end it once the outcome is known; 3 completed, with the
-- result (nil when none is stored); 4 conflict: another fingerprint,
-- whatever the state; 5 this token's claim was cancelled.
local v = redis.call('HMGET', KEYS[1], 'fp', 's', 't', 'r', 'e')
local fp, s, t, r, e = v[1], v[2], v[3], v[4], tonumber(v[5])
local function claim()
  redis.call('DEL', KEYS[1])
  redis.call('HSET', KEYS[1], 'fp', ARGV[5], 's', 'f', 't', ARGV[6], 'e', ms + tonumber(ARGV[7]))
  redis.call('PEXPIRE', KEYS[1], ARGV[8])
  return {0, seq}
end
if s == 'x' then
  if t == ARGV[6] then return {5, seq} end
  return claim()
end
if not s then return claim() end -- free (a record without a state is not ours: start afresh)
if s == 'f' and ARGV[9] ~= '' and t == ARGV[9] then return claim() end
if fp ~= ARGV[5] then return {4, seq} end
if s == 'f' then
  if e and e <= ms then return {2, seq, t} end
  if t == ARGV[6] then return {0, seq} end -- this very claim, sent again by the client
  return {1, seq}
end
if s == 'u' then return {2, seq, t} end
return {3, seq, r}
