package upsertredis

import (
	"crypto/sha256"
	"encoding/hex"
	"slices"

	"github.com/redis/go-redis/v9"
)

// Each lane has two keys, named by a hash tag of its host and namespace so
// that they share a Redis Cluster slot (the scripts touch both):
//
//	<prefix>{<tag>}:state    hash: the lane's control state (stateFields)
//	<prefix>{<tag>}:writers  hash: writer id -> "<expiry ms> <demand>"
//
// The tag is a digest rather than the names themselves: a namespace may
// hold braces, which would end the tag early, and up to 512 bytes. Every
// script renews both keys' TTL; nothing in them grows with the records
// written, and the writers hash holds only live writers (each exchange
// purges the expired).
func laneKeys(prefix, host, namespace string) (state, writers string) {
	sum := sha256.Sum256([]byte(host + "\x00" + namespace))
	tag := prefix + "{" + hex.EncodeToString(sum[:12]) + "}"
	return tag + ":state", tag + ":writers"
}

// stateFields are the fields of a lane's state hash, in the order the
// scripts reply with them. Times are Redis's (milliseconds since the Unix
// epoch); rate and level are opaque strings to the scripts.
//
//	version          exchanges that found the state, counting up across rebuilds; raised to
//	                 Redis's clock (µs) by every cut and breaker change (see learned)
//	epoch            429 episodes cut so far
//	rate, level      the last cut's rate and the level it climbs back to ("0": no cut yet)
//	recovery         how long the climb takes, ms
//	cut_at           when the last cut was made
//	paused_until     end of the last Retry-After
//	open_since       when the current outage's first breaker opened; 0 when closed, or once no
//	                 writer still in it (live, its latest report within the lapse) is left
//	                 (see outageLua)
//	answered         1 once the index answered any writer
//	unit             what rate and level count (share.Unit: 0 records, 1 requests, 2 bytes)
//	accepted         records the writers reported accepted, in all
//	accepted_at_cut  accepted at the last cut, or when the state was rebuilt
//	counted_from     when that was
var stateFields = []string{"version", "epoch", "rate", "level", "recovery", "cut_at", "paused_until", "open_since", "answered", "unit", "accepted", "accepted_at_cut", "counted_from"}

// The indexes of the fields a member reads the lane's count from.
var (
	acceptedField      = slices.Index(stateFields, "accepted")
	openSinceField     = slices.Index(stateFields, "open_since")
	acceptedAtCutField = slices.Index(stateFields, "accepted_at_cut")
	countedFromField   = slices.Index(stateFields, "counted_from")
)

// seedFields is how many of stateFields, from the first, a seed holds.
const seedFields = 10

// clockLua starts every script that writes the state (KEYS[1]): Redis's
// clock (now, in ms), num, which reads a field of the state as a number,
// and learned, which raises the state's version to the clock.
const clockLua = `
if redis.replicate_commands then redis.replicate_commands() end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local function num(field)
  return tonumber(redis.call('HGET', KEYS[1], field)) or 0
end
-- Versions restart with the keys (the last writer left, TTL), so what a lane learned is dated by
-- Redis's clock: no view from before, however long it ran, passes for newer and overwrites it.
local function learned()
  local clock = tonumber(t[1]) * 1000000 + tonumber(t[2])
  redis.call('HSET', KEYS[1], 'version', string.format('%.0f', math.max(num('version'), clock)))
end
`

// outageLua keeps the lane's outage (open_since) only while a writer
// still fails in it. The state's field open_by holds, space-separated, an
// entry "<id>@<ms>" and its bare twin "<id>" (for a version before the
// dates, which keeps only the ids of live writers) for each writer whose
// breaker reported it open (breakerScript's "1": the one that opened it,
// and those whose own breaker opened during it; its "2": those whose own
// request failed in it after they heard it), dated by Redis's clock at
// that writer's latest report; a report of a writer already named renews
// its date, and a close clears open_by with the outage. settle(live, lapse), given the set of live
// writer ids and the writer's lapse (ms; share.OutageLapse), drops the
// entries of the others (expired: a writer killed; or gone: a leave),
// those dated more than lapse ago (a writer that stopped failing: idle,
// its records sent or none to send; one still failing renews well within
// it; a bare twin goes with its dated entry, and a bare id alone, the
// entry of a version before the dates, is kept while its writer lives, as
// that version keeps it); when none is left it ends the outage: a writer
// that joins later must not count its own outage from a start that nobody
// still in the lane saw continue (the index may have been back for
// minutes), and give up at its first failure. The close is raised to the
// clock (learned), as a breaker's. A state without open_by while
// open_since is set (rebuilt from a writer's seed, or written by a version
// that did not mark) keeps its outage until a close, as before:
// breakerScript begins no open_by on it (a list begun then would name
// only the writers that report from then on, and settle would end the
// outage when they leave though others are still in it). open_by holds at
// most one dated entry and one bare id per live writer. liveWriters drops
// the writers (KEYS[2]) whose heartbeat expired, or whose entry is not of
// its shape, and returns the live ones' ids as a set, their number, and
// the demands of those other than self.
const outageLua = `
local function liveWriters(self)
  local live, n, others = {}, 0, {}
  local w = redis.call('HGETALL', KEYS[2])
  for i = 1, #w, 2 do
    local expiry, d = string.match(w[i + 1], '^(%d+) (.*)$')
    if expiry == nil or tonumber(expiry) < now then -- an entry not of this shape is dropped, not an error for every writer
      redis.call('HDEL', KEYS[2], w[i])
    else
      live[w[i]], n = true, n + 1
      if w[i] ~= self then others[#others + 1] = d end
    end
  end
  return live, n, others
end
-- The entries of open_by as {id, date, entry}; an undated one (the bare id, a version before the
-- dates) has date nil.
local function markedOpen()
  local marks = {}
  for e in string.gmatch(redis.call('HGET', KEYS[1], 'open_by') or '', '%S+') do
    local id, at = string.match(e, '^(.+)@(%d+)$')
    if id == nil then
      marks[#marks + 1] = {e, nil, e}
    else
      marks[#marks + 1] = {id, tonumber(at), e}
    end
  end
  return marks
end
-- markOpen names id in open_by, dated now: added, or its date renewed. The bare id goes beside the
-- dated entry, for a version before the dates, which keeps only the ids of live writers; this version
-- keeps a bare id with its dated twin, or alone (that version's) while its writer lives.
local function markOpen(id)
  local marks, out = markedOpen(), {}
  for i = 1, #marks do
    if marks[i][1] ~= id then out[#out + 1] = marks[i][3] end
  end
  out[#out + 1] = id .. '@' .. string.format('%.0f', now)
  out[#out + 1] = id
  redis.call('HSET', KEYS[1], 'open_by', table.concat(out, ' '))
end
local function settle(live, lapse)
  local was = redis.call('HGET', KEYS[1], 'open_by')
  if not was then return end
  if num('open_since') == 0 then -- closed by a version that kept the marks
    redis.call('HDEL', KEYS[1], 'open_by')
    return
  end
  local marks, kept, dated = markedOpen(), {}, {}
  for i = 1, #marks do
    if marks[i][2] ~= nil then dated[marks[i][1]] = marks[i][2] end
  end
  for i = 1, #marks do
    -- A bare id follows its dated twin; alone (a version before the dates) it lapses not, kept while
    -- its writer lives, as that version keeps it.
    local at = dated[marks[i][1]]
    local fresh = at == nil or at >= now - lapse
    if live[marks[i][1]] and fresh then kept[#kept + 1] = marks[i][3] end
  end
  if #kept == 0 then
    redis.call('HDEL', KEYS[1], 'open_by')
    redis.call('HSET', KEYS[1], 'open_since', 0)
    learned()
  else
    local s = table.concat(kept, ' ')
    if s ~= was then redis.call('HSET', KEYS[1], 'open_by', s) end
  end
end
`

// prelude is shared by every script. ARGV[1] is the keys' TTL in ms,
// ARGV[2..11] a seed of the state (its fields up to answered, from the
// caller's last view); a script's own arguments start at ARGV[base]. The
// state is rebuilt from the seed when its key is missing (the lane is new,
// or Redis lost it: flushed, restarted, evicted), and when the seed's
// version is above the state's (Redis lost it and a writer that knew
// nothing rebuilt it first, or a failover lost writes): writers carry on
// from the latest they knew instead of from nothing. Records accepted are
// then counted from that moment. Every script adds one to the version, so
// that a writer can tell an answer older than one it has (see adopt), and
// a write that writers act on raises it to Redis's clock (learned).
// Scripts reply with {now, rebuilt, <stateFields>...}, all as strings.
// A rebuilt state's outage (open_since from the seed) is kept until a
// close, since which writers were in it is lost (see outageLua).
const prelude = clockLua + outageLua + `
local FIELDS = {'version', 'epoch', 'rate', 'level', 'recovery', 'cut_at', 'paused_until', 'open_since', 'answered', 'unit', 'accepted', 'accepted_at_cut', 'counted_from'}
local SEED = 10
local base = SEED + 2
local ttl = ARGV[1]
local created = 0
if redis.call('EXISTS', KEYS[1]) == 0 or tonumber(ARGV[2]) > num('version') then
  created = 1
  local seed = {}
  for i = 1, SEED do
    seed[#seed + 1] = FIELDS[i]
    seed[#seed + 1] = ARGV[i + 1]
  end
  local accepted = num('accepted')
  redis.call('HSET', KEYS[1], 'accepted', accepted, 'accepted_at_cut', accepted, 'counted_from', now, unpack(seed))
  -- Which writers were in an outage the seed holds is not known: it is kept until a close.
  redis.call('HDEL', KEYS[1], 'open_by')
end
redis.call('HINCRBY', KEYS[1], 'version', 1)
local function ms(x)
  return string.format('%.0f', x)
end
local function reply(extra)
  redis.call('PEXPIRE', KEYS[1], ttl)
  local out = {ms(now), tostring(created)}
  local v = redis.call('HMGET', KEYS[1], unpack(FIELDS))
  for i = 1, #FIELDS do out[#out + 1] = v[i] or '0' end
  for i = 1, #extra do out[#out + 1] = extra[i] end
  return out
end
`

// seedArgs is the number of ARGV the prelude takes.
const seedArgs = 1 + seedFields

// syncScript is a writer's periodic exchange. KEYS: state, writers. ARGV
// after the prelude's: writer id, heartbeat in ms, records accepted since
// the last exchange, demand, the outage's lapse in ms (see outageLua). It
// adds the records, marks the index as answered when there are any, drops
// the writers whose heartbeat expired (and ends the outage when no writer
// in it is left: settle), renews this one's, and replies with the other
// live writers' demands after the state.
var syncScript = redis.NewScript(prelude + `
local id, heartbeat, accepted, demand = ARGV[base], tonumber(ARGV[base + 1]), tonumber(ARGV[base + 2]), ARGV[base + 3]
local lapse = tonumber(ARGV[base + 4])
if accepted > 0 then
  redis.call('HINCRBY', KEYS[1], 'accepted', accepted)
  redis.call('HSET', KEYS[1], 'answered', 1)
end
local live, _, others = liveWriters(id)
live[id] = true
redis.call('HSET', KEYS[2], id, ms(now + heartbeat) .. ' ' .. demand)
redis.call('PEXPIRE', KEYS[2], ttl)
settle(live, lapse)
return reply(others)
`)

// cutScript applies a writer's proposal for a 429 episode, unless the
// refused request belongs to an episode already cut. KEYS: state. ARGV
// after the prelude's: the epoch the writer saw when it sent the request,
// how long ago it sent it (ms), the least gap after a cut for a new
// episode (ms), then the proposed rate, level, recovery (ms),
// Retry-After (ms), unit, the refusals that make an episode with the
// window they count in (ms; see share.Cut.Refusals), and the lane's
// channel of cuts, on which an applied cut is announced. A proposal of more
// than one refusal is counted in the field refused (the times of the
// episode's last refusals, at most maxRefusals, cleared at each cut) and
// applied only when it completes the count. It replies with "1" after the
// state when it cut, "2" when it counted the refusal, "0" when the
// request belonged to the last episode.
var cutScript = redis.NewScript(prelude + `
local seen, sent = tonumber(ARGV[base]), now - tonumber(ARGV[base + 1])
local epoch = num('epoch')
if seen < epoch or sent < num('cut_at') + tonumber(ARGV[base + 2]) then
  return reply({'0'})
end
local need, window = tonumber(ARGV[base + 8]), tonumber(ARGV[base + 9])
if need > 1 then
  local times = {}
  for at in string.gmatch(redis.call('HGET', KEYS[1], 'refused') or '', '%d+') do
    if tonumber(at) >= now - window and tonumber(at) >= num('cut_at') then times[#times + 1] = at end
  end
  times[#times + 1] = ms(now)
  if #times < need then
    redis.call('HSET', KEYS[1], 'refused', table.concat(times, ' ', math.max(1, #times - ` + maxRefusals + ` + 1)))
    return reply({'2'})
  end
end
redis.call('HSET', KEYS[1], 'epoch', ms(math.max(epoch, seen) + 1), 'rate', ARGV[base + 3], 'level', ARGV[base + 4],
  'recovery', ARGV[base + 5], 'unit', ARGV[base + 7], 'cut_at', ms(now), 'accepted_at_cut', num('accepted'), 'counted_from', ms(now),
  'paused_until', ms(math.max(num('paused_until'), now + tonumber(ARGV[base + 6]))), 'refused', '')
learned()
redis.call('PUBLISH', ARGV[base + 10], ms(math.max(epoch, seen) + 1))
return reply({'1'})
`)

// maxRefusals bounds the refusals the state keeps (a Lua literal): a
// writer that asks for more than that many is never cut for by count, and
// the field does not grow with the refusals of a long episode.
const maxRefusals = "16"

// breakerScript records a writer's breaker opening (ARGV after the
// prelude's: "1", then the writer's id) or closing ("0"), or a writer's
// failure in the outage that began at open_since ("2", the writer's id,
// that open_since as the state holds it), which marks it in that outage
// and in no other, and opens none (share.Member.InOutage). The outage
// starts with the first writer whose breaker opens, and ends for all with
// the first that closes (the index answered it), or once no writer that
// reported it open is live and reported it within the lapse (outageLua:
// each "1" or "2" names its writer in open_by, dated now, when the outage
// has one or the "1" opens it; a writer still failing sends "2" again to
// renew).
var breakerScript = redis.NewScript(prelude + `
if ARGV[base] == '2' then
  -- A writer failing in the outage it names: a mark in that outage only, never one opened on its word.
  if num('open_since') ~= 0 and redis.call('HGET', KEYS[1], 'open_since') == ARGV[base + 2]
    and redis.call('HEXISTS', KEYS[1], 'open_by') == 1 then
    markOpen(ARGV[base + 1])
  end
elseif ARGV[base] == '1' then
  if num('open_since') == 0 then
    redis.call('HSET', KEYS[1], 'open_since', ms(now))
    redis.call('HDEL', KEYS[1], 'open_by')
    markOpen(ARGV[base + 1])
    learned()
  elseif redis.call('HEXISTS', KEYS[1], 'open_by') == 1 then
    -- An outage without open_by (rebuilt, or opened by a version that did not mark) is kept until a
    -- close: a list begun now would name only the writers that report from now on, and end it when
    -- they leave though others are still in it.
    markOpen(ARGV[base + 1])
  end
else
  if num('open_since') ~= 0 or num('answered') == 0 then
    redis.call('HSET', KEYS[1], 'open_since', 0, 'answered', 1)
    learned()
  end
  redis.call('HDEL', KEYS[1], 'open_by')
end
return reply({})
`)

// leaveScript removes a writer (KEYS: state, writers; ARGV: id, the
// outage's lapse in ms), and the lane's keys when no live writer is left;
// else it ends the outage if no writer in it is left (settle). It replies
// with the number of live writers left.
var leaveScript = redis.NewScript(clockLua + outageLua + `
redis.call('HDEL', KEYS[2], ARGV[1])
local ids, live = liveWriters(ARGV[1])
if live == 0 then
  redis.call('DEL', KEYS[1], KEYS[2])
elseif redis.call('EXISTS', KEYS[1]) == 1 then
  settle(ids, tonumber(ARGV[2]))
end
return live
`)
