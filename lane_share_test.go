package upsert

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pinecone-io/go-pinecone/v5/pinecone"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/upsertlib/upsert/internal/share"
)

// fakeMember is an in-memory share.Member: the test sets its view and
// what Cut answers, and reads what the lane reported.
type fakeMember struct {
	mu       sync.Mutex
	view     share.View
	changed  chan struct{}
	accepted int
	demand   float64
	cuts     []share.Cut
	refused  int // refusals counted towards the next episode (Cut.Refusals)
	breakers []bool
	inOutage []time.Time // the outages named by InOutage's reports
	left     int
	// cut answers a proposal; nil applies it as a store would.
	cut func(c share.Cut) (share.View, bool, error)
	// breakerHook, when set, runs as a breaker report arrives.
	breakerHook func(open bool)
}

func newFakeMember(v share.View) *fakeMember {
	return &fakeMember{view: v, changed: make(chan struct{}), demand: math.Inf(1)}
}

func (f *fakeMember) View() share.View { f.mu.Lock(); defer f.mu.Unlock(); return f.view }

func (f *fakeMember) Changed() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.changed
}

func (f *fakeMember) set(v share.View) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.view = v
	close(f.changed)
	f.changed = make(chan struct{})
}

func (f *fakeMember) Accepted(n int)           { f.mu.Lock(); f.accepted += n; f.mu.Unlock() }
func (f *fakeMember) Demand(perSecond float64) { f.mu.Lock(); f.demand = perSecond; f.mu.Unlock() }

func (f *fakeMember) Cut(_ context.Context, c share.Cut) (share.View, bool, error) {
	f.mu.Lock()
	f.cuts = append(f.cuts, c)
	answer := f.cut
	v := f.view
	f.mu.Unlock()
	if answer != nil {
		return answer(c)
	}
	if c.Refusals > 1 {
		f.mu.Lock()
		f.refused++
		counted := f.refused < c.Refusals
		f.mu.Unlock()
		if counted {
			return v, false, nil
		}
	}
	f.mu.Lock()
	f.refused = 0
	f.mu.Unlock()
	v.Epoch++
	v.Rate, v.Level, v.Recovery, v.CutAt = c.Rate, c.Level, c.Recovery, time.Now()
	return v, true, nil
}

func (f *fakeMember) Breaker(_ context.Context, open bool) (share.View, error) {
	if f.breakerHook != nil {
		f.breakerHook(open)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.breakers = append(f.breakers, open)
	return f.view, nil
}

// InOutage counts as a report of an open breaker (breakerReports and
// breakerHook), and records the outage it names (inOutage).
func (f *fakeMember) InOutage(_ context.Context, since time.Time) (share.View, error) {
	if f.breakerHook != nil {
		f.breakerHook(true)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.breakers = append(f.breakers, true)
	f.inOutage = append(f.inOutage, since)
	return f.view, nil
}

func (f *fakeMember) Leave(context.Context) error { f.mu.Lock(); f.left++; f.mu.Unlock(); return nil }

func (f *fakeMember) proposals() []share.Cut { f.mu.Lock(); defer f.mu.Unlock(); return f.cuts }

// cutsProposed are the proposals of cuts the writer made, without the
// refusals it counted towards the lane's episode.
func (f *fakeMember) cutsProposed() []share.Cut {
	var out []share.Cut
	for _, c := range f.proposals() {
		if c.Refusals <= 1 {
			out = append(out, c)
		}
	}
	return out
}

type fakeStore struct{ m *fakeMember }

func (s fakeStore) Join(context.Context, share.Lane) share.Member { return s.m }

// sharedLane returns a lane on a fake clock that starts from the index's
// serverless limits and is a member through m, without the watcher: the
// test applies views with apply.
func sharedLane(t *testing.T, m *fakeMember) (*lane, *fakeClock, *shareCounters) {
	clk := newFakeClock()
	ln := newLane(clk, MaxBatchSize, &defaultTuning)
	ln.setLimits(ServerlessLimits)
	return ln, clk, shareThrough(ln, m)
}

// shareThrough makes ln a member of its lane through m, as joinShare does,
// and returns its counters.
func shareThrough(ln *lane, m *fakeMember) *shareCounters {
	stats := new(shareCounters)
	ln.mu.Lock()
	ln.share.m, ln.share.stats, ln.share.shared, ln.share.users = m, stats, true, 1
	ln.applyView(m.View())
	ln.mu.Unlock()
	ln.flushShare()
	return stats
}

// apply sets m's view and makes ln take it, as its watcher does.
func apply(ln *lane, m *fakeMember, v share.View) {
	m.set(v)
	ln.mu.Lock()
	ln.applyView(v)
	ln.mu.Unlock()
	ln.flushShare()
}

// refuse sends n requests of one record through ln, all refused with 429s.
func refuse(t *testing.T, ln *lane, n int) {
	for range n {
		p, err := ln.acquire(context.Background(), req(1))
		require.NoError(t, err)
		ln.release(p, errRateLimited)
	}
}

func limits(ln *lane) (records, requests, bytes float64) {
	ln.mu.Lock()
	defer ln.mu.Unlock()
	return ln.dims[dimRecords].ctl.limit, ln.dims[dimRequests].ctl.limit, ln.dims[dimBytes].ctl.limit
}

func capped(now time.Time, epoch uint64, rate, level float64, writers int) share.View {
	others := make([]float64, writers-1)
	for i := range others {
		others[i] = math.Inf(1)
	}
	return share.View{Shared: true, Epoch: epoch, Rate: rate, Level: level, Recovery: 2 * time.Second, CutAt: now}.
		WithDemands(math.Inf(1), others)
}

func TestSharedLaneTakesItsPart(t *testing.T) {
	start := newFakeClock().Now()
	for _, tc := range []struct {
		name              string
		view              share.View
		records, requests float64 // the lane's limits after joining
	}{{
		name:     "alone in an uncapped lane",
		view:     share.View{Shared: true, Rate: math.Inf(1)}.WithDemands(math.Inf(1), nil),
		records:  math.Inf(1),
		requests: 110,
	}, {
		name:     "four writers before the first cut: the request cap is split",
		view:     capped(start, 0, math.Inf(1), 0, 4),
		records:  math.Inf(1),
		requests: 110.0 / 4,
	}, {
		name:     "a capped lane of four: a quarter of the curve, without slow start",
		view:     capped(start, 3, 16000, 20000, 4),
		records:  16000.0 / 4,
		requests: 110.0 / 4,
	}, {
		name:     "a slow writer among three asks for 1000: the others split the rest",
		view:     share.View{Shared: true, Epoch: 1, Rate: 9000, Level: 9000, Recovery: time.Second, CutAt: start}.WithDemands(math.Inf(1), []float64{1000, math.Inf(1)}),
		records:  4000,
		requests: 110.0 * 4000 / 9000,
	}, {
		name:     "Redis down at the join: alone, with everything",
		view:     share.View{Rate: math.Inf(1)},
		records:  math.Inf(1),
		requests: 110,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			ln, _, _ := sharedLane(t, newFakeMember(tc.view))
			records, requests, _ := limits(ln)
			assert.InDelta(t, tc.records, records, 1e-6*tc.records+1e-9)
			assert.InDelta(t, tc.requests, requests, 1e-6*tc.requests)
		})
	}
}

func TestSharedLaneAdoptsTheRateThe429Named(t *testing.T) {
	now := newFakeClock().Now()
	for _, tc := range []struct {
		unit share.Unit
		dim  int
	}{{share.UnitRecords, dimRecords}, {share.UnitRequests, dimRequests}, {share.UnitBytes, dimBytes}} {
		v := capped(now, 1, 8e6, 1e7, 2)
		v.Unit = tc.unit
		ln, _, _ := sharedLane(t, newFakeMember(v))
		ln.mu.Lock()
		got := ln.dims[tc.dim].ctl.limit
		ln.mu.Unlock()
		assert.InDelta(t, 4e6, got, 1, "unit %d: half of the lane's cut, in its dimension", tc.unit)
	}
}

func TestSharedLaneRescalesWhenWritersChange(t *testing.T) {
	start := newFakeClock().Now()
	m := newFakeMember(capped(start, 1, 20000, 20000, 4))
	ln, _, _ := sharedLane(t, m)
	records, requests, bytes := limits(ln)
	assert.InDelta(t, 5000, records, 1e-6)
	apply(ln, m, capped(start, 1, 20000, 20000, 2)) // two left
	r2, q2, b2 := limits(ln)
	assert.InDelta(t, 2*records, r2, 1e-6, "the survivors take up the leavers' part")
	assert.InDelta(t, 2*requests, q2, 1e-6, "and of the request cap")
	assert.InDelta(t, 2*bytes, b2, 1e-3, "and of the byte cap")
}

func TestSharedLaneProposesItsCutsOnce(t *testing.T) {
	m := newFakeMember(capped(newFakeClock().Now(), 0, math.Inf(1), 0, 2))
	ln, clk, _ := sharedLane(t, m)
	refuse(t, ln, 2) // two 429s: the first episode
	cuts := m.cutsProposed()
	require.Len(t, cuts, 1, "the local episode rules decide, then the lane proposes")
	records, _, _ := limits(ln)
	assert.InDelta(t, records*2, cuts[0].Rate, 1e-6, "in the lane's terms: this writer's half over one half")
	assert.Equal(t, uint64(0), cuts[0].Seen)
	assert.Zero(t, cuts[0].Recovery, "a first cut searches up")

	// Another writer's cut arrives: requests admitted before it belong
	// to its episode and propose nothing.
	p, err := ln.acquire(context.Background(), req(1))
	require.NoError(t, err)
	apply(ln, m, capped(clk.Now(), 5, 6000, 8000, 2))
	records, _, _ = limits(ln)
	assert.InDelta(t, 3000, records, 100, "the lane's cut adopted: its half of the curve")
	ln.release(p, errRateLimited)
	refuse(t, ln, 1)
	assert.Len(t, m.cutsProposed(), 1, "429s of the episode already cut propose nothing")
	assert.Equal(t, uint64(5), ln.share.epoch)
}

func TestSharedLaneCountsItsNoiseTowardsTheLanesEpisode(t *testing.T) {
	m := newFakeMember(capped(newFakeClock().Now(), 1, 6000, 8000, 4))
	ln, clk, _ := sharedLane(t, m)
	clk.Advance(2 * time.Second) // past the cut's drain
	m.refused = 1                // another writer's refusal, counted already
	before, _, _ := limits(ln)
	refuse(t, ln, 1) // its own rules call one refusal while climbing noise
	cuts := m.proposals()
	require.Len(t, cuts, 1, "counted towards the lane's episode")
	assert.Equal(t, 3, cuts[0].Refusals, "three while climbing back, as its own rules count")
	assert.Positive(t, cuts[0].Window)
	assert.Equal(t, uint64(1), cuts[0].Seen)
	records, _, _ := limits(ln)
	assert.Equal(t, before, records, "counted, not cut: the writer's curve goes on")
	assert.Equal(t, uint64(1), ln.share.epoch)

	refuse(t, ln, 1) // two of its own, still noise to it, but the lane's third
	assert.Len(t, m.proposals(), 2)
	assert.Equal(t, uint64(2), ln.share.epoch, "the lane's count complete: its cut adopted")
}

func TestSharedLaneMeasuresInTheLanesTerms(t *testing.T) {
	for _, tc := range []struct {
		name     string
		own      float64       // records this writer got accepted, now
		search   bool          // the writer's last cut was a halving
		searched bool          // the writer's rate searched up before its last cut
		since    time.Duration // since the lane's last cut (6000 a second accepted); 0 for a second
		recent   float64       // what the lane got accepted a second over the last second
	}{
		{name: "its measure over its part of what the lane got accepted", own: 1500},
		{name: "nothing of its own accepted: over its fraction, raised to the lane's measure"},
		{name: "a halving: the lane's measure", own: 1500, search: true},
		{name: "a cut after a search: the lane's measure", own: 1500, searched: true},
		{name: "a cut after a search: the lane's measure over the last second, when higher", own: 1500, searched: true, recent: 8000},
		{name: "a halving: the lane's measure over the last second, when higher", own: 1500, search: true, recent: 8000},
		{name: "a cut after a search: not the last second's when lower", own: 1500, searched: true, recent: 5000},
		{name: "a halving the moment after a cut: the lane's measure over the last second", own: 1500, search: true,
			since: 200 * time.Millisecond, recent: 5000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := newFakeClock()
			v := capped(clk.Now(), 1, 4000, 5000, 2)
			since := cmp.Or(tc.since, time.Second)
			v.Accepted, v.AcceptedSince = int64(6000*since.Seconds()), clk.Now().Add(-since)
			v.Recent, v.RecentSpan = int64(tc.recent), time.Second
			ln, _, _ := sharedLane(t, newFakeMember(v))
			ln.mu.Lock()
			c := ln.dims[dimRecords].ctl // as a cut of its own measured it, in its terms
			c.level, c.limit, c.episodes = 2000, 1600, 2
			if tc.search {
				c.search.pace = defaultTuning.minWindow
			}
			ln.dims[dimRecords].ctl.taken.add(clk.Now(), tc.own)
			part := ln.dims[dimRecords].ctl.taken.rateOver(clk.Now(), time.Second) / 6000
			got := ln.proposal(permit{epoch: 1}, errRateLimited, dimRecords, &c, tc.searched)
			ln.mu.Unlock()
			lane := 6000.0
			if since < defaultTuning.shareMeasureFor {
				lane = 0 // too short a span to measure by
			}
			want := max(lane, tc.recent)
			if tc.own > 0 && !tc.search && !tc.searched {
				want = 2000 / part
				require.Greater(t, want, 6000.0)
			}
			assert.InDelta(t, want, got.Level, 1e-6)
			depth := 1 - c.limit/c.level // the writer's own cut's
			if tc.search || tc.searched {
				depth = defaultTuning.cutDepth // a cut of the lane's measure
			}
			assert.InDelta(t, want*(1-depth), got.Rate, 1e-6, "the cut's depth kept")
		})
	}
}

func TestSharedLanesFirstCutKeepsWhatTheLaneAccepted(t *testing.T) {
	for _, tc := range []struct {
		name      string
		since     time.Duration // how long ago the lane started
		accepted  int64         // records the lane's writers got accepted since
		own       float64       // this writer's first cut, in its terms (a quarter of the lane)
		wantLevel float64
	}{
		{name: "a writer that started last: the lane's, over a second", since: 500 * time.Millisecond, accepted: 9000, own: 500, wantLevel: 9000},
		{name: "over the lane's life when longer", since: 2 * time.Second, accepted: 16000, own: 500, wantLevel: 8000},
		{name: "its own when higher", since: 2 * time.Second, accepted: 16000, own: 3000, wantLevel: 12000},
		{name: "a young lane: half of what it sent, when more", since: 400 * time.Millisecond, accepted: 9000, own: 500, wantLevel: 11250},
		{name: "half of what it sent over at least minWindow", since: 100 * time.Millisecond, accepted: 3000, own: 500, wantLevel: 5000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := newFakeClock()
			v := capped(clk.Now(), 0, math.Inf(1), 0, 4)
			v.Accepted, v.AcceptedSince = tc.accepted, clk.Now().Add(-tc.since)
			ln, _, _ := sharedLane(t, newFakeMember(v))
			ln.mu.Lock()
			defer ln.mu.Unlock()
			require.InDelta(t, 0.25, ln.share.frac, 1e-9)
			c := ln.dims[dimRecords].ctl
			c.level, c.limit, c.search.pace, c.episodes = tc.own, tc.own, defaultTuning.firstSearchFor, 1 // rateFirstCut's search
			got := ln.proposal(permit{}, errRateLimited, dimRecords, &c, false)
			assert.InDelta(t, tc.wantLevel, got.Level, 1e-6)
			assert.InDelta(t, tc.wantLevel, got.Rate, 1e-6, "a floor to search up from")
			assert.Zero(t, got.Recovery, "a search")
		})
	}
}

func TestSharedLaneHoldsItsSearchesAndItsBatches(t *testing.T) {
	for _, tc := range []struct {
		name   string
		recent int64         // records the lane got accepted over recentSpan
		span   time.Duration // View.RecentSpan
		sent   int           // records the writer sent just now
		taken  int           // records of them the index accepted
		want   func(sent, taken float64) float64
	}{
		{name: "within twice what the writer sends", sent: 300, want: func(sent, _ float64) float64 { return 2 * sent }},
		{name: "or twice its part of what the lane got accepted over the last second, when more",
			recent: 24_000, span: time.Second, sent: 300, want: func(float64, float64) float64 { return 2 * 24_000 / 4 }},
		{name: "the lane's, over too short a span, measures nothing",
			recent: 24_000, span: 100 * time.Millisecond, sent: 300, want: func(sent, _ float64) float64 { return 2 * sent }},
		{name: "a writer ahead of its part is held within twice its part of what the lane sends now",
			recent: 24_000, span: time.Second, sent: 14_000, taken: 12_000,
			want: func(sent, taken float64) float64 { return 2 * sent * (24_000 / taken) / 4 }},
		{name: "a writer behind its part is not held below what it sends",
			recent: 24_000, span: time.Second, sent: 9000, taken: 3000, want: func(sent, _ float64) float64 { return 2 * sent }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := capped(newFakeClock().Now(), 1, 4000, 4000, 4)
			v.Recovery = 0 // the lane searches up from 4000
			v.Recent, v.RecentSpan = tc.recent, tc.span
			ln, clk, _ := sharedLane(t, newFakeMember(v))
			ln.mu.Lock()
			defer ln.mu.Unlock()
			d := &ln.dims[dimRecords]
			require.Positive(t, d.ctl.search.pace)
			d.ctl.limit, d.ctl.level = 500_000, 500_000 // doubled while its tokens bound
			d.ctl.sent.add(clk.Now(), float64(tc.sent))
			d.ctl.taken.add(clk.Now(), float64(tc.taken))
			sent := d.ctl.sent.rateOver(clk.Now(), ln.measureWindow(clk.Now()))
			taken := d.ctl.taken.rateOver(clk.Now(), tc.span)
			ln.seen.size = 900
			ln.reportShare(permit{request: request{n: 1}}, clk.Now(), ln.measureWindow(clk.Now()), 0)
			assert.InDelta(t, tc.want(sent, taken), d.ctl.limit, 1e-6)
			assert.GreaterOrEqual(t, d.bucket.Burst(), 900, "a burst that holds a batch sized by the lane")
		})
	}
}

func TestSharedLaneTakesTheLanesCutOverItsOwn(t *testing.T) {
	now := newFakeClock().Now()
	m := newFakeMember(capped(now, 0, math.Inf(1), 0, 2))
	m.cut = func(share.Cut) (share.View, bool, error) {
		return capped(now, 1, 7000, 9000, 2), false, nil // another writer's proposal came first
	}
	ln, _, _ := sharedLane(t, m)
	refuse(t, ln, 2)
	records, _, _ := limits(ln)
	assert.InDelta(t, 3500, records, 1e-6, "its own cut replaced by its half of the lane's")
	assert.Equal(t, uint64(1), ln.share.epoch)
}

// The store's answer to a proposal can come after the watcher applied a
// later episode's cut: the older answer must not set that cut back.
func TestSharedLaneKeepsALaterCutThanTheAnswerToItsProposal(t *testing.T) {
	now := newFakeClock().Now()
	m := newFakeMember(capped(now, 0, math.Inf(1), 0, 2))
	ln, _, _ := sharedLane(t, m)
	m.cut = func(share.Cut) (share.View, bool, error) {
		apply(ln, m, capped(now, 2, 5000, 6000, 2)) // the watcher, while the proposal is out
		return capped(now, 1, 7000, 9000, 2), true, nil
	}
	ln.mu.Lock()
	ln.queueCut(share.Cut{Sent: now, Unit: share.Unit(dimRecords), Rate: 7000, Level: 9000})
	ln.mu.Unlock()
	ln.flushShare()
	records, _, _ := limits(ln)
	assert.InDelta(t, 2500, records, 1e-6, "its half of the later cut")
	assert.Equal(t, uint64(2), ln.share.epoch)
}

// fallBack makes ln's store answer that it shares no more, as when Redis
// is gone.
func fallBack(ln *lane, m *fakeMember) {
	alone := m.View()
	alone.Shared = false
	apply(ln, m, alone)
}

func TestSharedLaneFallsBackAndRejoins(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cut     bool // the lane cuts itself while alone
		propose bool // its cut is proposed at the rejoin
	}{
		{name: "nothing learnt alone: the lane's view is adopted"},
		{name: "a cut alone below its part is proposed", cut: true, propose: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			now := newFakeClock().Now()
			m := newFakeMember(capped(now, 1, 20000, 20000, 2))
			ln, _, stats := sharedLane(t, m)
			before, _, _ := limits(ln)
			fallBack(ln, m)
			assert.Equal(t, int64(1), stats.fallbacks.Load())
			if tc.cut {
				ln.mu.Lock()
				ln.dims[dimRecords].ctl.limit = before / 4
				ln.share.cutAlone = true
				ln.mu.Unlock()
			}
			refuse(t, ln, 0)
			apply(ln, m, capped(now, 1, 20000, 20000, 2))
			assert.Equal(t, int64(1), stats.rejoins.Load())
			if tc.propose {
				cuts := m.proposals()
				require.Len(t, cuts, 1)
				assert.Equal(t, uint64(1), cuts[0].Seen, "proposed against the view it rejoined")
				assert.InDelta(t, before/4*2, cuts[0].Rate, 1e-6)
			} else {
				assert.Empty(t, m.proposals())
				records, _, _ := limits(ln)
				assert.InDelta(t, before, records, 1e-6)
				ln.mu.Lock()
				assert.Zero(t, ln.dims[dimRecords].ctl.gain, "the lane's curve, not the fast probe of a writer alone")
				ln.mu.Unlock()
			}
		})
	}
}

func TestSharedLaneAloneProbesForTheWholeLane(t *testing.T) {
	now := newFakeClock().Now()
	m := newFakeMember(capped(now, 1, 20000, 20000, 4))
	ln, _, _ := sharedLane(t, m)
	before, requests, _ := limits(ln)
	ln.mu.Lock()
	origin := ln.dims[dimRecords].ctl.origin
	ln.mu.Unlock()
	fallBack(ln, m)
	ln.mu.Lock()
	c, r := ln.dims[dimRecords].ctl, ln.dims[dimRequests].ctl
	ln.mu.Unlock()
	tn := defaultTuning
	assert.InDelta(t, before, c.limit, 1e-6, "from its part")
	assert.InDelta(t, before, c.level, 1e-6, "at its part: the writers it shared with most likely still run")
	assert.Equal(t, origin, c.origin, "on the curve it was on")
	assert.InDelta(t, 20000, c.curve(c.origin.Add(2*tn.recovery), &tn), 1e-6, "the whole lane's level two recoveries past its own")
	assert.Greater(t, c.curve(c.origin.Add(tn.recovery), &tn), before*(1+tn.probeGain), "faster than a probe of its own")
	assert.InDelta(t, 4*requests/(1+tn.priorHeadroom), r.prior, 1e-6, "the namespace's known request limit, whole")
}

func TestRateControlAloneGoesOnFromItsProbe(t *testing.T) {
	tn := defaultTuning
	now := time.Unix(1000, 0)
	c := rateControl{limit: 1100, level: 1000, capacity: 1000, origin: now.Add(-tn.recovery)}
	c.alone(now, 0.25, &tn)
	assert.InDelta(t, 1100, c.curve(now, &tn), 1e-6, "the limit it reached")
	c.cut(rateSample{now: now, window: time.Second}, &tn, 1)
	assert.Zero(t, c.gain, "a cut of its own ends the fast probe")
}

func TestSharedLaneAloneProposesNothing(t *testing.T) {
	m := newFakeMember(share.View{Rate: math.Inf(1)}) // Redis down from the start
	ln, _, stats := sharedLane(t, m)
	assert.Equal(t, int64(1), stats.fallbacks.Load())
	refuse(t, ln, 2)
	assert.Empty(t, m.proposals(), "alone, the lane cuts as without Redis")
	records, _, _ := limits(ln)
	assert.False(t, math.IsInf(records, 1), "and it did cut")
	assert.True(t, ln.share.cutAlone)
}

func TestSharedLaneReportsAcceptedAndDemand(t *testing.T) {
	m := newFakeMember(capped(newFakeClock().Now(), 1, 2000, 2000, 2))
	ln, clk, _ := sharedLane(t, m)
	for range 3 {
		p, err := ln.acquire(context.Background(), req(100))
		require.NoError(t, err)
		clk.Advance(time.Millisecond)
		ln.release(p, nil)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	assert.Equal(t, 300, m.accepted)
	assert.True(t, math.IsInf(m.demand, 1), "its part of 1000/s held 300 records back")
}

// openBreaker fails breakerThreshold requests through ln: its breaker
// opens.
func openBreaker(t *testing.T, ln *lane) {
	t.Helper()
	for range breakerThreshold {
		p, err := ln.acquire(context.Background(), req(1))
		require.NoError(t, err)
		ln.release(p, &Error{Class: ClassServer})
	}
}

func TestSharedLaneBreaker(t *testing.T) {
	m := newFakeMember(capped(newFakeClock().Now(), 0, math.Inf(1), 0, 2))
	ln, clk, _ := sharedLane(t, m)
	openBreaker(t, ln)
	clk.Advance(probeEvery)
	p, err := ln.acquire(context.Background(), req(1))
	require.NoError(t, err)
	require.NotZero(t, p.probe)
	ln.release(p, nil)
	m.mu.Lock()
	assert.Equal(t, []bool{true, false}, m.breakers, "the lane hears of the outage and of its end")
	m.mu.Unlock()

	// An outage another writer's breaker opened a minute ago, after this
	// writer's last answer: this lane pauses, and once its own probe fails
	// too, gives up with the lane's patience, not a fresh one.
	clk.Advance(2 * outagePatience)
	v := m.View()
	v.OpenSince, v.Answered = clk.Now().Add(-outagePatience), true
	apply(ln, m, v)
	require.True(t, breakerOpen(ln))
	clk.Advance(probeEvery)
	p, err = ln.acquire(context.Background(), req(1))
	require.NoError(t, err)
	require.NotZero(t, p.probe)
	ln.release(p, &Error{Class: ClassServer})
	ln.mu.Lock()
	defer ln.mu.Unlock()
	assert.True(t, ln.breaker.open)
	assert.Equal(t, errOutageTooLong, ln.breaker.gaveUp(clk.Now()))
}

// A writer whose breaker the lane's outage opened (heard) tells the store
// it is in it at its first failure in it, once: the store keeps the
// outage while a writer in it is live, and no longer, so that an outage
// whose writers all died is not counted from by one that joins later
// (upsertredis's outageLua). After the lane's outage ended, the next one
// it hears it reports again.
func TestSharedLaneReportsItselfInAnOutageItHeardAtItsFirstFailure(t *testing.T) {
	m := newFakeMember(capped(newFakeClock().Now(), 0, math.Inf(1), 0, 2))
	ln, clk, _ := sharedLane(t, m)
	failProbe := func() { t.Helper(); failProbeOf(t, ln, clk) }
	breakers := m.breakerReports
	v := m.View()
	v.OpenSince, v.Answered = clk.Now(), true
	apply(ln, m, v)
	require.True(t, breakerOpen(ln))
	require.Empty(t, breakers(), "heard of, the outage is not yet this writer's")
	failProbe()
	failProbe()
	assert.Equal(t, []bool{true}, breakers(), "its first failure in the outage, once")

	v.OpenSince = time.Time{} // the lane's outage ended (another writer's answer closed it)
	apply(ln, m, v)
	failProbe()
	assert.Equal(t, []bool{true}, breakers(), "no outage opened again within share.OutageRenewal of its report")
	v.OpenSince = clk.Now() // another writer's next
	apply(ln, m, v)
	failProbe()
	assert.Equal(t, []bool{true, true}, breakers())
}

// The store keeps the lane's outage while a writer that reported itself
// in it is live, and a close clears the writers marked in it (open_by).
// When the lane's outage closes (another writer's request was answered)
// and a third writer's breaker opens the next one before this writer
// exchanged (an index that flaps: one view shows outage T1, the next
// outage T2), this writer, its breaker open all along, reports itself in
// T2 at its first failure in it: it was marked in T1 only (the lane held
// markedIn as a flag, so the store ended T2 when the writer that opened
// it left, though this writer was live and failing in it).
func TestSharedLaneReportsItselfInANewOutageItHeardWithoutAGap(t *testing.T) {
	m := newFakeMember(capped(newFakeClock().Now(), 0, math.Inf(1), 0, 3))
	ln, clk, _ := sharedLane(t, m)
	failProbe := func() { t.Helper(); failProbeOf(t, ln, clk) }
	breakers := m.breakerReports
	v := m.View()
	v.OpenSince, v.Answered = clk.Now(), true
	apply(ln, m, v)
	failProbe()
	require.Equal(t, []bool{true}, breakers(), "in the first outage")

	clk.Advance(time.Second)
	v.OpenSince = clk.Now() // closed by another writer's answer, reopened by a third's breaker
	apply(ln, m, v)
	failProbe()
	assert.Equal(t, []bool{true, true}, breakers(), "its first failure in the lane's new outage: it is in it")
	failProbe()
	assert.Equal(t, []bool{true, true}, breakers(), "once")
}

// A writer failing in the lane's outage it reported itself in renews its
// report (the store drops a writer's mark share.OutageLapse after its
// latest report, so that an idle writer does not keep the outage and its
// start alive for as long as it lives), at most once per
// share.OutageRenewal however often it fails (a failure every 100 ms for
// the outage's first 5 s, then at each probe up to 5 s apart), and in time
// for the lapse. Without renewals it reported itself twice in 3 minutes:
// at its breaker's opening and in the outage the next view named.
func TestSharedLaneRenewsItsReportInTheOutageAtMostOncePerRenewal(t *testing.T) {
	m := newFakeMember(capped(newFakeClock().Now(), 0, math.Inf(1), 0, 2))
	ln, clk, _ := sharedLane(t, m)
	var reports []time.Time
	m.breakerHook = func(open bool) {
		if open {
			reports = append(reports, clk.Now()) // the test's goroutine flushes: no race
		}
	}
	openBreaker(t, ln)
	v := m.View()
	v.OpenSince, v.Answered = clk.Now(), true
	apply(ln, m, v) // the store dates the outage it opened
	start := clk.Now()
	failProbesUntil(t, clk, []*lane{ln}, start.Add(3*time.Minute))

	require.GreaterOrEqual(t, len(reports), 2, "at the opening, and in the outage the view named")
	assert.LessOrEqual(t, reports[1].Sub(start), probeEvery, "in the outage the view named, at its first failure")
	renewals := reports[2:]
	n := int(3 * time.Minute / share.OutageRenewal)
	assert.True(t, len(renewals) == n-1 || len(renewals) == n, "%d renewals over 3 minutes: one per share.OutageRenewal", len(renewals))
	last := reports[1]
	for _, at := range renewals {
		assert.GreaterOrEqual(t, at.Sub(last), share.OutageRenewal, "renewed before share.OutageRenewal")
		assert.LessOrEqual(t, at.Sub(last), share.OutageRenewal+probeMax, "renewed later than its next failure due")
		last = at
	}
}

// A writer whose breaker its own failures opened does not open the lane's
// outage again once the lane holds none, however old its last report: its
// failures then are one writer's word against the index's answer to
// another (a writer whose own path to the index is broken would pause
// every writer of the lane at each renewal), or come after an idle spell
// the store ended its outage in. It renews its report only in the outage
// it marked itself in (TestSharedLaneRenewsItsReportInTheOutageAtMostOncePerRenewal);
// the others open their own breakers on their own failures.
func TestSharedLaneDoesNotReopenALaneOutageThatEndedWhileItFails(t *testing.T) {
	for _, tc := range []struct {
		name  string
		after time.Duration // from the report to the end of the lane's outage and the failure
	}{
		{"ended under it while it sat idle", share.OutageLapse + time.Minute},
		{"closed by another writer's answer moments after its report", time.Second},
		{"closed by another writer's answer, its report due for renewal", share.OutageRenewal},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newFakeMember(capped(newFakeClock().Now(), 0, math.Inf(1), 0, 2))
			ln, clk, _ := sharedLane(t, m)
			openBreaker(t, ln)
			v := m.View()
			v.OpenSince, v.Answered = clk.Now(), true
			apply(ln, m, v)
			probeWith(t, clk, ln, errServer) // marked in the outage the view named
			require.Equal(t, []bool{true, true}, m.breakerReports())

			clk.Advance(tc.after)
			v.OpenSince = time.Time{} // the store ended the lane's outage
			apply(ln, m, v)
			require.True(t, breakerOpen(ln), "its own failures opened it")
			probeWith(t, clk, ln, errServer)
			assert.Equal(t, []bool{true, true}, m.breakerReports())
		})
	}
}

// A writer's reports in the lane's outage (its first failure in it, its
// renewals) name the outage they are about (share.Member.InOutage), so
// that a store whose outage another writer's answer closed after this
// writer's last view opens none on its word: sent as a Breaker(true), the
// renewal opened a new outage, dated then, pausing every writer of the
// lane (found by the regression review). The store's side is
// upsertredis's TestInOutageMarksAWriterOnlyInTheOutageItNames.
func TestASharedLanesReportsInTheLanesOutageNameIt(t *testing.T) {
	m := newFakeMember(capped(newFakeClock().Now(), 0, math.Inf(1), 0, 2))
	ln, clk, _ := sharedLane(t, m)
	openBreaker(t, ln)
	v := m.View()
	outage := clk.Now()
	v.OpenSince, v.Answered = outage, true
	apply(ln, m, v)
	probeWith(t, clk, ln, errServer) // marked in the outage the view named
	clk.Advance(share.OutageRenewal)
	probeWith(t, clk, ln, errServer) // a renewal, from the same view
	m.mu.Lock()
	defer m.mu.Unlock()
	assert.Equal(t, []bool{true, true, true}, m.breakers, "the opening, the first failure in the outage, the renewal")
	assert.Equal(t, []time.Time{outage, outage}, m.inOutage, "both name the outage the view named")
}

// share.OutageLapse outlasts a failing writer's wait between renewals: a
// renewal is due share.OutageRenewal after the last, and made at the next
// failure, at most a probe wait (probeSpreadMax, the longest) and a probe
// that hangs to its timeout (DefaultRequestTimeout) later; the rest is
// room for round trips. A writer still failing is then never dropped from
// the lane's outage.
func TestOutageLapseOutlastsAFailingWritersRenewals(t *testing.T) {
	longest := share.OutageRenewal + probeSpreadMax + DefaultRequestTimeout
	assert.Greater(t, share.OutageLapse, longest+10*time.Second)
	assert.GreaterOrEqual(t, share.OutageRenewal, 2*probeMax, "a renewal for every few probes of a long outage")
}

// A breaker that only the lane's outage opened (heard), with no failure
// of this writer's since, follows the lane's outage: it is dated from the
// outage the lane holds now (one that replaced, between two views, the
// outage it heard), and it closes once the lane holds none (the index
// answered another writer, or no writer in the outage is left: it may
// have ended unseen, minutes ago). Its first failed probe then gives up
// on no outage that nobody in the lane still sees: a writer that heard a
// two-minute-old outage, whose only writer died while its probe was out,
// failed every record unsent at that probe's failure.
func TestSharedLaneBreakerThatOnlyHeardTheLanesOutageEndsWithIt(t *testing.T) {
	heardOld := func(t *testing.T) (*lane, *fakeMember, *fakeClock, share.View) {
		m := newFakeMember(capped(newFakeClock().Now(), 0, math.Inf(1), 0, 2))
		ln, clk, _ := sharedLane(t, m)
		v := m.View()
		v.OpenSince, v.Answered = clk.Now().Add(-2*outagePatience), true
		apply(ln, m, v)
		require.True(t, breakerOpen(ln))
		clk.Advance(probeEvery)
		return ln, m, clk, v
	}
	t.Run("replaced", func(t *testing.T) {
		ln, m, clk, v := heardOld(t)
		v.OpenSince = clk.Now() // closed by an answer, reopened by another writer's breaker
		apply(ln, m, v)
		p, err := ln.acquire(context.Background(), req(1))
		require.NoError(t, err)
		require.NotZero(t, p.probe)
		ln.release(p, &Error{Class: ClassServer})
		ln.mu.Lock()
		defer ln.mu.Unlock()
		assert.True(t, ln.breaker.open)
		assert.Nil(t, ln.breaker.gaveUp(clk.Now()), "the lane's outage is a second old")
	})
	t.Run("ended", func(t *testing.T) {
		ln, m, clk, v := heardOld(t)
		p, err := ln.acquire(context.Background(), req(1))
		require.NoError(t, err)
		require.NotZero(t, p.probe)
		v.OpenSince = time.Time{} // while the probe is out, the lane's outage ends
		apply(ln, m, v)
		require.False(t, breakerOpen(ln), "the lane's outage, which alone opened it, is over")
		ln.release(p, &Error{Class: ClassServer})
		ln.mu.Lock()
		assert.False(t, ln.breaker.open, "one failure opens no breaker")
		assert.Nil(t, ln.breaker.gaveUp(clk.Now()))
		ln.mu.Unlock()
		m.mu.Lock()
		defer m.mu.Unlock()
		assert.Empty(t, m.breakers, "no outage to report")
	})
}

// The lane's reports reach the store in the order its breaker changed,
// even when another goroutine is still making the first: "closed" before
// "opened" would keep the outage open for every writer.
func TestSharedLaneReportsItsBreakerInOrder(t *testing.T) {
	m := newFakeMember(capped(newFakeClock().Now(), 0, math.Inf(1), 0, 2))
	ln, _, _ := sharedLane(t, m)
	entered, hold := make(chan struct{}), make(chan struct{})
	m.breakerHook = func(open bool) {
		if open {
			close(entered)
			<-hold // the store is slow to take the first report
		}
	}
	report := func(open bool) {
		ln.mu.Lock()
		ln.queueBreaker(open)
		ln.mu.Unlock()
		ln.flushShare()
	}
	first := make(chan struct{})
	go func() {
		defer close(first)
		report(true)
	}()
	<-entered
	report(false)
	close(hold)
	<-first
	m.mu.Lock()
	defer m.mu.Unlock()
	assert.Equal(t, []bool{true, false}, m.breakers)
}

// An outage whose end this writer could not report (Redis was out of
// reach when its breaker closed) is still open in the lane's state when it
// rejoins. It must not reopen the breaker of a writer whose index answers
// (after a minute of outage that would fail requests unsent): the writer
// reports the close it missed instead.
func TestSharedLaneReportsAtItsRejoinTheCloseItMissed(t *testing.T) {
	m := newFakeMember(capped(newFakeClock().Now(), 0, math.Inf(1), 0, 2))
	ln, clk, _ := sharedLane(t, m)
	openBreaker(t, ln)
	outage := m.View()
	outage.OpenSince, outage.Answered = clk.Now(), true
	apply(ln, m, outage) // the lane heard of the open
	fallBack(ln, m)
	clk.Advance(2 * outagePatience)
	p, err := ln.acquire(context.Background(), req(1))
	require.NoError(t, err)
	require.NotZero(t, p.probe)
	ln.release(p, nil) // the index answers; Redis is out of reach
	apply(ln, m, outage)
	ln.mu.Lock()
	open, gaveUp := ln.breaker.open, ln.breaker.gaveUp(clk.Now())
	ln.mu.Unlock()
	assert.False(t, open, "the writer's own answers say the index is up")
	assert.Nil(t, gaveUp)
	m.mu.Lock()
	defer m.mu.Unlock()
	assert.Equal(t, []bool{true, false}, m.breakers, "the close it missed, reported at the rejoin")
}

func TestSharedLaneBreakerHeardAloneFailsNothingAtOnce(t *testing.T) {
	m := newFakeMember(capped(newFakeClock().Now(), 0, math.Inf(1), 0, 2))
	ln, clk, _ := sharedLane(t, m)
	v := m.View()
	v.OpenSince = clk.Now() // the other writer never got an answer
	apply(ln, m, v)
	ln.mu.Lock()
	defer ln.mu.Unlock()
	assert.True(t, ln.breaker.open)
	assert.Nil(t, ln.breaker.gaveUp(clk.Now()), "this writer's own requests decide that an index never answers")
}

// A membership after the last one ended counts the lane's episodes
// afresh: the lane's keys were dropped when its writers left, and the next
// session's epochs start over, below what a Limiter kept between calls
// remembers.
func TestSharedLaneCountsANewMembershipsEpochsAfresh(t *testing.T) {
	ctx := context.Background()
	now := time.Now()
	ln := newLane(realClock{}, MaxBatchSize, &defaultTuning)
	stats := new(shareCounters)
	leave := ln.joinShare(ctx, fakeStore{newFakeMember(capped(now, 3, 1e6, 1e6, 1))}, share.Lane{Host: "h"}, stats)
	leave()
	leave = ln.joinShare(ctx, fakeStore{newFakeMember(capped(now, 1, 100, 100, 1))}, share.Lane{Host: "h"}, stats)
	defer leave()
	records, _, _ := limits(ln)
	assert.InDelta(t, 100, records, 1, "the new session's first cut adopted")
	ln.mu.Lock()
	defer ln.mu.Unlock()
	assert.Equal(t, uint64(1), ln.share.epoch)
}

func TestJoinShareOncePerLaneAndLeaveAtTheEnd(t *testing.T) {
	m := newFakeMember(capped(time.Now(), 0, math.Inf(1), 0, 1))
	ln := newLane(realClock{}, MaxBatchSize, &defaultTuning)
	stats := new(shareCounters)
	leaveA := ln.joinShare(context.Background(), fakeStore{m}, share.Lane{Host: "h"}, stats)
	leaveB := ln.joinShare(context.Background(), fakeStore{m}, share.Lane{Host: "h"}, stats)
	m.set(capped(time.Now(), 2, 1000, 1000, 2))
	require.Eventually(t, func() bool {
		ln.mu.Lock()
		defer ln.mu.Unlock()
		return ln.share.epoch == 2
	}, time.Second, time.Millisecond, "the watcher adopts a change")
	leaveA()
	leaveA()
	m.mu.Lock()
	assert.Zero(t, m.left, "another run still shares the lane")
	m.mu.Unlock()
	leaveB()
	m.mu.Lock()
	assert.Equal(t, 1, m.left)
	m.mu.Unlock()
}

// countingStore hands out a new member per Join and counts, by namespace,
// the members joined and those joined and not left.
type countingStore struct {
	mu     sync.Mutex
	joined map[string]int
	live   map[*countedMember]bool
}

type countedMember struct {
	*fakeMember
	s  *countingStore
	ns string
}

func (m *countedMember) Leave(ctx context.Context) error {
	m.s.mu.Lock()
	delete(m.s.live, m)
	m.s.mu.Unlock()
	return m.fakeMember.Leave(ctx)
}

func (s *countingStore) Join(_ context.Context, l share.Lane) share.Member {
	m := &countedMember{fakeMember: newFakeMember(share.View{Shared: true, Rate: math.Inf(1), Writers: 1}), s: s, ns: l.Namespace}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.live == nil {
		s.joined, s.live = make(map[string]int), make(map[*countedMember]bool)
	}
	s.joined[l.Namespace]++
	s.live[m] = true
	return m
}

// counts are the members joined and live, of every namespace.
func (s *countingStore) counts() (joined, live int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, n := range s.joined {
		joined += n
	}
	return joined, len(s.live)
}

// countsOf are the members of namespace ns joined and live.
func (s *countingStore) countsOf(ns string) (joined, live int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for m := range s.live {
		if m.ns == ns {
			live++
		}
	}
	return s.joined[ns], live
}

// laneUsers is how many runs share the lane of key (host "") in lim.
func laneUsers(lim *Limiter, key string) int {
	lim.mu.Lock()
	ln := lim.lanes[laneID{key: key}]
	lim.mu.Unlock()
	if ln == nil {
		return 0
	}
	ln.mu.Lock()
	defer ln.mu.Unlock()
	return ln.share.users
}

// A stream (or a Writer: "a service writing to ever new namespaces") over
// many namespaces forgets its idle routes, "so that a stream over many
// namespaces holds few", and the Limiter its lanes beyond about a thousand.
// Shared across processes, each route's lane is also a membership of the
// store (a watcher goroutine, and an exchange with Redis every interval):
// it ends with its route, else the run holds one per namespace it ever
// wrote, and the Limiter keeps each lane a run shares. Routes holding a
// record not yet dispatched cannot be forgotten: without a bound on how
// many namespaces may hold them (maxHeldRoutes), one record per namespace
// kept 2,800 of them live without -race, where the producer outruns the
// workers.
func TestAStreamOverManyNamespacesLetsGoOfItsIdleMemberships(t *testing.T) {
	const namespaces = 4000
	store := &countingStore{}
	lim := &Limiter{clock: newFakeClock()}
	var live, lanes int
	seq := func(yield func(*pinecone.Vector) bool) {
		for i, v := range vectors(namespaces, 2) {
			v.Metadata = nil
			if !yield(v) {
				return
			}
			if i == namespaces-1 {
				// The memberships of dropped routes leave in a goroutine of
				// their own (leaveDropped), which a loaded machine runs late.
				for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(time.Millisecond) {
					if _, live = store.counts(); live <= 2*minRoutes || time.Now().After(deadline) {
						break
					}
				}
				lim.mu.Lock()
				lanes = len(lim.lanes)
				lim.mu.Unlock()
			}
		}
	}
	fi := newFakeIndex(nil)
	res, err := Stream(context.Background(), seq, testOpts(fi, WithLimiter(lim), WithBatchSize(1),
		WithNamespaceOf(func(v *pinecone.Vector) string { return "tenant-" + v.Id }),
		func(c *config) { c.store, c.shareHost = store, "h" })...)
	require.NoError(t, err)
	require.Equal(t, namespaces, res.Upserted)
	joined, after := store.counts()
	assert.Zero(t, after, "every membership left at the end")
	assert.LessOrEqual(t, live, 2*minRoutes,
		"%d namespaces written one record each: %d memberships still live mid-stream, of %d joined", namespaces, live, joined)
	assert.LessOrEqual(t, lanes, maxLanes+minRoutes, "lanes the Limiter holds mid-stream")
}

// A namespace a stream comes back to after its route was dropped as idle
// (and its membership left) joins its shared lane again, once per visit,
// and the run shares the lane once at a time; at the end nothing is left
// joined.
func TestANamespaceRevisitedAfterItsRouteWasDroppedJoinsOncePerVisit(t *testing.T) {
	const visits = 3
	store := &countingStore{}
	lim := &Limiter{clock: newFakeClock()}
	seq := func(yield func(*pinecone.Vector) bool) {
		others := 0
		for visit := range visits {
			if !yield(routeVec(fmt.Sprintf("a/%d", visit))) {
				return
			}
			joined, live := store.countsOf("a")
			assert.Equal(t, visit+1, joined, "visit %d: joins of a", visit)
			assert.Equal(t, 1, live, "visit %d: a's live memberships", visit)
			assert.Equal(t, 1, laneUsers(lim, "a"), "visit %d: runs sharing a's lane", visit)
			// Other namespaces until a's idle route is dropped (once its
			// batch finished) and its membership left, in the background.
			for {
				if _, live := store.countsOf("a"); live == 0 {
					break
				}
				if !assert.Less(t, others, 8*minRoutes, "visit %d: a's membership never left", visit) ||
					!yield(routeVec(fmt.Sprintf("o%d/0", others))) {
					return
				}
				others++
			}
			assert.Zero(t, laneUsers(lim, "a"), "visit %d: runs sharing a's lane once left", visit)
		}
	}
	fi := newFakeIndex(nil)
	_, err := Stream(context.Background(), seq, testOpts(fi, WithLimiter(lim), WithBatchSize(1),
		WithNamespaceOf(func(v *pinecone.Vector) string { ns, _, _ := strings.Cut(v.Id, "/"); return ns }),
		func(c *config) { c.store, c.shareHost = store, "h" })...)
	require.NoError(t, err)
	joined, _ := store.countsOf("a")
	assert.Equal(t, visits, joined, "a joined once per visit")
	_, live := store.counts()
	assert.Zero(t, live, "memberships live after the run")
}

// A route made again for a lane whose membership the run has not left yet
// (its route was dropped, the leave waits its turn in the background)
// takes that membership back rather than join a second time, and keeps it;
// the run's end leaves it.
func TestARouteMadeAgainBeforeItsDroppedMembershipIsLeftTakesItBack(t *testing.T) {
	store := &countingStore{}
	lim := &Limiter{clock: newFakeClock()}
	r := &run{cfg: &config{store: store, limiter: lim}, runContexts: runContexts{ctx: context.Background()}}
	r.shares.host = "h"
	x, a := lim.holdLane(laneID{key: "x"}, MaxBatchSize), lim.holdLane(laneID{key: "a"}, MaxBatchSize)
	r.joinShare(x, "x")
	r.joinShare(a, "a")

	// x's leave waits for its lane's joinMu, which the test holds: a's
	// turn comes after a's route was made again.
	x.shareSync.joinMu.Lock()
	r.leaveDropped([]*lane{x, a})
	r.joinShare(a, "a")
	x.shareSync.joinMu.Unlock()
	r.shares.mu.Lock()
	left := r.shares.left
	r.shares.mu.Unlock()
	<-left

	joined, live := store.countsOf("a")
	assert.Equal(t, 1, joined, "joins of a")
	assert.Equal(t, 1, live, "a's membership kept")
	assert.Equal(t, 1, laneUsers(lim, "a"))
	_, live = store.countsOf("x")
	assert.Zero(t, live, "x's membership left")

	r.leaveShares()
	_, live = store.counts()
	assert.Zero(t, live, "memberships live after the run")
	assert.Zero(t, laneUsers(lim, "a"))
}

// A writer gone quiet (a Writer waiting for input) gives its part of a
// shared lane back: between answers its watcher reports a demand that
// falls to 0 within the meter's span. Else the lane's other writers stay
// held to the rest of the lane's rate for as long as it is quiet.
func TestSharedLaneQuietWriterGivesItsPartBack(t *testing.T) {
	m := newFakeMember(capped(time.Now(), 1, 2000, 2000, 2))
	clk := newFakeClock()
	tun := defaultTuning
	tun.shareDemandEvery = time.Millisecond
	ln := newLane(clk, MaxBatchSize, &tun)
	ln.setLimits(ServerlessLimits)
	leave := ln.joinShare(context.Background(), fakeStore{m}, share.Lane{Host: "h"}, new(shareCounters))
	defer leave()
	for range 3 {
		p, err := ln.acquire(context.Background(), req(100))
		require.NoError(t, err)
		clk.Advance(time.Millisecond)
		ln.release(p, nil)
	}
	demand := func() float64 { m.mu.Lock(); defer m.mu.Unlock(); return m.demand }
	require.True(t, math.IsInf(demand(), 1), "precondition: its part of 1000/s held 300 records back")

	clk.Advance(tun.boundFor)
	require.Eventually(t, func() bool { d := demand(); return d > 0 && !math.IsInf(d, 1) }, time.Second, time.Millisecond,
		"nothing held back for a second: twice what it sent")
	clk.Advance(meterSpan)
	require.Eventually(t, func() bool { return demand() == 0 }, time.Second, time.Millisecond,
		"quiet for the meter's span: it asks for nothing")

	// Back from quiet with the least part: the first request the rate
	// holds back says so at once, not at the next answer or report.
	ln.mu.Lock()
	_, wait := ln.reserve(clk.Now(), req(100_000))
	ln.mu.Unlock()
	require.Positive(t, wait, "precondition: the rate holds it back")
	assert.True(t, math.IsInf(demand(), 1), "held back: +Inf before any answer")
}

func TestSharedLaneProposesWhatTheLaneAccepted(t *testing.T) {
	clk := newFakeClock()
	for _, tc := range []struct {
		name      string
		since     time.Duration // how long ago the lane's count started
		accepted  int64
		wantLevel float64
	}{
		{name: "the lane took more than this writer's part says", since: 3 * time.Second, accepted: 30000, wantLevel: 10000},
		{name: "the lane took less: the writer's own measure", since: 3 * time.Second, accepted: 3000, wantLevel: 5000},
		{name: "too short a span to measure by", since: 300 * time.Millisecond, accepted: 30000, wantLevel: 5000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := capped(clk.Now(), 1, 4000, 5000, 2)
			v.Accepted, v.AcceptedSince = tc.accepted, clk.Now().Add(-tc.since)
			m := newFakeMember(v)
			ln, _, _ := sharedLane(t, m)
			ln.mu.Lock()
			ln.shareCut(permit{epoch: 1}, errRateLimited, dimRecords, false)
			ln.mu.Unlock()
			ln.flushShare()
			cuts := m.proposals()
			require.Len(t, cuts, 1)
			assert.InDelta(t, tc.wantLevel, cuts[0].Level, 1e-6)
			assert.InDelta(t, tc.wantLevel*0.8, cuts[0].Rate, 1e-6, "the cut's depth kept")
		})
	}
}

func TestRateControlRejoinGoesOnFromItsProbe(t *testing.T) {
	tn := defaultTuning
	now := time.Unix(1000, 0)
	c := rateControl{limit: 1100, level: 1000, capacity: 1000, prior: 25, origin: now.Add(-tn.recovery)}
	c.alone(now, 0.25, &tn)
	later := now.Add(tn.recovery)
	c.limit = c.curve(later, &tn) // the fast probe's
	c.rejoin(later, 0.25, &tn)
	assert.InDelta(t, 25, c.prior, 1e-9, "its part of the namespace's known limit again")
	assert.Zero(t, c.gain, "the fast probe ends")
	assert.InEpsilon(t, c.limit, c.curve(later, &tn), 1e-9, "from the limit it reached")
}

func TestSharedLaneBlipsDoNotMultiplyItsCaps(t *testing.T) {
	now := newFakeClock().Now()
	four := capped(now, 0, math.Inf(1), 0, 4)
	m := newFakeMember(four)
	ln, _, _ := sharedLane(t, m)
	prior := func() float64 {
		ln.mu.Lock()
		defer ln.mu.Unlock()
		return ln.dims[dimRequests].ctl.prior
	}
	part := prior()
	for range 3 {
		fallBack(ln, m)
		assert.InDelta(t, 4*part, prior(), 1e-9, "alone, the namespace's whole")
		apply(ln, m, four)
		assert.InDelta(t, part, prior(), 1e-9, "shared again, its part")
	}
}

// TestSharedLaneRejoinTakesBackItsPartOfTheNamespaceCaps: going alone
// makes the writer's known limit of the namespace whole (Pinecone's 100
// requests/s are the namespace's) and sets the fast probe; the rejoin
// gives the limit back to this writer's part and ends the fast probe,
// whatever the lane's epoch (before its first cut no adoptCut does it).
func TestSharedLaneRejoinTakesBackItsPartOfTheNamespaceCaps(t *testing.T) {
	now := newFakeClock().Now()
	four := capped(now, 0, math.Inf(1), 0, 4) // four writers, before the lane's first cut
	m := newFakeMember(four)
	ln, _, stats := sharedLane(t, m)
	ln.mu.Lock()
	before := ln.dims[dimRequests].ctl
	ln.mu.Unlock()
	assert.InDelta(t, 100.0/4, before.prior, 1e-9, "its part of the namespace's 100 requests/s")

	fallBack(ln, m)
	apply(ln, m, four) // Redis answers again: the same four writers
	assert.Equal(t, int64(1), stats.rejoins.Load())

	ln.mu.Lock()
	after := ln.dims[dimRequests].ctl
	ln.mu.Unlock()
	assert.InDelta(t, before.prior, after.prior, 1e-9, "back among four writers, its known request limit is its part again")
	assert.Zero(t, after.gain, "back among four writers, it no longer probes for the whole lane")
}

// A writer's least part is minShare, but no more than an even split:
// floored at 1%, 1,000 writers that all take what they are given held ten
// times the lane together, where the allocation gives each a thousandth.
func TestManyWritersHoldNoMoreThanTheLane(t *testing.T) {
	now := newFakeClock().Now()
	const writers = 1000
	v := capped(now, 1, 100_000, 100_000, writers)
	assert.InDelta(t, 100.0, v.Allocation(100_000), 1e-9, "precondition: the split gives each a thousandth")

	ln, _, _ := sharedLane(t, newFakeMember(v))
	ln.mu.Lock()
	frac := ln.share.frac
	records := ln.dims[dimRecords].ctl.limit
	ln.mu.Unlock()
	assert.InDelta(t, 1.0/writers, frac, 1e-9, "a writer's fraction of the lane")
	assert.LessOrEqual(t, frac*writers, 1.0+1e-9, "the writers' parts add up to no more than the lane")
	assert.InDelta(t, 100.0, records, 1e-6, "its record rate: a thousandth of the lane's 100,000/s")
}

// A new membership of a lane whose shared state holds no cut (its last
// writer left: a route that stepped out, a Limiter kept between calls)
// proposes the cut, the Retry-After and the outage this lane still
// enforces; one of a lane that learned nothing, or whose shared state has
// a cut, proposes none.
func TestANewMembershipProposesWhatTheLaneStillHolds(t *testing.T) {
	for _, tt := range []struct {
		name      string
		held      bool // the lane enforces a cut at 1000/s, paused for 3 s, its breaker open
		epoch     uint64
		wantCut   bool
		wantPause time.Duration
		wantOpen  bool
	}{
		{"a lane that forgot what this one holds", true, 0, true, 3 * time.Second, true},
		{"a lane that has a cut of its own", true, 2, false, 0, true},
		{"nothing held", false, 0, false, 0, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			clk := newFakeClock()
			ln := newLane(clk, MaxBatchSize, &defaultTuning)
			if tt.held {
				measuredLane(ln, clk, 1000)
				ln.mu.Lock()
				ln.pushback.until = clk.Now().Add(3 * time.Second)
				ln.breaker.open, ln.breaker.lastFailure = true, clk.Now() // a current verdict
				ln.mu.Unlock()
			}
			v := capped(clk.Now(), tt.epoch, math.Inf(1), 0, 1)
			if tt.epoch > 0 {
				v = capped(clk.Now(), tt.epoch, 2000, 2000, 1)
			}
			m := newFakeMember(v)
			leave := ln.joinShare(context.Background(), fakeStore{m}, share.Lane{Host: "h"}, new(shareCounters))
			defer leave()
			// The watcher may make the round trips joinShare queued.
			require.Eventually(t, func() bool {
				m.mu.Lock()
				defer m.mu.Unlock()
				return (!tt.wantCut || len(m.cuts) > 0) && (!tt.wantOpen || slices.Contains(m.breakers, true))
			}, time.Second, time.Millisecond)
			cuts := m.proposals()
			if !tt.wantCut {
				assert.Empty(t, cuts)
			} else if assert.Len(t, cuts, 1) {
				assert.InDelta(t, 1000, cuts[0].Level, 1, "the level this lane measured")
				assert.Equal(t, tt.wantPause, cuts[0].RetryAfter)
			}
			m.mu.Lock()
			defer m.mu.Unlock()
			assert.Equal(t, tt.wantOpen, slices.Contains(m.breakers, true), "the outage proposed")
		})
	}
}

// liveLaneNoCut is the first view of a lane that another process's writer
// is writing, with no 429 so far (Epoch 0): the index accepted 5000
// records/s from it over the last 10 s.
func liveLaneNoCut(now time.Time) share.View {
	v := capped(now, 0, math.Inf(1), 0, 2)
	v.Accepted, v.AcceptedSince, v.Answered = 50_000, now.Add(-10*time.Second), true
	v.Recent, v.RecentSpan = 5_000, time.Second
	return v
}

// storingMember makes m answer a proposal as a store does: applied at
// Epoch+1, and seen by every writer of the lane (its view changes).
func storingMember(m *fakeMember) {
	m.cut = func(c share.Cut) (share.View, bool, error) {
		m.mu.Lock()
		v := m.view
		m.mu.Unlock()
		v.Epoch++
		v.Unit, v.Rate, v.Level, v.Recovery, v.CutAt = c.Unit, c.Rate, c.Level, c.Recovery, time.Now()
		v.Accepted, v.AcceptedSince = 0, time.Now()
		m.set(v)
		return v, true, nil
	}
}

// A lane that another process writes through without a 429 (Epoch 0, two
// writers) forgot nothing: a Limiter kept between calls that joins it
// proposes no cut it learnt hours ago. Once, the other writer, taking
// 5000 records/s unrefused, fell to 500/s, its half of that old cut.
func TestANewMembershipOfALiveLaneWithoutACutProposesNoOldCut(t *testing.T) {
	clk := newFakeClock()
	ln := newLane(clk, MaxBatchSize, &defaultTuning)
	measuredLane(ln, clk, 1000) // the Limiter's lane, from a call that ended
	clk.Advance(2 * time.Hour)  // kept between calls

	m := newFakeMember(liveLaneNoCut(clk.Now()))
	storingMember(m)
	// The other process's writer, a member of the same lane.
	mB := newFakeMember(liveLaneNoCut(clk.Now()))
	lnB, clkB, _ := sharedLane(t, mB)
	clkB.Advance(2 * time.Hour)
	before, _, _ := limits(lnB)

	leave := ln.joinShare(context.Background(), fakeStore{m}, share.Lane{Host: "h"}, new(shareCounters))
	defer leave()

	apply(lnB, mB, m.View()) // what the other writer sees next
	after, _, _ := limits(lnB)
	assert.Empty(t, m.cutsProposed(), "no 429 episode: nothing to propose to a live lane")
	assert.GreaterOrEqual(t, after, before, "the other writer's record rate: %.0f/s before the join, %.0f/s after", before, after)
}

// A breaker's verdict that no failure bore out for two probe periods is
// stale (gaveUp): a new membership proposes no outage on it, which would
// open every other writer's breaker; the lane's next probe decides.
func TestANewMembershipDoesNotProposeAStaleOutage(t *testing.T) {
	for _, writers := range []int{1, 2} {
		clk := newFakeClock()
		ln := newLane(clk, MaxBatchSize, &defaultTuning)
		ln.mu.Lock()
		ln.breaker.answered = true // the index had answered before it went down
		ln.mu.Unlock()
		openBreaker(t, ln) // the call ended with the index down
		clk.Advance(time.Hour)
		ln.mu.Lock()
		stale := ln.breaker.gaveUp(clk.Now()) == nil && ln.breaker.open
		ln.mu.Unlock()
		require.True(t, stale, "the lane's own verdict is stale: it waits for the next probe")

		v := capped(clk.Now(), 0, math.Inf(1), 0, writers)
		v.Answered = true
		m := newFakeMember(v)
		leave := ln.joinShare(context.Background(), fakeStore{m}, share.Lane{Host: "h"}, new(shareCounters))
		m.mu.Lock()
		opened := slices.Contains(m.breakers, true)
		m.mu.Unlock()
		leave()
		if !assert.False(t, opened, "writers %d: an outage last seen an hour ago proposed as a fresh one", writers) {
			// What the other writer does with the lane's answer.
			mB := newFakeMember(v)
			lnB, clkB, _ := sharedLane(t, mB)
			clkB.Advance(time.Hour)
			w := v
			w.OpenSince = clkB.Now()
			apply(lnB, mB, w)
			lnB.mu.Lock()
			ok, _, wait := lnB.breaker.admit(clkB.Now())
			lnB.mu.Unlock()
			t.Logf("writers %d: the other writer's next request admitted: %v (waits %v for a probe)", writers, ok, wait)
		}
	}
}

// A proposal at Epoch 0 that another writer's cut overtakes (the watcher
// applied Epoch 1 while the proposal was out; the store answers with that
// cut, not applied): the newer cut is kept.
func TestAHeldProposalOvertakenByAnotherCutKeepsTheNewer(t *testing.T) {
	clk := newFakeClock()
	ln := newLane(clk, MaxBatchSize, &defaultTuning)
	measuredLane(ln, clk, 1000)
	m := newFakeMember(capped(clk.Now(), 0, math.Inf(1), 0, 1))
	other := capped(clk.Now(), 1, 3000, 3000, 1)
	m.cut = func(share.Cut) (share.View, bool, error) {
		m.set(other)
		ln.mu.Lock()
		ln.applyView(other) // as the watcher does, before the store's answer
		ln.mu.Unlock()
		return other, false, nil
	}
	leave := ln.joinShare(context.Background(), fakeStore{m}, share.Lane{Host: "h"}, new(shareCounters))
	defer leave()
	require.Eventually(t, func() bool {
		ln.mu.Lock()
		defer ln.mu.Unlock()
		return len(m.proposals()) == 1 && !ln.share.flushing && len(ln.share.pending) == 0
	}, time.Second, time.Millisecond)
	records, _, _ := limits(ln)
	ln.mu.Lock()
	epoch := ln.share.epoch
	ln.mu.Unlock()
	assert.Equal(t, uint64(1), epoch)
	assert.InDelta(t, 3000, records, 30, "the other writer's cut, not this lane's held one")
}

// A writer that closed its breaker ended the lane's shared outage (the
// store ends it at the first close): its next outage starts anew, though
// no view has told it yet. The outage it closed, two minutes old, made the
// next one's requests fail unsent at its first failures.
func TestAWritersNextOutageDoesNotStartWithTheSharedOneItClosed(t *testing.T) {
	m := newFakeMember(capped(newFakeClock().Now(), 0, math.Inf(1), 0, 2))
	ln, clk, _ := sharedLane(t, m)
	openBreaker(t, ln)
	v := m.View()
	v.OpenSince, v.Answered = clk.Now(), true
	apply(ln, m, v) // the store holds the outage; the lane heard it

	clk.Advance(2 * outagePatience)
	p, err := ln.acquire(context.Background(), req(1))
	require.NoError(t, err)
	require.NotZero(t, p.probe)
	ln.release(p, nil) // the index answers: the breaker closes
	require.False(t, breakerOpen(ln))

	clk.Advance(time.Second)
	openBreaker(t, ln) // a new outage, before any view
	ln.mu.Lock()
	defer ln.mu.Unlock()
	require.True(t, ln.breaker.open)
	assert.Nil(t, ln.breaker.gaveUp(clk.Now()), "a second old outage is waited out")
}

// A breaker that opened while the store was out of reach (its report
// dropped: the lane went on alone) is proposed at the rejoin, so that the
// lane's other writers share the outage and its patience; only a close it
// missed was reported.
func TestSharedLaneReportsAtItsRejoinTheOpenItMissed(t *testing.T) {
	m := newFakeMember(capped(newFakeClock().Now(), 0, math.Inf(1), 0, 2))
	ln, _, _ := sharedLane(t, m)
	fallBack(ln, m)
	openBreaker(t, ln)
	m.mu.Lock()
	require.Empty(t, m.breakers, "alone, the lane reports nothing")
	m.mu.Unlock()
	back := m.View()
	back.Shared = true
	apply(ln, m, back)
	m.mu.Lock()
	defer m.mu.Unlock()
	assert.Equal(t, []bool{true}, m.breakers, "the open it missed, reported at the rejoin")
}

// A writer writes namespaces ns0 and ns1 of one index. The index has been
// down for over a minute: ns0's breaker (its own failures) has given up,
// failing its records unsent. ns1's breaker opened only on hearing the
// lane's outage from the other writers of ns1 (its probe not failed yet).
// Another writer's request to ns1 is then answered, closing ns1's shared
// outage: the index is back. As when the host's own namespace is
// answered (hostSeen.closed / breaker.hostBack), ns0 must hear it at once:
// its verdict is stale and its next request probes, rather than fail
// records unsent for up to a probe period after the index answered (up
// to 30 s): breaker.unheard, taken first, closed ns1 and told the host
// nothing.
func TestAHeardOutageEndedByAnAnswerWakesTheHostsOtherNamespaces(t *testing.T) {
	ctx := context.Background()
	clk := newFakeClock()
	lim := &Limiter{clock: clk}
	ns0 := lim.holdLane(laneID{host: probeHost, key: "ns0"}, MaxBatchSize)
	t.Cleanup(func() { ns0.holdRoute(-1) })
	ns1 := lim.holdLane(laneID{host: probeHost, key: "ns1"}, MaxBatchSize)
	t.Cleanup(func() { ns1.holdRoute(-1) })

	p, err := ns0.acquire(ctx, req(1))
	require.NoError(t, err)
	ns0.release(p, nil)
	start := clk.Now()
	for !breakerOpen(ns0) {
		p, err := ns0.acquire(ctx, req(1))
		require.NoError(t, err)
		ns0.release(p, errServer)
	}
	failProbesUntil(t, clk, []*lane{ns0}, start.Add(outagePatience+10*time.Second))
	require.True(t, ns0.gaveUp(), "ns0's breaker has given up on the index")

	m := newFakeMember(capped(clk.Now(), 0, math.Inf(1), 0, 2))
	shareThrough(ns1, m)
	v := m.View()
	v.OpenSince, v.Answered = start, true
	apply(ns1, m, v)
	require.True(t, breakerOpen(ns1), "ns1's breaker heard the lane's outage")

	clk.Advance(10 * time.Millisecond)
	v.OpenSince = time.Time{} // another writer of ns1 was answered: the index is back
	apply(ns1, m, v)

	assert.False(t, ns0.gaveUp(), "the index answered a writer of ns1: ns0's verdict that it is down is stale")
	pctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	p, err = ns0.acquire(pctx, req(1))
	require.NoError(t, err, "ns0's next request goes (as its probe) rather than fail unsent")
	assert.NotZero(t, p.probe)
	ns0.release(p, nil)
}

// failProbeOf lets ln's next probe out, a probe wait on, and fails it
// with a server error.
func failProbeOf(t *testing.T, ln *lane, clk *fakeClock) {
	t.Helper()
	clk.Advance(probeMax)
	p, err := ln.acquire(context.Background(), req(1))
	require.NoError(t, err)
	require.NotZero(t, p.probe)
	ln.release(p, &Error{Class: ClassServer})
}

// breakerReports returns the breaker reports (Breaker's open) m received.
func (m *fakeMember) breakerReports() []bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.breakers)
}
