package upsert

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pinecone-io/go-pinecone/v5/pinecone"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/upsertlib/upsert/upserttest"
)

func TestNextMinuteLimit(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	refused := func(inWindow, request int) minuteObservation {
		return minuteObservation{now: at(10 * time.Second), refused: true, inWindow: inWindow, request: request}
	}
	heldFor := func(d time.Duration) minuteObservation { return minuteObservation{now: at(d), held: true} }
	searching := func(limit, proven, step int) minuteLimit {
		return minuteLimit{limit: limit, proven: proven, step: step, since: t0}
	}
	under := func(limit, proven, ceiling int) minuteLimit {
		return minuteLimit{limit: limit, proven: proven, ceiling: ceiling, since: t0}
	}
	refusedAt := func(m minuteLimit) minuteLimit { m.since = at(10 * time.Second); return m }
	// A blind refusal is of the tenth request the run sent.
	blindly := func(inWindow, request int) minuteObservation {
		o := refused(inWindow, request)
		o.othersOnly, o.order = true, 10
		return o
	}
	blind := func(limit int, before minuteLimit, first minuteObservation) minuteLimit {
		first.othersOnly = false
		return minuteLimit{limit: limit, since: at(10 * time.Second), before: &before, refusal: first}
	}
	accepted := minuteObservation{now: at(time.Minute), accepted: true, order: 11}
	acceptedEarlier := minuteObservation{now: at(time.Minute), accepted: true, order: 9}
	grownAt := func(m minuteLimit, d time.Duration) minuteLimit { m.since = at(d); return m }
	tests := []struct {
		name string
		m    minuteLimit
		o    minuteObservation
		want minuteLimit
	}{
		{"nothing seen: no limit", minuteLimit{}, minuteObservation{now: t0}, minuteLimit{}},
		{"a refusal: what the window held, searched up from", minuteLimit{}, refused(9000, 500), refusedAt(searching(9000, 0, 2250))},
		{"a refusal of an empty window: one request's worth", minuteLimit{}, refused(0, 500), refusedAt(searching(500, 0, 125))},
		{"a refusal lowers a limit, which is searched up from again", under(12000, 0, 13000), refused(9000, 500), refusedAt(searching(9000, 0, 2250))},
		{"a refusal does not raise one: a bucket that started full takes up to twice its minute", under(5000, 0, 5100), refused(9000, 500), refusedAt(under(5000, 0, 5100))},
		{"searching, held back for a minute without a refusal: proven, grown by the step, which grows", searching(9000, 0, 2250), heldFor(time.Minute), grownAt(searching(11250, 9000, 9000), time.Minute)},
		{"searching, held back for less than a minute: unchanged", searching(9000, 0, 2250), heldFor(59 * time.Second), searching(9000, 0, 2250)},
		{"not held back: unchanged", searching(9000, 0, 2250), minuteObservation{now: at(time.Hour)}, searching(9000, 0, 2250)},
		{"a refused probe falls back to the proven limit, under the refused one", searching(12600, 9000, 9000), refused(12000, 500), refusedAt(under(9000, 9000, 12600))},
		{"far under the ceiling, held back for a minute: halfway to it", under(9000, 9000, 12600), heldFor(time.Minute), grownAt(under(10800, 9000, 12600), time.Minute)},
		{"near the ceiling, held back for a minute: unchanged", under(9000, 9000, 9900), heldFor(time.Minute), under(9000, 9000, 9900)},
		{"near the ceiling, held back for minutes: a tenth more, and a search if it holds", under(9000, 0, 9900), heldFor(minuteGrowAfter), grownAt(searching(9900, 9000, 3600), minuteGrowAfter)},
		{"a tiny limit still grows", under(3, 0, 4), heldFor(minuteGrowAfter), grownAt(searching(4, 3, 4), minuteGrowAfter)},
		{"no limit does not grow into one", minuteLimit{}, heldFor(time.Hour), minuteLimit{}},
		{"a refused probe near the ceiling falls back to the proven limit", searching(9900, 9000, 3600), refused(7000, 500), refusedAt(under(9000, 9000, 9900))},
		{"a refusal at the proven limit lowers it, proven no more", under(9000, 9000, 9900), refused(7000, 500), refusedAt(searching(7000, 0, 1750))},
		{"a refusal of a request let in under the refused probe, which the fallback would have held back, changes nothing", under(9000, 9000, 9900), minuteObservation{now: at(10 * time.Second), refused: true, inWindow: 8800, request: 500, admittedUnder: 9900}, under(9000, 9000, 9900)},
		{"a refusal of a request let in under the refused probe, which the fallback would have let in too, lowers it", under(9000, 9000, 9900), minuteObservation{now: at(10 * time.Second), refused: true, inWindow: 7000, request: 500, admittedUnder: 9900}, refusedAt(searching(7000, 0, 1750))},
		{"a refusal when the index accepted none of the run's requests that minute: one request's worth, the limit kept for after", under(9000, 9000, 9900), blindly(0, 500), blind(500, under(9000, 9000, 9900), blindly(0, 500))},
		{"... also with the run's own requests in flight, refused too", minuteLimit{}, blindly(2880, 960), blind(960, minuteLimit{}, blindly(2880, 960))},
		{"... refused again: one request's worth, the same limit and first refusal kept", blind(960, under(9000, 9000, 9900), blindly(0, 960)), blindly(0, 480), blind(480, under(9000, 9000, 9900), blindly(0, 960))},
		{"... held back for minutes: no growth", blind(960, minuteLimit{}, blindly(0, 960)), heldFor(minuteGrowAfter), blind(960, minuteLimit{}, blindly(0, 960))},
		{"... a request sent after the refused one accepted: the limit kept", blind(960, under(9000, 9000, 9900), blindly(0, 960)), accepted, grownAt(under(9000, 9000, 9900), time.Minute)},
		{"... a request sent after the refused one accepted, none known before: none", blind(960, minuteLimit{}, blindly(0, 960)), accepted, grownAt(minuteLimit{}, time.Minute)},
		{"... a request sent before the refused one accepted (the wave's answers out of order): the refusal was the run's own, a refused probe's", blind(500, searching(12600, 9000, 9000), blindly(12000, 500)), acceptedEarlier, grownAt(under(9000, 9000, 12600), time.Minute)},
		{"an accepted request without a blind refusal: unchanged", under(9000, 9000, 9900), accepted, under(9000, 9000, 9900)},
		{"a refusal of a request let in under the limit kept lowers it", under(9000, 9000, 9900), minuteObservation{now: at(10 * time.Second), refused: true, inWindow: 7000, request: 500, admittedUnder: 9000}, refusedAt(searching(7000, 0, 1750))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, nextMinuteLimit(tt.m, tt.o))
		})
	}
}

func TestMinuteGate(t *testing.T) {
	ctx := context.Background()
	tokensRefused := &Error{Class: ClassRateLimited, Limit: LimitEmbedTokens}
	// send passes a request of tokens through g, answered e.
	send := func(t *testing.T, g *minuteGate, tokens int, e *Error) {
		t.Helper()
		p, err := g.wait(ctx, tokens)
		require.NoError(t, err)
		g.sending(p)
		g.done(p, e)
	}
	t.Run("nothing is held back until a limit is named", func(t *testing.T) {
		clk := newFakeClock()
		g := newMinuteGate(clk)
		for range 100 {
			send(t, g, 1000, nil)
		}
		send(t, g, 1000, &Error{Class: ClassRateLimited, Limit: LimitBytes})
		send(t, g, 1000, nil)
		assert.Empty(t, clk.Sleeps(), "a byte limit is not the gate's")
	})
	// A refusal sets the limit it names, and only that one, at what the
	// window held: three requests of 1000 tokens.
	for _, tt := range []struct {
		limit        Limit
		named, other func(g *minuteGate) int
		want         int
	}{
		{LimitEmbedTokens, func(g *minuteGate) int { return g.tokens.limit }, func(g *minuteGate) int { return g.requests.limit }, 3000},
		{LimitInferenceRequests, func(g *minuteGate) int { return g.requests.limit }, func(g *minuteGate) int { return g.tokens.limit }, 3},
	} {
		t.Run("after a refusal naming "+tt.limit.String()+", requests wait until the window has room", func(t *testing.T) {
			clk := newFakeClock()
			g := newMinuteGate(clk)
			for range 3 {
				send(t, g, 1000, nil)
				clk.Advance(10 * time.Second)
			}
			send(t, g, 1000, &Error{Class: ClassRateLimited, Limit: tt.limit})
			assert.Equal(t, tt.want, tt.named(g))
			assert.Zero(t, tt.other(g), "the other limit was not what the index refused")
			send(t, g, 1000, nil)
			assert.Equal(t, []time.Duration{30 * time.Second}, clk.Sleeps(), "until the first request leaves the window, a minute after it went")
		})
	}
	t.Run("the limit is what the index had taken in the minute before the refused request went out", func(t *testing.T) {
		clk := newFakeClock()
		g := newMinuteGate(clk)
		send(t, g, 1000, nil)
		p, _ := g.wait(ctx, 1000)
		g.sending(p)
		admitted, _ := g.wait(ctx, 1000) // waits for the lane: not at the index
		clk.Advance(2 * time.Minute)     // the answer comes late
		g.done(p, tokensRefused)
		g.withdraw(admitted)
		assert.Equal(t, 1000, g.tokens.limit)
	})
	t.Run("a request that waited for the lane counts from when it went out", func(t *testing.T) {
		clk := newFakeClock()
		g := newMinuteGate(clk)
		g.tokens.limit = 1000
		p, _ := g.wait(ctx, 1000)
		clk.Advance(90 * time.Second)
		g.sending(p)
		g.done(p, nil)
		send(t, g, 1000, nil)
		assert.Equal(t, []time.Duration{time.Minute}, clk.Sleeps())
	})
	t.Run("a request larger than the limit goes alone", func(t *testing.T) {
		clk := newFakeClock()
		g := newMinuteGate(clk)
		g.tokens.limit = 100
		send(t, g, 500, nil)
		send(t, g, 500, nil)
		assert.Equal(t, []time.Duration{time.Minute}, clk.Sleeps())
	})
	t.Run("a withdrawn request frees its room", func(t *testing.T) {
		clk := newFakeClock()
		g := newMinuteGate(clk)
		g.tokens.limit = 1000
		p, _ := g.wait(ctx, 1000)
		g.withdraw(p)
		send(t, g, 1000, nil)
		assert.Empty(t, clk.Sleeps())
	})
	t.Run("held back without a refusal, a learned limit grows each minute; a refused probe is bisected to, then probed every few minutes", func(t *testing.T) {
		clk := newFakeClock()
		g := newMinuteGate(clk)
		// sendHeld sends a request of the limit's size, which waits a minute
		// for the window to free room for it; refuse sends one that fits at
		// once, refused.
		sendHeld := func(e *Error) { send(t, g, g.tokens.limit, e) }
		refuse := func() { send(t, g, 0, tokensRefused) }
		send(t, g, 100, nil)
		send(t, g, 100, tokensRefused)
		require.Equal(t, 100, g.tokens.limit)
		sendHeld(nil) // held a minute: grown by a quarter
		assert.Equal(t, 125, g.tokens.limit)
		sendHeld(nil) // held a minute: grown by four times that
		assert.Equal(t, 225, g.tokens.limit)
		refuse() // the probe refused: back to 125, under 225
		assert.Equal(t, 125, g.tokens.limit)
		sendHeld(nil) // held a minute: halfway to the ceiling
		assert.Equal(t, 175, g.tokens.limit)
		refuse()
		sendHeld(nil)
		assert.Equal(t, 150, g.tokens.limit, "halfway to the new ceiling")
		refuse() // within a quarter of the ceiling: near
		require.Equal(t, 125, g.tokens.limit)
		for range 2 {
			sendHeld(nil)
		}
		assert.Equal(t, 125, g.tokens.limit, "near the ceiling: no probe within minuteGrowAfter")
		sendHeld(nil)
		assert.Equal(t, 137, g.tokens.limit, "a tenth more")
	})
	t.Run("after a refusal with none of the run's requests accepted that minute, one request at a time until one is accepted", func(t *testing.T) {
		clk := newFakeClock()
		g := newMinuteGate(clk)
		g.tokens = minuteLimit{limit: 9000, proven: 9000, since: clk.Now()}
		send(t, g, 1000, tokensRefused)
		require.True(t, g.tokens.blind())
		first, err := g.wait(ctx, 1000)
		require.NoError(t, err)
		g.sending(first)
		second, err := g.wait(ctx, 1000)
		require.NoError(t, err)
		assert.NotEmpty(t, clk.Sleeps(), "the second waits while the first is out")
		g.sending(second)
		g.done(first, nil)
		assert.Equal(t, minuteLimit{limit: 9000, proven: 9000, since: clk.Now()}, g.tokens, "accepted: the limit it knew")
	})
	t.Run("a wait ends with its context", func(t *testing.T) {
		g := newMinuteGate(newFakeClock())
		g.tokens.limit = 1000
		send(t, g, 1000, nil)
		canceled, cancel := context.WithCancel(ctx)
		cancel()
		_, err := g.wait(canceled, 1000)
		assert.ErrorIs(t, err, context.Canceled)
	})
	t.Run("a nil gate admits everything", func(t *testing.T) {
		var g *minuteGate
		p, err := g.wait(ctx, 1e9)
		require.NoError(t, err)
		g.sending(p)
		g.done(p, tokensRefused)
		g.withdraw(p)
	})
}

func TestEstimateTokens(t *testing.T) {
	items := []item{
		{rec: &pinecone.IntegratedRecord{"_id": "a-long-id-that-is-not-embedded", "chunk_text": strings.Repeat("x", 40), "n": 7.0}},
		{rec: &pinecone.IntegratedRecord{"id": "b", "chunk_text": "xy", "title": "abc"}},
		{rec: &pinecone.IntegratedRecord{"_id": "c"}},
	}
	assert.Equal(t, 10+2+1, estimateTokens(items), "a token per 4 bytes of string fields but the id, at least 1 a record")
}

// eventClock is virtual time that moves only when nothing else happens: a
// Sleep returns when no request is in flight, no other sleeper wakes
// earlier and nothing changed for quietFor of real time (goroutines about
// to act get to), and moves the clock to its end. Requests so take no
// virtual time, and a long wait of one goroutine does not pass while
// others work.
type eventClock struct {
	condClock
	wakes    []time.Time // of the sleepers
	inFlight int
	events   int // sleeps begun and ended, requests sent and answered
}

// quietFor is how long nothing must change before an eventClock moves: a
// millisecond let a goroutine about to send miss its turn when the
// machine ran the whole suite under -race (the clock jumped a minute
// ahead of it).
const quietFor = 4 * time.Millisecond

func newEventClock() *eventClock {
	c := &eventClock{}
	c.init()
	return c
}

func (c *eventClock) Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	defer c.wakeOnDone(ctx)()
	c.mu.Lock()
	defer c.mu.Unlock()
	wake := c.now.Add(d)
	c.wakes = append(c.wakes, wake)
	c.events++
	defer func() {
		i := slices.Index(c.wakes, wake)
		c.wakes = slices.Delete(c.wakes, i, i+1)
		c.events++
		c.cond.Broadcast()
	}()
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		if c.inFlight == 0 && !slices.ContainsFunc(c.wakes, func(w time.Time) bool { return w.Before(wake) }) {
			seen := c.events
			c.mu.Unlock()
			time.Sleep(quietFor)
			c.mu.Lock()
			if c.events != seen {
				continue
			}
			if wake.After(c.now) {
				c.now = wake
			}
			return nil
		}
		c.cond.Wait()
	}
}

// transport counts the requests in flight, which hold the clock.
func (c *eventClock) transport(base http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		c.mu.Lock()
		c.inFlight++
		c.events++
		c.mu.Unlock()
		defer func() {
			c.mu.Lock()
			c.inFlight--
			c.events++
			c.cond.Broadcast()
			c.mu.Unlock()
		}()
		return base.RoundTrip(req)
	})
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// tokenLimitedIndex serves an index whose project takes tokensPerMinute
// embedding tokens a minute, and connects to its namespace "docs" over
// REST; the library and the server run on clk, a virtual clock, so that
// the minutes pass at once.
func tokenLimitedIndex(t *testing.T, tokensPerMinute int) (*eventClock, *upserttest.Server, *pinecone.IndexConnection) {
	t.Helper()
	clk := newEventClock()
	srv := upserttest.NewServer(upserttest.WithEmbedTokensPerMinute(tokensPerMinute), upserttest.WithClock(clk.Now))
	t.Cleanup(srv.Close)
	rest := &http.Client{Transport: clk.transport(srv.Client().Transport)}
	return clk, srv, recordsConn(t, srv, rest, true)
}

// tenTokenRecords are n integrated records of 40 bytes of text: 10 tokens
// each, as upserttest and estimateTokens count them.
func tenTokenRecords(n int) []*pinecone.IntegratedRecord {
	recs := make([]*pinecone.IntegratedRecord, n)
	for i := range recs {
		recs[i] = &pinecone.IntegratedRecord{"_id": fmt.Sprint("r", i), "chunk_text": fmt.Sprintf("%040d", i)}
	}
	return recs
}

// A run into a tokens-per-minute limit finishes at that limit, with few
// 429s and no record lost. The library and the server run on one virtual
// clock, so that the minutes pass at once.
func TestRecordsFinishAtATokensPerMinuteLimit(t *testing.T) {
	const (
		tokensPerMinute = 6000
		n               = 3000
		tokensEach      = 10 // 40 bytes of text
	)
	clk, srv, idx := tokenLimitedIndex(t, tokensPerMinute)
	recs := tenTokenRecords(n)

	start := clk.Now()
	res, err := Records(context.Background(), slices.Values(recs), WithIndex(idx), withClock(clk), withRand(maxRand))
	elapsed := clk.Now().Sub(start)
	require.NoError(t, err)
	assert.Equal(t, n, res.Upserted)
	assert.Equal(t, n, srv.RecordCount("docs"))

	// The first minute's worth goes at once, the rest at the limit: 4
	// minutes. A window of a minute sends a minute's worth at a time, and
	// what it learned is up to one request below the limit, so the last
	// tokens may wait for one more window.
	ideal := time.Duration(float64(n*tokensEach-tokensPerMinute) / tokensPerMinute * float64(time.Minute))
	t.Logf("virtual time %v (ideal %v), %d requests refused of %d", elapsed, ideal, srv.Stats().RateLimited, res.Stats.Requests)
	assert.Less(t, elapsed, ideal+minuteWindow+ideal/10, "the run keeps to the limit")
	// Few 429s: those in flight when the limit is first met, and when the
	// gate's first probe above it is refused a minute later (2-11 of about
	// 40 requests over 60 runs).
	assert.LessOrEqual(t, srv.Stats().RateLimited, 16, "few 429s")
}

// The library's copy holds text of the caller's string types as strings,
// and other fields as the JSON they encode to (cloneRecord), which the SDK
// sends as that JSON string for the index to embed: estimateTokens counts
// both as text (it once counted Go strings only, one token however long
// such a text).
func TestEstimateTokensCountsTextTheRecordCarriesAsJSON(t *testing.T) {
	text := strings.Repeat("x", 400) // 100 tokens
	type chunk string
	for _, tt := range []struct {
		name string
		v    any
	}{
		{"a json.RawMessage", json.RawMessage(`"` + text + `"`)},
		{"a named string type", chunk(text)},
		{"a *string", &text},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rec := cloneRecord(&pinecone.IntegratedRecord{"_id": "a", "chunk_text": tt.v})
			_, _, err := checkRecord(rec)
			require.NoError(t, err, "a valid record")
			plain := estimateTokens([]item{{rec: &pinecone.IntegratedRecord{"_id": "a", "chunk_text": text}}})
			assert.Equal(t, plain, estimateTokens([]item{{rec: rec}}), "the text is counted as it is sent")
		})
	}
}

// A run that starts while the project's minute of embedding tokens is
// already spent (by an earlier run, a run restarted after a crash, a
// neighbour on the project) meets 429s on its first requests with nothing
// of its own in the window, and learns one request's tokens a minute. That
// limit grows each minute it holds, faster and faster, so the run does not
// crawl at a fraction of the limit long after the minute is free again.
func TestRecordsStartedOnASpentMinuteStillFinishNearTheTokenLimit(t *testing.T) {
	const (
		tokensPerMinute = 6000
		n               = 3000
		tokensEach      = 10 // 40 bytes of text
	)
	clk, srv, idx := tokenLimitedIndex(t, tokensPerMinute)
	// An earlier run spent the minute.
	require.NoError(t, idx.UpsertRecords(context.Background(), []*pinecone.IntegratedRecord{
		{"_id": "earlier", "chunk_text": strings.Repeat("x", 4*tokensPerMinute)},
	}))

	recs := tenTokenRecords(n)
	start := clk.Now()
	res, err := Records(context.Background(), slices.Values(recs), WithIndex(idx), withClock(clk), withRand(maxRand))
	elapsed := clk.Now().Sub(start)
	require.NoError(t, err)
	assert.Equal(t, n, res.Upserted)
	// The index refills a minute's tokens in a minute: 30,000 tokens take
	// 5 minutes from a spent minute.
	ideal := time.Duration(float64(n*tokensEach) / tokensPerMinute * float64(time.Minute))
	t.Logf("virtual time %v (ideal %v), %d refused of %d requests", elapsed, ideal, srv.Stats().RateLimited, res.Stats.Requests)
	assert.Less(t, elapsed, 2*ideal, "the run keeps near the limit once the minute is free again")
}

// Embedding tokens are limited per project: another job of the project can
// hold the minute spent for a while, every records request refused
// meanwhile with nothing of the run's accepted that minute. Once it is
// gone, a run that fits in a minute's limit lands within a minute or two:
// learned as a limit of one request (and ceilings from probes refused
// during the spell), such a spell kept the run at 0.2% of the limit for
// five minutes after it, ending 8 minutes after the minute was free again
// (found by the records review). The gate now keeps to one request at a
// time until the index accepts one, then goes back to what it knew.
func TestRecordsRecoverSoonAfterAnotherJobSpentTheTokenMinute(t *testing.T) {
	const spell = 5 * time.Minute
	clk := newEventClock()
	msg := "Request failed. You've reached the max embedding tokens per minute (250000) model 'llama-text-embed-v2' and input type 'passage' for the current project. To increase this limit, upgrade your plan."
	srv := upserttest.NewServer(upserttest.WithClock(clk.Now), upserttest.WithFaults(func(r upserttest.Request) upserttest.Fault {
		if r.Elapsed < spell {
			return upserttest.Fault{Code: codes.ResourceExhausted, Message: msg}
		}
		return upserttest.Fault{}
	}))
	t.Cleanup(srv.Close)
	idx := recordsConn(t, srv, &http.Client{Transport: clk.transport(srv.Client().Transport)}, true)
	start := clk.Now()
	res, err := Records(context.Background(), slices.Values(tenTokenRecords(20_000)), WithIndex(idx), withClock(clk), withRand(maxRand))
	elapsed := clk.Now().Sub(start)
	require.NoError(t, err)
	require.Equal(t, 20_000, res.Upserted)
	t.Logf("virtual time %v, %d requests, %d refused", elapsed, res.Stats.Requests, res.Stats.ErrorsByClass[ClassRateLimited])
	// While others hold the minute the gate keeps to one request's worth
	// (its probes paced by their batches' backoffs, each spending a retry
	// of its batch, as before); the first accepted lets the rest in at
	// once.
	assert.Less(t, elapsed, spell+150*time.Second, "200,000 tokens under a 250,000-token limit, once the minute is free again")
}

// A limit learned a hundred times too low is out of it in six minutes of
// holding without a refusal, as the gate's doc says: steps of a quarter,
// growing fourfold, one a minute (86 times after five).
func TestAMinuteLimitLearnedAHundredTimesTooLowIsOutOfItInSixMinutes(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	const learned, index = 100, 100 * 100
	m := nextMinuteLimit(minuteLimit{}, minuteObservation{now: t0, refused: true, request: learned})
	require.Equal(t, learned, m.limit)
	for i := 1; i <= 6; i++ {
		m = nextMinuteLimit(m, minuteObservation{now: t0.Add(time.Duration(i) * minuteWindow), held: true})
		if i == 5 {
			assert.Less(t, m.limit, index, "not in five")
		}
	}
	assert.GreaterOrEqual(t, m.limit, index, "six minutes of holding without a refusal")
}

// recordsElapsedAfter runs 40 integrated records, one a request, whose
// third request is refused with a 429 saying msg, and returns how far the
// run moved the virtual clock.
func recordsElapsedAfter(t *testing.T, msg string) (time.Duration, Result) {
	t.Helper()
	clk := newFakeClock()
	start := clk.Now()
	var mu sync.Mutex
	calls := 0
	send := func(_ context.Context, _ string, b []*pinecone.IntegratedRecord) error {
		mu.Lock()
		defer mu.Unlock()
		calls++
		if calls == 3 {
			return status.Error(codes.ResourceExhausted, msg)
		}
		return nil
	}
	recs := make([]*pinecone.IntegratedRecord, 40)
	for i := range recs {
		recs[i] = &pinecone.IntegratedRecord{"_id": fmt.Sprint("r", i), "chunk_text": "some text"}
	}
	res, err := Records(context.Background(), func(yield func(*pinecone.IntegratedRecord) bool) {
		for _, r := range recs {
			if !yield(r) {
				return
			}
		}
	}, WithRecordsFunc(send), withClock(clk), withRand(maxRand), WithBatchSize(1), WithConcurrency(1))
	require.NoError(t, err)
	require.Equal(t, 40, res.Upserted)
	return clk.Now().Sub(start), res
}

// A refusal of Pinecone's per-second inference limit ("max inference
// requests per second (100)") sets no per-minute limit: the gate would cap
// a whole minute's requests at what the last minute held (here 2, and the
// 37 records left took four minutes), where a per-second limit costs a
// backoff, as the namespace's QPS answer does.
func TestAPerSecondInferenceRefusalSetsNoPerMinuteLimit(t *testing.T) {
	qps, _ := recordsElapsedAfter(t, "Request failed. You've reached the upsert QPS limit for namespace t (100 QPS).")
	perSecond, res := recordsElapsedAfter(t, "Request failed. You've reached the max inference requests per second (100) for the current project.")
	t.Logf("virtual time: after a QPS 429 %v, after a per-second inference 429 %v; retries %d", qps, perSecond, res.Stats.Retries)
	assert.Less(t, perSecond, 30*time.Second,
		"a per-second limit must not hold the run for the minute window (a QPS 429 costs %v)", qps)
}

// The minute gate's contract (nextMinuteLimit's doc): "A refusal of a
// probe (the limit above the proven one) falls back to the proven limit,
// under a ceiling of the refused one"; README: "once a probe is refused it
// bisects up to it, then probes a tenth higher every three minutes, so a
// long run keeps near the limit with a handful of 429s".
//
// A probe admits several requests; the gate admits the next one before the
// previous is answered (its wait comes before the lane's, even at
// WithConcurrency(1)). When two requests admitted under the probe are
// refused, the first refusal falls back to the proven limit under the
// ceiling, but the second was read as a refusal at the proven limit: the
// limit dropped to what the window held, below the proven one, and the
// ceiling was forgotten. The search then started again from below, its
// steps growing fourfold, overshot to the same probe, and the cycle
// repeated every two minutes for the whole run: against upserttest at
// 100k tokens a minute, 10,000 records of ~400 tokens (ideal ~40 min) took
// 51-54 virtual minutes with 37-53 refused requests of ~157, two every
// two minutes, at concurrency 1 as at the default.
//
// The refusal of a request the gate admitted under the refused
// probe says nothing of the proven limit (the proven limit would not have
// admitted it: the window held 77k, and it carried 38k more): the limit
// stays the proven one and the ceiling is kept.
func TestMinuteGateKeepsTheCeilingWhenASecondRequestOfTheRefusedProbeIsRefused(t *testing.T) {
	ctx := context.Background()
	clk := newFakeClock()
	g := newMinuteGate(clk)
	// What the gate holds after a minute held at a proven 95,980 tokens:
	// the search's next step, a probe at 172,764 (as logged in the run
	// above).
	const proven, probe = 95_980, 172_764
	g.tokens = minuteLimit{limit: probe, proven: proven, step: 4 * 76_984, since: clk.Now()}
	tokensRefused := &Error{Class: ClassRateLimited, Limit: LimitEmbedTokens}

	// Two requests of ~38k tokens land; a third goes out, and a fourth is
	// admitted under the probe while the third is in flight.
	for range 2 {
		p, err := g.wait(ctx, 38_500)
		require.NoError(t, err)
		g.sending(p)
		g.done(p, nil)
	}
	third, err := g.wait(ctx, 38_500)
	require.NoError(t, err)
	g.sending(third)
	fourth, err := g.wait(ctx, 38_500)
	require.NoError(t, err)
	require.Empty(t, clk.Sleeps(), "the probe admits all four at once")

	g.done(third, tokensRefused)
	require.Equal(t, proven, g.tokens.limit, "the refused probe falls back to the proven limit")
	require.Equal(t, probe, g.tokens.ceiling, "under a ceiling of the refused probe")

	// The fourth goes out after the third's refusal, and is refused too:
	// it was admitted under the probe.
	g.sending(fourth)
	g.done(fourth, tokensRefused)
	assert.Equal(t, probe, g.tokens.ceiling, "the refused probe is still the ceiling, which the next minutes bisect up to")
	assert.Equal(t, proven, g.tokens.limit, "a request admitted under the probe, refused, does not lower the proven limit")
}

// nextMinuteLimit ignores the refusal of a request let in under a limit
// higher than the current one only when the current limit would have held
// it back: otherwise the cut answered nothing, and the refusal proves the
// current limit too high (it ignored every such refusal for a while).
//
// This happens whenever the proven limit is too high, which the gate's
// own doc says a bucket that started full allows ("up to twice as much"),
// and which a run against upserttest at 100k tokens a minute shows
// (proven limits of 172,800 and 326,400 were logged), or when a neighbour
// starts spending the project's minute. Below: a probe at 480,000 over a
// proven 172,800; three requests of 38,400 go out while the index is
// spent. The first refusal falls back to the proven limit (fine); the
// second was refused with 38,400 of the run's tokens in the index's
// minute: 76,800 fit under 172,800, so the proven limit would have let it
// in too and it says the index takes less: the gate lowers the limit to
// what the window held (38,400), rather than keep 172,800 and, a minute
// later, bisect up to 326,400.
func TestMinuteGateHeedsARefusalTheCutWouldHaveLetIn(t *testing.T) {
	ctx := context.Background()
	clk := newFakeClock()
	g := newMinuteGate(clk)
	const proven, probe, size = 172_800, 480_000, 38_400
	g.tokens = minuteLimit{limit: probe, proven: proven, step: 4 * 76_800, since: clk.Now()}
	refused := &Error{Class: ClassRateLimited, Limit: LimitEmbedTokens}
	accepted, err := g.wait(ctx, 1) // the index took the run's requests this minute: no blind refusal
	require.NoError(t, err)
	g.sending(accepted)
	g.done(accepted, nil)

	var passes []*minutePass
	for range 3 {
		p, err := g.wait(ctx, size)
		require.NoError(t, err)
		g.sending(p)
		passes = append(passes, p)
	}
	require.Empty(t, clk.Sleeps(), "the probe admits all three at once")

	g.done(passes[0], refused)
	require.Equal(t, proven, g.tokens.limit, "the refused probe falls back to the proven limit")

	g.done(passes[1], refused)
	assert.Less(t, g.tokens.limit, proven,
		"the index refused %d tokens while it held %d of the run's: the proven limit (%d) would have let that request in too, so the cut did not answer it", size, size, proven)
}

// Records' README promise (and the doc of the constants in
// minutegate.go): "once a probe is refused it bisects up to it, then
// probes a tenth higher every three minutes, so a long run keeps near the
// limit with a handful of 429s". With requests of 96 records of ~400
// tokens at 100k tokens a minute, 5,000 records took 25-27 virtual minutes
// against an ideal of 19 (13-21 requests refused of ~70).
//
// The cause: requests of 96 records carry
// 38,400 tokens; the gate is a sliding window of a minute, so at its
// steady limit (105,600) it lets in 2 requests in any minute: 76,800
// tokens, 77% of the limit, while the index's bucket (refilled
// continuously) takes a request every 23 s. The probe at 116,160 lets 3
// in and is refused every three minutes, and the proven limit,
// "held" a minute on a bucket's slack, climbs to 1.5-3x the limit at
// times, then collapses to 76,800 with a burst of 429s. Requests of at
// most an eighth of the limit found (minuteRequestShare) fill the window
// to seven eighths at least: 21 minutes, 23-26 refused of ~205.
func TestRecordsKeepNearATokensPerMinuteLimitWithLargeRequests(t *testing.T) {
	const (
		tokensPerMinute = 100_000
		n               = 5000
		tokensEach      = 400 // 1,600 bytes of text: a usual chunk
	)
	clk, srv, idx := tokenLimitedIndex(t, tokensPerMinute)
	recs := recordsOfTokens(n, func(int) int { return tokensEach })
	start := clk.Now()
	res, err := Records(context.Background(), slices.Values(recs), WithIndex(idx), withClock(clk), withRand(maxRand))
	elapsed := clk.Now().Sub(start)
	require.NoError(t, err)
	require.Equal(t, n, res.Upserted)
	ideal := time.Duration(float64(n*tokensEach-tokensPerMinute) / tokensPerMinute * float64(time.Minute))
	t.Logf("virtual time %v (ideal %v), %d requests refused of %d", elapsed, ideal, srv.Stats().RateLimited, res.Stats.Requests)
	// 21-23 minutes over ten runs, with -race and without; 25-27 before.
	assert.Less(t, elapsed, ideal+minuteWindow+ideal/5, "the run keeps near the limit")
}

func TestMinuteGateFits(t *testing.T) {
	items := make([]item, 10)
	for i := range items {
		rec := pinecone.IntegratedRecord{"_id": fmt.Sprint(i), "chunk_text": strings.Repeat("x", 400)} // 100 tokens
		items[i] = item{rec: &rec}
	}
	tests := []struct {
		name    string
		tokens  minuteLimit
		refused bool
		want    int
	}{
		{"no limit known: all", minuteLimit{}, false, 10},
		{"a limit learned from a refusal, searched up from: under the limit, in even requests", minuteLimit{limit: 800, step: 200}, false, 5},
		{"a limit learned from a refusal, above what the records carry: all", minuteLimit{limit: 5000, step: 1250}, false, 10},
		{"a proven limit: an eighth of it", minuteLimit{limit: 4000, proven: 4000}, false, 5},
		{"under a ceiling: an eighth of the limit, in even requests", minuteLimit{limit: 2400, proven: 2400, ceiling: 3000}, false, 2},
		{"a proven limit, just over what the records carry: two even requests, no small one left over", minuteLimit{limit: 7200, proven: 7200}, false, 5},
		{"one record at least", minuteLimit{limit: 80, proven: 80}, false, 1},
		{"refused, learned from their own tokens: in two", minuteLimit{limit: 1000, step: 250}, true, 5},
		{"refused, under a limit learned above them: all", minuteLimit{limit: 5000, step: 1250}, true, 10},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := newMinuteGate(newFakeClock())
			g.tokens = tt.tokens
			assert.Equal(t, tt.want, g.fits(items, tt.refused))
		})
	}
	var none *minuteGate
	assert.Equal(t, 10, none.fits(items, true), "a nil gate fits all")
}

// A batch over the cap goes in the fewest requests that carry it under
// the cap, as even as its records allow: pieces of a k-th of its tokens
// each, rounded down to whole records, took four requests for records of
// 50, 50, 50, 50 and 1 tokens under a cap of 100, which fit in three.
func TestMinuteGateCutsABatchInTheFewestRequests(t *testing.T) {
	tests := []struct {
		name   string
		tokens []int
		want   []int // records a request
	}{
		{"even records: even requests", []int{100, 100, 100, 100, 100, 100}, []int{1, 1, 1, 1, 1, 1}},
		{"four halves and a little", []int{50, 50, 50, 50, 1}, []int{1, 2, 2}},
		{"small records: even requests", []int{10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10}, []int{7, 8}},
		{"a long record first", []int{90, 10, 10, 10, 10, 10}, []int{1, 5}},
		{"uneven records: the rest must fit by its records, not its total", []int{10, 70, 40, 90}, []int{2, 1, 1}},
		{"a record over the cap goes alone", []int{30, 150, 30}, []int{1, 1, 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := newMinuteGate(newFakeClock())
			g.tokens = minuteLimit{limit: 800, proven: 800} // a cap of 100 a request
			items := make([]item, len(tt.tokens))
			for i, n := range tt.tokens {
				rec := pinecone.IntegratedRecord{"_id": fmt.Sprint(i), "chunk_text": strings.Repeat("x", 4*n)}
				items[i] = item{rec: &rec}
			}
			var got []int
			for len(items) > 0 {
				n := g.fits(items, false)
				require.Positive(t, n)
				got = append(got, n)
				items = items[n:]
			}
			assert.Equal(t, tt.want, got)
		})
	}
}

// However uneven the records, the cut takes the fewest requests that carry
// them under the cap: as many as filling each request in turn.
func TestMinuteCapCutTakesTheFewestRequestsForAnyRecords(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		const most = 100
		tokens := make([]int, 1+rng.IntN(12))
		total := 0
		for i := range tokens {
			tokens[i] = 1 + rng.IntN(110)
			total += tokens[i]
		}
		fewest := piecesFilled(tokens, most)
		pieces, rest := 0, tokens
		for len(rest) > 0 {
			sum := 0
			for _, t := range rest {
				sum += t
			}
			n := len(rest)
			if sum > most {
				n = firstPiece(rest, sum, most)
			}
			require.Positive(t, n)
			pieces, rest = pieces+1, rest[n:]
		}
		require.Equal(t, fewest, pieces, "records of %v tokens under a cap of %d", tokens, most)
	}
}

// recordsOfTokens are n integrated records, record i of tokens(i) tokens
// (4 bytes of text each, as estimateTokens counts them).
func recordsOfTokens(n int, tokens func(i int) int) []*pinecone.IntegratedRecord {
	recs := make([]*pinecone.IntegratedRecord, n)
	for i := range recs {
		recs[i] = &pinecone.IntegratedRecord{"_id": fmt.Sprint("r", i), "chunk_text": fmt.Sprintf("%06d", i) + strings.Repeat("x", 4*tokens(i)-6)}
	}
	return recs
}

// README: "once the limit is found, a request carries at most an eighth of
// it, so that whole requests fill each minute". minuteGate.fits returns how
// many of a batch's records, from the first, a request may carry; cutting
// the whole batch evenly into pieces of that many records cut a batch whose
// first two records are long (a document's full chunks) and whose other 94
// are short into 96 one-record requests (126-217 requests, 96-193 of one
// record), though by tokens it fits in two or three. The records that fit
// go first, and the rest is cut again when its turn comes.
func TestMinuteCapCutsABatchByItsTokensNotByItsFirstRecords(t *testing.T) {
	const tokensPerMinute = 20_000
	clk, _, idx := tokenLimitedIndex(t, tokensPerMinute)
	recs := recordsOfTokens(1920, func(i int) int {
		if i%96 < 2 {
			return 1500
		}
		return 20
	})
	var mu sync.Mutex
	requests, ones := 0, 0
	obs := Observer{RequestDone: func(e RequestEvent) {
		mu.Lock()
		defer mu.Unlock()
		requests++
		if e.Records == 1 {
			ones++
		}
	}}
	start := clk.Now()
	res, err := Records(context.Background(), slices.Values(recs), WithIndex(idx), withClock(clk), withRand(maxRand),
		WithObserver(obs), WithLogger(slog.New(slog.DiscardHandler)))
	require.NoError(t, err)
	require.Equal(t, len(recs), res.Upserted)
	mu.Lock()
	defer mu.Unlock()
	t.Logf("virtual %v, %d requests, %d of one record", clk.Now().Sub(start), requests, ones)
	batches := len(recs) / 96
	assert.LessOrEqual(t, ones, 2*batches,
		"a batch of 2 long and 94 short records is cut by tokens (about 3 requests), not into 96 one-record requests because its first two records fill the cap")
}

// recordsLaneOf returns the Limiter's lane of integrated records of the
// default namespace sent through WithRecordsFunc (host ""), made now.
func recordsLaneOf(lim *Limiter) *lane {
	ln := lim.holdLane(laneID{host: "", key: recordKind.laneKey(namespaceKey(""))}, MaxRecordsBatchSize)
	ln.holdRoute(-1)
	return ln
}

// Limiter's doc: "a larger size is tried on a few batches now and then
// (the largest at once in slow start) and adopted when it costs no more
// per record"; batchControl.answer drops a trial whose batch "went out
// smaller (cut to a rate or the request's bytes...)": a trial batch that
// does not go out at its size ends the trial, and the lane goes on.
//
// recutToLane cuts a batch by the per-minute gate's cap (fits), and
// p.child drops sizeProbe: a trial batch cut by the cap was never sent as
// a trial, so batchControl never heard of it. The trial stayed handed out
// (trial.size > 0, sent == trialSamples, out == 0: never overdue) for the
// lane's life: next() handed out no other trial, sendLimit kept the trial's
// size, mayTryConc was false for ever (the concurrency never tried again)
// and raiseConcFloor never ran. A Limiter keeps the lane between calls, so
// a later call against an index whose minute is free again never grew its
// batches either. The piece sent first now goes as the trial, smaller,
// which ends it.
//
// The state below is what two timeouts of full batches of 96 leave (the
// size halved to 48 under a ceiling of 96) and one answer of 48; slow
// start then tries 67 records. The gate has found a limit of 32,000
// tokens: a request carries at most 4,000 (40 records of 100 tokens).
func TestAMinuteCapCutTrialBatchDoesNotStickTheSizeTrial(t *testing.T) {
	clk := newFakeClock()
	lim := &Limiter{clock: clk}
	ln := recordsLaneOf(lim)
	ln.mu.Lock()
	for range 2 { // two timeouts of full batches of 96: the size halves under a ceiling
		ln.batch.answer(batchSample{now: clk.Now(), records: 96, latency: 30 * time.Second, timeout: 30 * time.Second, class: ClassTimeout, spread: 0.3, conc: 4}, ln.tuning)
	}
	ln.batch.answer(batchSample{now: clk.Now(), records: 48, latency: 98 * time.Millisecond, timeout: 30 * time.Second, spread: 0.3, conc: 4}, ln.tuning)
	require.Equal(t, 48, ln.batch.size)
	require.True(t, ln.batch.slowStart)
	ln.mu.Unlock()

	g := lim.minuteGateOf("", clk)
	g.tokens = minuteLimit{limit: 32_000, proven: 32_000, since: clk.Now()}

	var mu sync.Mutex
	var sizes []int
	send := func(_ context.Context, _ string, b []*pinecone.IntegratedRecord) error {
		mu.Lock()
		defer mu.Unlock()
		sizes = append(sizes, len(b))
		clk.Advance(50*time.Millisecond + time.Duration(len(b))*time.Millisecond) // larger requests cost less per record
		return nil
	}
	recs := recordsOfTokens(480, func(int) int { return 100 })
	res, err := Records(context.Background(), slices.Values(recs), WithRecordsFunc(send), WithLimiter(lim),
		withClock(clk), withRand(maxRand), WithConcurrency(1))
	require.NoError(t, err)
	require.Equal(t, len(recs), res.Upserted)
	t.Logf("first call, under the cap: requests of %v", sizes)

	ln.mu.Lock()
	trial := ln.batch.trial
	ln.mu.Unlock()
	assert.False(t, trial.size > 0 && trial.out == 0,
		"every request was answered, yet a trial of %d records is still handed out and unjudged (sent %d, out %d): the cap cut it and dropped its sizeProbe", trial.size, trial.sent, trial.out)

	// The index's minute is free again (the gate knows no limit): a
	// later call through the same Limiter should try a larger size again
	// (67, then more), as it did before the cap cut the trial.
	g.mu.Lock()
	g.tokens = minuteLimit{}
	g.mu.Unlock()
	mu.Lock()
	sizes = nil
	mu.Unlock()
	res, err = Records(context.Background(), slices.Values(recordsOfTokens(2000, func(int) int { return 100 })), WithRecordsFunc(send), WithLimiter(lim),
		withClock(clk), withRand(maxRand), WithConcurrency(1))
	require.NoError(t, err)
	mu.Lock()
	t.Logf("second call, no cap: requests of %v", sizes)
	largest := slices.Max(sizes)
	mu.Unlock()
	assert.Greater(t, largest, 48, "the lane never tries a size above 48 again: its trial is stuck")
}

// A batch refused by the index's tokens limit under a refused probe is
// resent cut by the cap: one retry (Stats.Retries, observers, per batch),
// every record landed once.
func TestAResentBatchCutByTheCapCountsOneRetry(t *testing.T) {
	clk := newFakeClock()
	lim := &Limiter{clock: clk}
	g := lim.minuteGateOf("", clk)
	g.tokens = minuteLimit{limit: 200_000, proven: 100_000, step: 100_000, since: clk.Now()} // a probe
	var mu sync.Mutex
	var calls [][]string
	landed := map[string]int{}
	send := func(_ context.Context, _ string, b []*pinecone.IntegratedRecord) error {
		mu.Lock()
		defer mu.Unlock()
		ids := make([]string, len(b))
		for i, r := range b {
			ids[i] = (*r)["_id"].(string)
		}
		calls = append(calls, ids)
		if len(calls) == 1 {
			return status.Error(codes.ResourceExhausted, "Request failed. You've reached the max embedding tokens per minute (100000) model 'llama-text-embed-v2' and input type 'passage' for the current project.")
		}
		for _, id := range ids {
			landed[id]++
		}
		return nil
	}
	retries := 0
	obs := Observer{Retry: func(RetryEvent) { mu.Lock(); retries++; mu.Unlock() }}
	recs := recordsOfTokens(96, func(int) int { return 200 })
	res, err := Records(context.Background(), slices.Values(recs), WithRecordsFunc(send), WithLimiter(lim),
		withClock(clk), withRand(maxRand), WithConcurrency(1), WithObserver(obs))
	require.NoError(t, err)
	mu.Lock()
	defer mu.Unlock()
	t.Logf("requests: %d, sizes %v", len(calls), func() (s []int) {
		for _, c := range calls {
			s = append(s, len(c))
		}
		return
	}())
	assert.Equal(t, 96, res.Upserted)
	assert.Len(t, landed, 96)
	for id, n := range landed {
		assert.Equal(t, 1, n, id)
	}
	assert.Greater(t, len(calls), 2, "cut")
	assert.Equal(t, 1, res.Stats.Retries)
	assert.Equal(t, 1, retries)
	assert.Equal(t, []int{0, 1}, res.Stats.RetriesPerBatch)
}

// neighbouredMinute emulates a project's embedding tokens per minute as
// a sliding window of a minute (the model minutegate.go's doc reasons
// with: "a window of a minute refuses when that much was taken") that a
// neighbour on the same project (another index, another process) spends
// steadily: a request is refused whole when the neighbour's use, what the
// run landed in the last minute and the request exceed the limit.
type neighbouredMinute struct {
	mu        sync.Mutex
	clk       clock
	limit     int
	neighbour int
	taken     []reviewTaken
	log       []string
	landed    map[string]int
}

type reviewTaken struct {
	at     time.Time
	tokens int
}

func (m *neighbouredMinute) send(_ context.Context, _ string, recs []*pinecone.IntegratedRecord) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.clk.Now()
	for len(m.taken) > 0 && now.Sub(m.taken[0].at) >= time.Minute {
		m.taken = m.taken[1:]
	}
	used := m.neighbour
	for _, x := range m.taken {
		used += x.tokens
	}
	items := make([]item, len(recs))
	for i, r := range recs {
		items[i] = item{rec: r}
	}
	tokens := estimateTokens(items)
	if used+tokens > m.limit {
		m.log = append(m.log, fmt.Sprintf("%s %d records %d tokens: 429", now.Format("15:04:05.000"), len(recs), tokens))
		return status.Error(codes.ResourceExhausted, fmt.Sprintf("Request failed. You've reached the max embedding tokens per minute (%d) model 'llama-text-embed-v2' and input type 'passage' for the current project. To increase this limit, upgrade your plan.", m.limit))
	}
	m.taken = append(m.taken, reviewTaken{now, tokens})
	m.log = append(m.log, fmt.Sprintf("%s %d records %d tokens: ok", now.Format("15:04:05.000"), len(recs), tokens))
	for _, r := range recs {
		m.landed[(*r)["_id"].(string)]++
	}
	return nil
}

// README: "after the first 429 that names such a limit, records are paced
// under what the index took in that minute ... A request carries at most
// the limit learned"; minuteGate.fits: "Items over it go in the fewest
// requests that carry them under it". A project on Pinecone's Starter
// plan embeds 250,000 tokens a minute; a neighbour on the project spends
// 220,000 of them steadily, so a minute leaves 30,000 for this run. A full
// records batch of 96 chunks of 500 tokens (2 kB of text) carries 48,000:
// refused while nothing of the run's is in the window, which the gate
// learns as a limit of the refused request's own size (nextMinuteLimit:
// "at least one request's worth"), and fits did not cut a batch under its
// own size: the batch went out whole on all 9 of its requests, and its 96
// records failed as rate-limited. A batch refused on the tokens limit that
// carries the limit learned or more is resent in two (fits), until its
// pieces land.
func TestARequestRefusedAloneIsResentSmaller(t *testing.T) {
	clk := newFakeClock()
	idx := &neighbouredMinute{clk: clk, limit: 250_000, neighbour: 220_000, landed: map[string]int{}}
	recs := recordsOfTokens(200, func(int) int { return 500 })
	res, err := Records(context.Background(), slices.Values(recs), WithRecordsFunc(idx.send), withClock(clk), withRand(maxRand),
		WithLogger(slog.New(slog.DiscardHandler)), WithConcurrency(1))
	idx.mu.Lock()
	defer idx.mu.Unlock()
	for _, l := range idx.log[:min(len(idx.log), 16)] {
		t.Log(l)
	}
	require.NoError(t, err, "every record fits in a request of 30,000 tokens, which the index takes every minute")
	assert.Equal(t, len(recs), res.Upserted)
	assert.Len(t, idx.landed, len(recs))
}

// README (Records): "A request carries at most the limit learned". A batch
// is cut to the gate's cap before it waits for its pass of the gate and
// for the lane; a refusal that lowers the limit while it waits (for a slot
// held by the very request the index refuses) sent it at the size cut
// under the old limit: 9,600 tokens when the limit learned was 4,800, which
// the index that had just refused 4,800 refused too. It goes back to be
// cut, as a batch over the lane's own limit does.
func TestARequestCutUnderALimitThatFellWhileItWaitedIsCutAgain(t *testing.T) {
	clk := newFakeClock()
	lim := &Limiter{clock: clk}
	g := lim.minuteGateOf("", clk)
	// A limit learned from an earlier refusal, searched up from.
	g.tokens = minuteLimit{limit: 20_000, step: 5_000, since: clk.Now()}
	var mu sync.Mutex
	type sent struct{ tokens, limit int }
	var calls []sent
	setup := true
	send := func(_ context.Context, _ string, b []*pinecone.IntegratedRecord) error {
		items := make([]item, len(b))
		for i, r := range b {
			items[i] = item{rec: r}
		}
		g.mu.Lock()
		limit := g.tokens.limit
		g.mu.Unlock()
		mu.Lock()
		calls = append(calls, sent{estimateTokens(items), limit})
		n := len(calls)
		mu.Unlock()
		if n > 1 {
			return nil
		}
		// The first request is answered once the second batch holds its
		// pass of the gate (it then waits for the one slot).
		ok := false
		for range 2000 {
			g.mu.Lock()
			ok = len(g.window) >= 2
			g.mu.Unlock()
			if ok {
				break
			}
			time.Sleep(time.Millisecond)
		}
		mu.Lock()
		setup = ok
		mu.Unlock()
		return status.Error(codes.ResourceExhausted, "Request failed. You've reached the max embedding tokens per minute (250000) model 'llama-text-embed-v2' and input type 'passage' for the current project.")
	}
	// Two batches of 96: 4,800 tokens, then 9,600.
	recs := recordsOfTokens(192, func(i int) int {
		if i < 96 {
			return 50
		}
		return 100
	})
	res, err := Records(context.Background(), slices.Values(recs), WithRecordsFunc(send), WithLimiter(lim),
		withClock(clk), withRand(maxRand), WithConcurrency(1), WithLogger(slog.New(slog.DiscardHandler)))
	require.NoError(t, err)
	require.Equal(t, 192, res.Upserted)
	mu.Lock()
	defer mu.Unlock()
	require.True(t, setup, "the second batch never held a pass while the first was in flight")
	t.Logf("requests (tokens, limit learned when sent): %v", calls)
	for i, c := range calls {
		assert.LessOrEqual(t, c.tokens, c.limit, "request %d carries %d tokens; the limit learned when it was sent is %d", i+1, c.tokens, c.limit)
	}
}

// A probe wave of the minute gate: the run's requests of the minute before
// went a minute ago (the gate's own pace lets the next wave in when they
// leave the window), and of the two requests of the new wave the index
// accepts the first and refuses the second, the probe's excess. A 429 is
// answered at once while an accepted request is embedded first, so the
// refusal is heard before the acceptance. The index had accepted a request
// of the run (the first of the wave) when it refused the second, so this
// is no blind refusal (docs: "when the index had accepted none of the
// run's requests in the minute before"): the refused probe falls back to
// the proven limit under a ceiling of the refused one. The refusal, heard
// first, is taken as blind; the acceptance of a request admitted before it
// replays it on the limit kept (found by the second regression review:
// the acceptance restored the probe's limit with no ceiling, and over a
// 20-minute run at 6,000 tokens a minute the limit went to 12,960, at
// 23-25 429s against 10).
func TestARefusedProbeHeardBeforeItsWaveMatesAcceptanceKeepsItsCeiling(t *testing.T) {
	for _, pause := range []time.Duration{0, 90 * time.Second} {
		t.Run(fmt.Sprintf("the wave %v after the gate let it in", pause), func(t *testing.T) {
			ctx := context.Background()
			tokensRefused := &Error{Class: ClassRateLimited, Limit: LimitEmbedTokens}
			clk := newFakeClock()
			g := newMinuteGate(clk)
			g.tokens = minuteLimit{limit: 1000, proven: 1000, ceiling: 1100, since: clk.Now()}
			for range 2 { // the minute before: the proven limit, accepted
				p, err := g.wait(ctx, 500)
				require.NoError(t, err)
				g.sending(p)
				g.done(p, nil)
			}
			clk.Advance(pause) // 0: the gate's own pace; or the caller paused
			// A probe: the gate tries 2000 a minute above the proven 1000.
			g.mu.Lock()
			g.tokens = minuteLimit{limit: 2000, proven: 1000, step: 800, since: clk.Now()}
			g.mu.Unlock()
			first, err := g.wait(ctx, 1500)
			require.NoError(t, err)
			g.mu.Lock()
			probe := g.tokens // the limit the wave goes under, above the proven one
			g.mu.Unlock()
			require.Greater(t, probe.limit, probe.proven)
			g.sending(first)
			second, err := g.wait(ctx, 500)
			require.NoError(t, err)
			g.sending(second)
			g.done(second, tokensRefused) // the 429, heard first
			g.done(first, nil)            // the first of the wave, accepted before the second was refused
			g.mu.Lock()
			got := g.tokens
			g.mu.Unlock()
			assert.Equal(t, probe.proven, got.limit, "the refused probe falls back to the proven limit")
			assert.Equal(t, probe.limit, got.ceiling, "under a ceiling of the refused probe")
		})
	}
}

// A request the gate admitted before a blind refusal but that was only
// sent long after it (it waited for its lane: another namespace's slots,
// the lane's rate cut after the 429) and accepted once the neighbour's
// spell was over is not "the run's own wave answered out of order": its
// acceptance says nothing of who spent the minute the refusal met. The
// gate numbers requests as they go out, not as it admits them (found by
// the third regression review: it replayed the refusal, and learned the
// refused request's worth as the limit, the very outcome blindRefusal
// exists to avoid).
func TestAnAcceptanceSentAfterABlindRefusalIsNotItsWaveMates(t *testing.T) {
	for _, known := range []int{0, 6000} {
		ctx := context.Background()
		tokensRefused := &Error{Class: ClassRateLimited, Limit: LimitEmbedTokens}
		clk := newFakeClock()
		g := newMinuteGate(clk)
		g.tokens = minuteLimit{limit: known, since: clk.Now()}
		late, err := g.wait(ctx, 500) // admitted; waits for its lane
		require.NoError(t, err)
		refused, err := g.wait(ctx, 500)
		require.NoError(t, err)
		g.sending(refused)
		g.done(refused, tokensRefused) // another job spent the minute: blind
		g.mu.Lock()
		require.True(t, g.tokens.blind())
		g.mu.Unlock()
		clk.Advance(90 * time.Second) // the neighbour is gone
		g.sending(late)               // sent 90s after the refusal was heard
		g.done(late, nil)
		g.mu.Lock()
		got := g.tokens
		g.mu.Unlock()
		assert.False(t, got.blind())
		assert.Equal(t, known, got.limit, "known %d: the gate should go back to what it knew, not learn the blind refusal's 500", known)
	}
}
