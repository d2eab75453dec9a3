package upsertredis

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// oldSyncScript is the sync script of the version before the dates in
// open_by (1360037, the parent of 98aa04a), verbatim: its settle keeps an
// entry of open_by only when it is the id of a live writer.
var oldSyncScript = redis.NewScript(`
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
local function markedOpen()
  local ids = {}
  for w in string.gmatch(redis.call('HGET', KEYS[1], 'open_by') or '', '%S+') do ids[#ids + 1] = w end
  return ids
end
local function settle(live)
  if redis.call('HEXISTS', KEYS[1], 'open_by') == 0 then return end
  if num('open_since') == 0 then -- closed by a version that kept the marks
    redis.call('HDEL', KEYS[1], 'open_by')
    return
  end
  local ids, kept = markedOpen(), {}
  for i = 1, #ids do
    if live[ids[i]] then kept[#kept + 1] = ids[i] end
  end
  if #kept == 0 then
    redis.call('HDEL', KEYS[1], 'open_by')
    redis.call('HSET', KEYS[1], 'open_since', 0)
    learned()
  elseif #kept < #ids then
    redis.call('HSET', KEYS[1], 'open_by', table.concat(kept, ' '))
  end
end

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

local id, heartbeat, accepted, demand = ARGV[base], tonumber(ARGV[base + 1]), tonumber(ARGV[base + 2]), ARGV[base + 3]
if accepted > 0 then
  redis.call('HINCRBY', KEYS[1], 'accepted', accepted)
  redis.call('HSET', KEYS[1], 'answered', 1)
end
local live, _, others = liveWriters(id)
live[id] = true
redis.call('HSET', KEYS[2], id, ms(now + heartbeat) .. ' ' .. demand)
redis.call('PEXPIRE', KEYS[2], ttl)
settle(live)
return reply(others)
`)

// An outage a writer of this version opened outlives a sync of a writer
// still on the version before the dated marks (a rolling deploy): that
// version keeps only the entries of open_by that are a live writer's id,
// so this version writes the bare id beside each dated entry (markOpen).
// Without it, the version before dropped every dated entry and ended the
// outage at its next sync, though its writer was live and reported it a
// moment ago (found by the second regression review).
func TestAnOutageOfThisVersionOutlivesASyncOfTheVersionBeforeTheDates(t *testing.T) {
	rdb := client(t, nil)
	s := newStore(t, rdb)
	a, old := join(t, s), join(t, s)
	ctx := context.Background()
	_, err := a.Breaker(ctx, true)
	require.NoError(t, err)
	opened, err := rdb.HGet(ctx, a.keys[0], "open_since").Result()
	require.NoError(t, err)
	require.NotEqual(t, "0", opened)

	// The writer on the version before syncs, as it does every interval.
	args := []any{s.opts.ttl.Milliseconds()}
	for range seedFields {
		args = append(args, "0")
	}
	args = append(args, old.id, s.opts.heartbeat.Milliseconds(), 0, "0")
	require.NoError(t, oldSyncScript.Run(ctx, rdb, old.keys, args...).Err())

	still, err := rdb.HGet(ctx, a.keys[0], "open_since").Result()
	require.NoError(t, err)
	assert.Equal(t, opened, still, "the outage of a live writer that reported it a moment ago is kept")
	assert.False(t, exchange(t, a).OpenSince.IsZero(), "the writer that opened it still sees it")
}
