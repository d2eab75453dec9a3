package upsertredis

import (
	"context"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pinecone-io/go-pinecone/v5/pinecone"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/upsertlib/upsert"
	"github.com/upsertlib/upsert/internal/redistest"
	"github.com/upsertlib/upsert/internal/share"
)

func TestLaneKeys(t *testing.T) {
	tag := func(key string) string {
		open := strings.IndexByte(key, '{')
		return key[open : open+strings.IndexByte(key[open:], '}')+1]
	}
	state, writers := laneKeys("upsert:", lane.Host, lane.Namespace)
	assert.True(t, strings.HasPrefix(state, "upsert:{"))
	assert.True(t, strings.HasSuffix(state, ":state"))
	assert.True(t, strings.HasSuffix(writers, ":writers"))
	assert.Equal(t, tag(state), tag(writers), "one lane's keys share a cluster slot")

	other, _ := laneKeys("upsert:", lane.Host, "other")
	assert.NotEqual(t, tag(state), tag(other), "lanes of other namespaces are apart")
	other, _ = laneKeys("upsert:", "http://127.0.0.1:5082", lane.Namespace)
	assert.NotEqual(t, tag(state), tag(other), "lanes of other hosts are apart")
	weird, weirdWriters := laneKeys("upsert:", "h", "a}{b:"+strings.Repeat("x", 512))
	assert.Equal(t, tag(weird), tag(weirdWriters), "braces in a namespace do not end the tag")
	assert.Less(t, len(weird), 64, "key names are bounded whatever the namespace")
	a, _ := laneKeys("upsert:", "ab", "c")
	b, _ := laneKeys("upsert:", "a", "bc")
	assert.NotEqual(t, a, b, "host and namespace are kept apart")
}

func TestWritersSplitTheRate(t *testing.T) {
	s := newStore(t, client(t, nil))
	a := join(t, s)
	assert.True(t, a.View().Shared)
	assert.Equal(t, 1, a.View().Writers)
	assert.Equal(t, 1000.0, a.View().Allocation(1000), "a writer alone has the whole rate")

	b := join(t, s)
	assert.Equal(t, 2, b.View().Writers, "a writer that joins sees the others at once")
	assert.Equal(t, 2, exchange(t, a).Writers, "the others see it at their next exchange")
	assert.Equal(t, 500.0, a.View().Allocation(1000))

	a.Demand(100) // a's producer is slower than its part
	exchange(t, a)
	assert.InDelta(t, 900, exchange(t, b).Allocation(1000), 1e-9, "b takes what a does not ask for")
	assert.InDelta(t, 100, exchange(t, a).Allocation(1000), 1e-9)

	require.NoError(t, b.Leave(context.Background()))
	require.NoError(t, b.Leave(context.Background()), "Leave is idempotent")
	assert.Equal(t, 1, exchange(t, a).Writers, "a writer that leaves is gone at once")
	assert.Equal(t, 1000.0, a.View().Allocation(1000))
}

func TestCutOncePerEpisode(t *testing.T) {
	s := newStore(t, client(t, nil))
	a, b := join(t, s), join(t, s)
	assert.True(t, math.IsInf(a.View().Rate, 1), "no cap before the first cut")
	changed := b.Changed()

	v, applied, err := a.Cut(context.Background(), share.Cut{Seen: 0, Sent: time.Now(), Rate: 800, Level: 1000, Recovery: 4 * time.Second})
	require.NoError(t, err)
	assert.True(t, applied, "the first 429 cuts")
	assert.Equal(t, uint64(1), v.Epoch)
	assert.Equal(t, 800.0, v.Rate)
	assert.Equal(t, 1000.0, v.Level)
	assert.Equal(t, 4*time.Second, v.Recovery)
	assert.WithinDuration(t, time.Now(), v.CutAt, time.Second)

	cases := []struct {
		name    string
		cut     share.Cut
		applied bool
	}{
		{"a request sent before the writer knew of the cut belongs to its episode", share.Cut{Seen: 0, Sent: time.Now(), Rate: 500}, false},
		{"a request sent before the cut belongs to its episode", share.Cut{Seen: 1, Sent: time.Now().Add(-time.Minute), Rate: 500}, false},
		{"a request sent within the gap after the cut belongs to its episode", share.Cut{Seen: 1, Sent: time.Now(), MinGap: time.Hour, Rate: 500}, false},
		{"a request sent after the cut, under it, starts a new episode", share.Cut{Seen: 1, Sent: time.Now(), Rate: 600, Level: 700}, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v, applied, err := b.Cut(context.Background(), c.cut)
			require.NoError(t, err)
			assert.Equal(t, c.applied, applied)
			if !applied {
				assert.Equal(t, uint64(1), v.Epoch, "the writer adopts the cut of the episode")
				assert.Equal(t, 800.0, v.Rate)
			}
		})
	}
	select {
	case <-changed:
	default:
		t.Error("a cut by another writer did not fire Changed")
	}
	v = exchange(t, a)
	assert.Equal(t, uint64(2), v.Epoch, "the other writer sees the new episode at its next exchange")
	assert.Equal(t, 600.0, v.Rate)
	assert.Equal(t, int64(2), s.Stats().Cuts)
	assert.Equal(t, int64(3), s.Stats().SameEpisode)
}

func TestRefusalsAreCountedTowardsAnEpisode(t *testing.T) {
	s := newStore(t, client(t, nil))
	a, b := join(t, s), join(t, s)
	_, applied, err := a.Cut(context.Background(), share.Cut{Sent: time.Now(), Rate: 800, Level: 1000, Recovery: time.Second})
	require.NoError(t, err)
	require.True(t, applied)
	refusal := func(w share.Member, seen uint64, window time.Duration) (share.View, bool) {
		v, applied, err := w.Cut(context.Background(), share.Cut{Seen: seen, Sent: time.Now(), Rate: 500, Level: 600, Refusals: 3, Window: window})
		require.NoError(t, err)
		return v, applied
	}
	for _, tc := range []struct {
		name    string
		from    share.Member
		seen    uint64
		applied bool
	}{
		{"the first refusal of the episode is counted", a, 1, false},
		{"so is the second, from another writer", b, 1, false},
		{"the third cuts, in the proposal's terms", a, 1, true},
		{"a refusal of the episode just cut is not counted", b, 1, false},
		{"a new episode counts afresh", b, 2, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, applied := refusal(tc.from, tc.seen, time.Minute)
			assert.Equal(t, tc.applied, applied)
			if applied {
				assert.Equal(t, uint64(2), v.Epoch)
				assert.Equal(t, 500.0, v.Rate)
			}
		})
	}
	assert.Equal(t, int64(3), s.Stats().Counted)

	// Refusals farther apart than the window never make an episode.
	_, applied, err = a.Cut(context.Background(), share.Cut{Seen: 2, Sent: time.Now(), Rate: 400, Level: 500})
	require.NoError(t, err)
	require.True(t, applied)
	for range 3 {
		time.Sleep(20 * time.Millisecond)
		v, applied := refusal(b, 3, 5*time.Millisecond)
		assert.False(t, applied)
		assert.Equal(t, uint64(3), v.Epoch, "no episode from refusals outside each other's window")
	}
}

func TestACutReachesTheOthersAtOnce(t *testing.T) {
	rdb := client(t, nil)
	s := newStore(t, rdb) // exchanges only when asked to, or poked
	a, b := join(t, s), join(t, s)
	subscribed(t, rdb, b, 1) // one Store: one subscription
	cutHeard(t, a, b, "the other writer did not hear of the cut before its next exchange")
	assert.Equal(t, uint64(1), b.View().Epoch)
}

// A Store's lanes share one subscription: a cut announced on one lane's
// channel pokes that lane's members, not the others', and lanes joining
// and leaving do not lose the channels of those that stay.
func TestACutPokesOnlyItsLaneThroughTheStoresOneSubscription(t *testing.T) {
	rdb := client(t, nil)
	s := newStore(t, rdb) // exchanges only when asked to, or poked
	other := share.Lane{Host: lane.Host, Namespace: "other"}
	joinLane := func(l share.Lane) *member {
		m := s.Join(context.Background(), l).(*member)
		t.Cleanup(func() { _ = m.Leave(context.Background()) })
		return m
	}
	gone := joinLane(share.Lane{Host: lane.Host, Namespace: "gone"})
	a, b, c := join(t, s), join(t, s), joinLane(other)
	require.NoError(t, gone.Leave(context.Background()))
	subscribed(t, rdb, a, 1)
	subscribed(t, rdb, c, 1)
	require.Eventually(t, func() bool {
		n, err := rdb.PubSubNumSub(context.Background(), gone.channel()).Result()
		return err == nil && n[gone.channel()] == 0
	}, time.Second, time.Millisecond, "a lane left leaves its channel")

	before := s.Stats().Exchanges
	cutHeard(t, a, b, "the cut did not reach its lane's other writer")
	time.Sleep(20 * time.Millisecond) // c's exchange, were it poked
	assert.Equal(t, before+3, s.Stats().Exchanges, "the cut, and the exchanges it poked: a's and b's, not c's")
}

// A quiet writer (it asks for nothing and had nothing accepted: a Writer
// waiting for input) exchanges every quarter heartbeat, enough to stay
// among the lane's writers, not every interval: a service with many
// namespaces, most of them quiet at a time, would otherwise cost Redis 10
// exchanges a second for each. It exchanges at once when it asks again.
func TestAQuietWriterExchangesLessOften(t *testing.T) {
	t.Run("quiet", func(t *testing.T) {
		s := newStore(t, client(t, nil), WithInterval(time.Millisecond), WithHeartbeat(400*time.Millisecond))
		m := join(t, s)
		m.Demand(0)
		exchange(t, m) // the records accepted so far: none
		before := s.Stats().Exchanges
		time.Sleep(30 * time.Millisecond)
		assert.LessOrEqual(t, s.Stats().Exchanges-before, int64(1), "one exchange per 100 ms, not per ms")
		m.Demand(100)
		require.Eventually(t, func() bool { return s.Stats().Exchanges-before >= 20 }, time.Second, time.Millisecond,
			"asking again: every interval (a quiet pace makes 10 a second)")
	})
	t.Run("asks again", func(t *testing.T) {
		s := newStore(t, client(t, nil)) // exchanges only when asked to, or poked
		m := join(t, s)
		m.Demand(0)
		before := s.Stats().Exchanges
		m.Demand(500)
		require.Eventually(t, func() bool { return s.Stats().Exchanges > before }, time.Second, time.Millisecond,
			"a writer asking again exchanges at once")
	})
}

func TestAcceptedAndRetryAfterAreShared(t *testing.T) {
	s := newStore(t, client(t, nil))
	a, b := join(t, s), join(t, s)
	assert.False(t, a.View().Answered)
	a.Accepted(300)
	exchange(t, a)
	b.Accepted(200)
	v := exchange(t, b)
	assert.Equal(t, int64(500), v.Accepted, "records accepted from every writer")
	assert.WithinDuration(t, time.Now(), v.AcceptedSince, time.Second, "counted since the lane began")
	assert.True(t, v.Answered)
	b.Accepted(50)
	v = exchange(t, b)
	assert.Equal(t, int64(550), v.Recent, "since b joined, within the last second")
	assert.Positive(t, v.RecentSpan)
	assert.Less(t, v.RecentSpan, time.Second)

	v, applied, err := a.Cut(context.Background(), share.Cut{Sent: time.Now(), Rate: 400, RetryAfter: time.Minute})
	require.NoError(t, err)
	require.True(t, applied)
	assert.Zero(t, v.Accepted, "counted from the cut")
	assert.Equal(t, v.CutAt, v.AcceptedSince)
	assert.WithinDuration(t, time.Now().Add(time.Minute), v.PausedUntil, time.Second)
	assert.Equal(t, v.PausedUntil.Round(time.Second), exchange(t, b).PausedUntil.Round(time.Second), "the pause is the lane's")
}

func TestBreakerIsShared(t *testing.T) {
	s := newStore(t, client(t, nil))
	a, b := join(t, s), join(t, s)
	v, err := a.Breaker(context.Background(), true)
	require.NoError(t, err)
	opened := v.OpenSince
	require.False(t, opened.IsZero())
	assert.False(t, v.Answered, "an index that never answered")

	v, err = b.Breaker(context.Background(), true)
	require.NoError(t, err)
	assert.WithinDuration(t, opened, v.OpenSince, 5*time.Millisecond, "the outage started with the first breaker that opened")
	assert.WithinDuration(t, opened, exchange(t, a).OpenSince, 5*time.Millisecond)

	v, err = b.Breaker(context.Background(), false)
	require.NoError(t, err)
	assert.True(t, v.OpenSince.IsZero(), "the first writer the index answers ends the outage for all")
	assert.True(t, v.Answered)
	assert.True(t, exchange(t, a).OpenSince.IsZero())
}

// The lane's outage lasts while a writer that reported it open is live:
// one that left or died takes only its own part; once none is left, the
// outage ends (the index may have been back for minutes, unseen), raised
// to Redis's clock as a close is, and the index is not marked answered.
func TestAnOutageEndsWhenNoWriterInItIsLeft(t *testing.T) {
	s := newStore(t, client(t, nil), WithHeartbeat(20*time.Millisecond))
	a, b, c := join(t, s), join(t, s), join(t, s)
	ctx := context.Background()
	v, err := a.Breaker(ctx, true)
	require.NoError(t, err)
	opened := v.OpenSince
	require.False(t, opened.IsZero())
	_, err = b.Breaker(ctx, true) // b is in it too
	require.NoError(t, err)
	_, err = b.Breaker(ctx, true) // said twice: marked once
	require.NoError(t, err)

	require.NoError(t, a.Leave(ctx))
	assert.WithinDuration(t, opened, exchange(t, c).OpenSince, 5*time.Millisecond, "b still sees the outage")
	before, err := c.store.rdb.Time(ctx).Result()
	require.NoError(t, err)
	crash(b)
	require.Eventually(t, func() bool { return exchange(t, c).Writers == 1 }, 5*time.Second, time.Millisecond)
	v = c.View()
	assert.True(t, v.OpenSince.IsZero(), "no writer in the outage is left")
	assert.False(t, v.Answered, "an outage nobody saw end says nothing of the index")
	version, err := c.store.rdb.HGet(ctx, c.keys[0], "version").Int64()
	require.NoError(t, err)
	assert.GreaterOrEqual(t, version, before.UnixMicro(), "the end is dated by Redis's clock")

	// A writer that leaves the outage's last takes it with it, and one
	// that was never in it keeps none.
	d := join(t, s)
	_, err = c.Breaker(ctx, true)
	require.NoError(t, err)
	require.NoError(t, c.Leave(ctx))
	assert.True(t, exchange(t, d).OpenSince.IsZero(), "the last writer in the outage left")
}

// outageLua: settle keeps in open_by the entries "<id>@<ms>" of live
// writers dated within the lapse (share.OutageLapse), and ends the outage
// when none is left. A bare id (the entry of a version before the dates)
// is kept while its writer lives, as that version keeps it: during a
// rolling deploy each version dropping the other's marks ended every
// outage within an exchange (found by the regression review).
func TestSettleKeepsTheOutageOfTheLiveWritersThatReportedItWithinTheLapse(t *testing.T) {
	lapse := share.OutageLapse.Milliseconds()
	for _, tc := range []struct {
		name   string
		openBy func(a, b string, now int64) string
		want   func(a, b string, now int64) string // "" when the outage ended
	}{
		{"a live writer's report within the lapse", func(a, _ string, now int64) string { return mark(a, now-lapse+5000) },
			func(a, _ string, now int64) string { return mark(a, now-lapse+5000) }},
		{"a live writer's report older than the lapse", func(a, _ string, now int64) string { return mark(a, now-lapse-1000) },
			func(string, string, int64) string { return "" }},
		{"a fresh report of a writer gone", func(_, _ string, now int64) string { return mark("gone", now) },
			func(string, string, int64) string { return "" }},
		{"a live writer's undated entry", func(a, _ string, _ int64) string { return a },
			func(a, _ string, _ int64) string { return a }},
		{"a gone writer's undated entry", func(_, _ string, _ int64) string { return "gone" },
			func(string, string, int64) string { return "" }},
		{"a live writer's undated entry and a stale report", func(a, b string, now int64) string { return a + " " + mark(b, now-lapse-1000) },
			func(a, _ string, _ int64) string { return a }},
		{"a live writer's report within the lapse and its bare twin", func(a, _ string, now int64) string { return mark(a, now-1000) + " " + a },
			func(a, _ string, now int64) string { return mark(a, now-1000) + " " + a }},
		{"a live writer's report older than the lapse and its bare twin", func(a, _ string, now int64) string { return mark(a, now-lapse-1000) + " " + a },
			func(string, string, int64) string { return "" }},
		{"a stale report and a fresh one", func(a, b string, now int64) string { return mark(a, now-lapse-1000) + " " + mark(b, now-1000) },
			func(_, b string, now int64) string { return mark(b, now-1000) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rdb := client(t, nil)
			s := newStore(t, rdb)
			a, b := join(t, s), join(t, s)
			ctx := context.Background()
			_, err := a.Breaker(ctx, true)
			require.NoError(t, err)
			now, err := rdb.Time(ctx).Result()
			require.NoError(t, err)
			require.NoError(t, rdb.HSet(ctx, a.keys[0], "open_by", tc.openBy(a.id, b.id, now.UnixMilli())).Err())

			v := exchange(t, b)
			openBy, err := rdb.HGet(ctx, a.keys[0], "open_by").Result()
			if want := tc.want(a.id, b.id, now.UnixMilli()); want == "" {
				assert.ErrorIs(t, err, redis.Nil, "open_by left: %q", openBy)
				assert.True(t, v.OpenSince.IsZero(), "no writer still in the outage: it ended")
			} else {
				require.NoError(t, err)
				assert.Equal(t, want, openBy)
				assert.False(t, v.OpenSince.IsZero())
			}
			assert.Equal(t, 2, v.Writers)
		})
	}
}

// InOutage marks its writer in the lane's outage it names, and in no
// other: an outage that ended since the writer's last view (another
// writer's answer closed it) is not opened again by its failure, nor is it
// marked in an outage that replaced it (found by the regression review: a
// renewal sent as a Breaker(true) opened a new outage on one writer's
// word, pausing every other writer of the lane). A bare id written by the
// version before the dates is dated by its writer's report.
func TestInOutageMarksAWriterOnlyInTheOutageItNames(t *testing.T) {
	for _, tc := range []struct {
		name   string
		before func(t *testing.T, opener, other *member) // what happens in the store after b's view
		marked bool                                      // b is marked; else the outage is as before
	}{
		{"the same outage", func(*testing.T, *member, *member) {}, true},
		{"the same outage, b's bare id of a version before", func(t *testing.T, opener, other *member) {
			ctx := context.Background()
			require.NoError(t, opener.store.rdb.HSet(ctx, opener.keys[0], "open_by", mark(opener.id, 1)+" "+other.id).Err())
		}, true},
		{"closed by an answer", func(t *testing.T, opener, _ *member) {
			_, err := opener.Breaker(context.Background(), false)
			require.NoError(t, err)
		}, false},
		{"closed and opened again", func(t *testing.T, opener, _ *member) {
			ctx := context.Background()
			_, err := opener.Breaker(ctx, false)
			require.NoError(t, err)
			time.Sleep(2 * time.Millisecond) // a later open_since, on Redis's clock
			_, err = opener.Breaker(ctx, true)
			require.NoError(t, err)
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rdb := client(t, nil)
			s := newStore(t, rdb)
			a, b := join(t, s), join(t, s)
			ctx := context.Background()
			_, err := a.Breaker(ctx, true)
			require.NoError(t, err)
			heard := exchange(t, b).OpenSince
			require.False(t, heard.IsZero())
			tc.before(t, a, b)
			before, err := rdb.HMGet(ctx, a.keys[0], "open_since", "open_by").Result()
			require.NoError(t, err)

			_, err = b.InOutage(ctx, heard)
			require.NoError(t, err)
			after, err := rdb.HMGet(ctx, a.keys[0], "open_since", "open_by").Result()
			require.NoError(t, err)
			if !tc.marked {
				assert.Equal(t, before, after, "b's failure is not the lane's outage's any more")
				return
			}
			assert.Equal(t, before[0], after[0], "the same outage")
			var dated, bare int
			for _, e := range strings.Fields(after[1].(string)) {
				if regexp.MustCompile(`^` + regexp.QuoteMeta(b.id) + `@\d+$`).MatchString(e) {
					dated++
				}
				if e == b.id {
					bare++
				}
			}
			assert.Equal(t, 1, dated, "b marked, dated: %q", after[1])
			assert.Equal(t, 1, bare, "b's bare twin, once (a bare id of a version before replaced): %q", after[1])
		})
	}
}

// An outage whose writers a version before the dates marked (bare ids)
// outlives a writer of this version's exchange while they live: each
// version dropping the other's marks ended every outage within an
// exchange during a rolling deploy (found by the regression review).
func TestAnOutageMarkedByAVersionBeforeTheDatesOutlivesANewWritersExchange(t *testing.T) {
	rdb := client(t, nil)
	s := newStore(t, rdb)
	old, b := join(t, s), join(t, s)
	ctx := context.Background()
	_, err := old.Breaker(ctx, true)
	require.NoError(t, err)
	opened, err := rdb.HGet(ctx, old.keys[0], "open_since").Result()
	require.NoError(t, err)
	require.NoError(t, rdb.HSet(ctx, old.keys[0], "open_by", old.id).Err()) // as that version wrote it

	exchange(t, old)
	v := exchange(t, b)
	assert.Equal(t, 2, v.Writers)
	assert.False(t, v.OpenSince.IsZero())
	still, err := rdb.HGet(ctx, old.keys[0], "open_since").Result()
	require.NoError(t, err)
	assert.Equal(t, opened, still)
}

// mark is the entry of writer id in open_by, dated ms (Redis's clock).
func mark(id string, ms int64) string { return fmt.Sprintf("%s@%d", id, ms) }

// A writer in the lane's outage that goes idle (nothing to send: no probe,
// no failure) keeps it only for the lapse after its latest report, though
// it stays live: the outage ends, and a writer that joins later counts its
// own from its own breaker, not from a start that nobody fails in any
// more (its first failed probe gave up at once on an outage minutes old,
// rule 25i). The outage and its start were kept for as long as the idle
// writer lived. Its next report opens a new outage, dated then.
func TestAnIdleWritersOutageEndsAfterTheLapseThoughItLives(t *testing.T) {
	const lapse = 150 * time.Millisecond
	s := newStore(t, client(t, nil), withLapse(lapse))
	a, b := join(t, s), join(t, s)
	ctx := context.Background()
	reported := time.Now()
	v, err := a.Breaker(ctx, true)
	require.NoError(t, err)
	opened := v.OpenSince
	require.False(t, opened.IsZero())

	require.Eventually(t, func() bool {
		exchange(t, a) // a stays live, and idle
		return exchange(t, b).OpenSince.IsZero()
	}, 3*time.Second, 2*time.Millisecond, "the idle writer's outage outlived the lapse")
	assert.GreaterOrEqual(t, time.Since(reported), lapse-2*time.Millisecond, "ended before the lapse") // Redis dates in whole ms
	v = exchange(t, b)
	assert.Equal(t, 2, v.Writers, "the idle writer is live")
	assert.False(t, v.Answered, "an outage nobody saw end says nothing of the index")

	v, err = a.Breaker(ctx, true) // it fails again
	require.NoError(t, err)
	assert.True(t, v.OpenSince.After(opened), "its report opened a new outage, dated now")
	assert.Equal(t, v.OpenSince, exchange(t, a).OpenSince)
}

// A writer still failing in the lane's outage renews its report (each "1"
// of a writer already named dates its entry anew), and keeps the outage
// past the lapse, with its start, for as long as it renews; it ends a
// lapse after its last renewal.
func TestAWriterRenewingItsReportKeepsTheOutagePastTheLapse(t *testing.T) {
	const lapse = 150 * time.Millisecond
	rdb := client(t, nil)
	s := newStore(t, rdb, withLapse(lapse))
	a, b := join(t, s), join(t, s)
	ctx := context.Background()
	_, err := a.Breaker(ctx, true)
	require.NoError(t, err)
	opened := exchange(t, b).OpenSince
	require.False(t, opened.IsZero())

	var renewed time.Time
	for start := time.Now(); time.Since(start) < 4*lapse; time.Sleep(5 * time.Millisecond) {
		renewed = time.Now()
		_, err = a.Breaker(ctx, true) // renewed every few ms: well within the lapse
		require.NoError(t, err)
		exchange(t, a)
		require.True(t, opened.Equal(exchange(t, b).OpenSince), "the outage of a writer still failing in it ended")
	}
	openBy, err := rdb.HGet(ctx, a.keys[0], "open_by").Result()
	require.NoError(t, err)
	assert.Equal(t, []string{a.id}, slices.DeleteFunc(strings.Fields(openBy), func(e string) bool { return strings.Contains(e, "@") }),
		"one bare twin per writer: %q", openBy)
	assert.Len(t, strings.Fields(openBy), 2, "one dated entry per writer, and its twin: %q", openBy)

	require.Eventually(t, func() bool { exchange(t, a); return exchange(t, b).OpenSince.IsZero() },
		3*time.Second, 2*time.Millisecond, "the outage outlived its writer's last renewal by more than the lapse")
	assert.GreaterOrEqual(t, time.Since(renewed), lapse-2*time.Millisecond, "ended within the lapse of the last renewal")
}

// outageLua: "A state without open_by while open_since is set (rebuilt
// from a writer's seed, or written by a version that did not mark) keeps
// its outage until a close". Redis is flushed while writer a is in the
// lane's outage: a's next exchange rebuilds the state from its view, the
// outage with it, and open_by is gone (a does not report itself again: its
// lane has already reported its breaker open). Writer c then hears the
// outage, reports itself at its first failure in it (joinsSharedOutage),
// and leaves. breakerScript began an open_by of c alone, so settle found
// none left and ended the outage, though a was live and in it (its breaker
// open, failing), and the writers disagreed: a new writer counted a fresh
// outage while a gave up on its own start. Likewise an outage opened by a
// writer of the version before (no open_by) ended at the leave of the
// first new writer that joined it. breakerScript now marks a writer only
// in an outage that has open_by (or that its report opens).
func TestARebuiltOutageOutlivesTheLeaveOfAWriterThatJoinedItAfterTheRebuild(t *testing.T) {
	rdb := client(t, nil) // the tests do not run in parallel: the flush spares theirs
	s := newStore(t, rdb)
	ctx := context.Background()
	a := join(t, s)
	_, err := a.Breaker(ctx, true)
	require.NoError(t, err)
	opened := a.View().OpenSince

	require.NoError(t, rdb.FlushAll(ctx).Err())
	v := exchange(t, a) // rebuilt from a's view
	require.WithinDuration(t, opened, v.OpenSince, 5*time.Millisecond, "the rebuilt state keeps the outage")

	c := join(t, s)
	_, err = c.Breaker(ctx, true) // c's first failure in the outage it heard
	require.NoError(t, err)
	require.NoError(t, c.Leave(ctx))
	assert.WithinDuration(t, opened, exchange(t, a).OpenSince, 5*time.Millisecond,
		"a, live and in the outage, still sees it: it is kept until a close")
}

// A member's view gives one outage one OpenSince, not one mapped anew
// through each round trip's middle: a writer tells an outage that replaced
// the one it reported itself in by its OpenSince (the core's
// lane.markedIn), and would report itself again at every failure.
func TestAnOutageKeepsItsOpenSinceAcrossExchanges(t *testing.T) {
	s := newStore(t, client(t, nil))
	a, b := join(t, s), join(t, s)
	v, err := a.Breaker(context.Background(), true)
	require.NoError(t, err)
	require.False(t, v.OpenSince.IsZero())
	for range 5 {
		assert.True(t, v.OpenSince.Equal(exchange(t, a).OpenSince))
	}
	first := exchange(t, b).OpenSince
	for range 5 {
		assert.True(t, first.Equal(exchange(t, b).OpenSince))
	}
}

func TestEveryKeyExpires(t *testing.T) {
	rdb := client(t, nil)
	s := newStore(t, rdb, WithTTL(30*time.Second))
	a, b := join(t, s), join(t, s)
	_, _, err := a.Cut(context.Background(), share.Cut{Sent: time.Now(), Rate: 100})
	require.NoError(t, err)
	_, err = b.Breaker(context.Background(), true)
	require.NoError(t, err)
	ks := keys(t, rdb, t.Name())
	require.Len(t, ks, 2, "a lane has two keys, whatever was written: %v", ks)
	for _, k := range ks {
		ttl, err := rdb.PTTL(context.Background(), k).Result()
		require.NoError(t, err)
		assert.Greater(t, ttl, time.Duration(0), "%s has no TTL", k)
		assert.LessOrEqual(t, ttl, 30*time.Second, k)
	}

	require.NoError(t, a.Leave(context.Background()))
	assert.Len(t, keys(t, rdb, t.Name()), 2, "a lane with writers left keeps its state")
	require.NoError(t, b.Leave(context.Background()))
	assert.Empty(t, keys(t, rdb, t.Name()), "the last writer out drops the lane's state")
}

func TestADeadWritersHeartbeatExpires(t *testing.T) {
	rdb := client(t, nil)
	s := newStore(t, rdb, WithHeartbeat(20*time.Millisecond))
	a, b := join(t, s), join(t, s)
	assert.Equal(t, 2, exchange(t, a).Writers)
	crash(b)
	require.Eventually(t, func() bool { return exchange(t, a).Writers == 1 }, 5*time.Second, time.Millisecond,
		"a writer that stopped exchanging still counts")
	state, writers := laneKeys(t.Name()+":", lane.Host, lane.Namespace)
	n, err := rdb.HLen(context.Background(), writers).Result()
	require.NoError(t, err)
	assert.Equal(t, int64(1), n, "the dead writer's entry is purged")
	require.NoError(t, a.Leave(context.Background()))
	assert.Zero(t, rdb.Exists(context.Background(), state, writers).Val(), "the last live writer out drops the lane, dead ones aside")
}

// TestAnOlderAnswerIsDropped: an answer older than the view (a sync that
// Redis ran before a cut, answered after it) does not take the view back.
func TestAnOlderAnswerIsDropped(t *testing.T) {
	s := newStore(t, client(t, nil))
	a := join(t, s)
	joined := a.seed
	_, applied, err := a.Cut(context.Background(), share.Cut{Sent: time.Now(), Rate: 800})
	require.NoError(t, err)
	require.True(t, applied)
	stale := reply{now: time.Now().UnixMilli(), fields: append(append([]string(nil), joined...), "0", "0", "0")}
	a.adopt(stale, time.Now(), true)
	assert.Equal(t, uint64(1), a.View().Epoch, "the cut's answer stands")
	assert.Equal(t, uint64(1), exchange(t, a).Epoch)
}

// TestChangedFiresWhenAnotherWritersDemandMovesTheSplit: another writer's
// demand that falls (its producer slowed down) moves this writer's part
// at the lane's rate, so Changed fires and the core applies the new split
// (it does only then). Demands are records per second: the split
// compared at a total of 1 (every writer 1/N) never saw them move.
func TestChangedFiresWhenAnotherWritersDemandMovesTheSplit(t *testing.T) {
	s := newStore(t, client(t, nil))
	a, b := join(t, s), join(t, s)
	exchange(t, a)
	exchange(t, b)
	require.InDelta(t, 5000, exchange(t, a).Allocation(10000), 1e-9, "two writers that take all they get split the lane")
	changed := a.Changed()

	b.Demand(100) // b's producer slowed down to 100 records a second
	exchange(t, b)
	v := exchange(t, a)
	require.InDelta(t, 9900, v.Allocation(10000), 1e-9, "a's part of the lane is now nearly all of it")
	select {
	case <-changed:
	default:
		t.Fatal("a's part of the lane went from 5000 to 9900 records/s, and Changed did not fire: the lane keeps its old part")
	}
}

// A quiet writer exchanges every max(interval, heartbeat/4), every tick
// when the interval is the longer: a tick handled a hair sooner after it
// fired than the last one was skipped, so the writer exchanged every other
// tick, 2 × 55 ms past its 100 ms heartbeat, and the others dropped it
// from the lane and took it back, again and again.
func TestAQuietWriterStaysAmongTheLanesWriters(t *testing.T) {
	rdb := client(t, nil)
	quietStore := newStore(t, rdb, WithInterval(55*time.Millisecond), WithHeartbeat(100*time.Millisecond))
	q := join(t, quietStore)
	q.Demand(0) // a Writer waiting for input; nothing accepted
	watchStore := newStore(t, rdb, WithInterval(2*time.Millisecond), WithHeartbeat(100*time.Millisecond))
	w := join(t, watchStore)
	require.Eventually(t, func() bool { return w.View().Writers == 2 }, time.Second, time.Millisecond)

	require.Never(t, func() bool { return w.View().Writers < 2 }, 1500*time.Millisecond, time.Millisecond,
		"a quiet writer exchanging every interval (55 ms) never outlives its 100 ms heartbeat")
}

// Shared, the README's form, makes a Store per call: the calls of one
// process still share one subscription, for their client.
func TestSharedPerCallHoldsOneSubscriptionPerProcess(t *testing.T) {
	srv := redistest.Run(t)
	admin := client(t, srv)
	rdb := client(t, srv)
	idx := e2eIndex(t, 100000)
	pc, err := pinecone.NewClient(pinecone.NewClientParams{ApiKey: "test"})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := range 2 {
		conn, err := pc.Index(pinecone.NewIndexConnParams{Host: idx.Host(), Namespace: fmt.Sprint("tenant-", i)})
		require.NoError(t, err)
		t.Cleanup(func() { _ = conn.Close() })
		w, err := upsert.NewWriter(ctx, upsert.WithIndex(conn), Shared(rdb, WithPrefix(t.Name()+":")))
		require.NoError(t, err)
		t.Cleanup(func() { _, _ = w.Close(context.Background()) })
		require.NoError(t, w.Add(ctx, vectors(i*10, 1)[0]))
		require.NoError(t, w.Flush(ctx))
	}
	// Both lanes are joined while their Writers live.
	require.Eventually(t, func() bool {
		chans, err := admin.PubSubChannels(ctx, t.Name()+":*").Result()
		return err == nil && len(chans) == 2
	}, 5*time.Second, time.Millisecond, "both namespaces' channels subscribed")
	_, sub := clients(t, admin)
	assert.Equal(t, 1, sub, "one process, one subscription for its shared namespaces (README)")
}

// New takes any redis.UniversalClient, a Ring too, which refuses a
// subscription without a channel (Join panicked): a Ring's lanes
// subscribe on the shard their channel's hash tag picks, where the cut
// script publishes, and a cut reaches the lane's other writers.
func TestJoinThroughARing(t *testing.T) {
	newRing := func() *redis.Ring {
		ring := redis.NewRing(&redis.RingOptions{
			Addrs:     map[string]string{"only": shared.Socket()},
			NewClient: func(o *redis.Options) *redis.Client { o.Network = "unix"; return redis.NewClient(o) },
		})
		t.Cleanup(func() { _ = ring.Close() })
		return ring
	}
	a, b := join(t, newStore(t, newRing())), join(t, newStore(t, newRing()))
	subscribed(t, client(t, nil), b, 2) // two clients: two subscriptions
	cutHeard(t, a, b, "the cut did not reach the other writer")
}

// A writers entry not of the shape "<expiry ms> <demand>" (written by
// hand, or by another version) is dropped at the next exchange: it made
// the script fail for every writer of the lane, which then went alone for
// as long as the entry lived.
func TestAMalformedWriterEntryIsDropped(t *testing.T) {
	rdb := client(t, nil)
	s := newStore(t, rdb)
	m := join(t, s)
	require.NoError(t, rdb.HSet(context.Background(), m.keys[1], "stranger", "garbage").Err())
	v := exchange(t, m)
	assert.True(t, v.Shared)
	assert.Equal(t, 1, v.Writers)
	ok, err := rdb.HExists(context.Background(), m.keys[1], "stranger").Result()
	require.NoError(t, err)
	assert.False(t, ok)
}

// A nil client is refused where the Store is made, with a message: given
// to a call, it killed the process from a goroutine of the call.
func TestANilClientPanicsInNew(t *testing.T) {
	assert.PanicsWithValue(t, "upsertredis: nil Redis client", func() { New(nil) })
	var c *redis.Client
	assert.PanicsWithValue(t, "upsertredis: nil Redis client", func() { Shared(c) })
	assert.NotPanics(t, func() { New(redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}), nil) }, "a nil option does nothing")
}
