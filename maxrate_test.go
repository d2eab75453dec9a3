package upsert

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/pinecone-io/go-pinecone/v5/pinecone"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestPacerSpacesRequestsByTheirRecords(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	type ask struct {
		at   time.Duration // after t0
		n    int
		wait time.Duration
	}
	tests := []struct {
		name string
		rate float64
		asks []ask
	}{
		{"the first request goes at once", 1000, []ask{{0, 500, 0}}},
		{"the next waits for the records before it", 1000, []ask{{0, 500, 0}, {0, 100, ms(500)}, {0, 100, ms(600)}}},
		{"a request asked after its turn goes at once", 1000, []ask{{0, 100, 0}, {ms(300), 100, 0}}},
		{"an idle spell earns no burst", 1000, []ask{{0, 100, 0}, {ms(5000), 100, 0}, {ms(5000), 100, ms(100)}}},
		{"a request part way through its wait waits the rest", 100, []ask{{0, 100, 0}, {ms(400), 10, ms(600)}}},
		{"a request of no records waits its turn and books none", 100, []ask{{0, 100, 0}, {0, 0, ms(1000)}, {0, 1, ms(1000)}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newPacer(tt.rate)
			for i, a := range tt.asks {
				assert.Equal(t, a.wait, p.reserveAt(t0.Add(a.at), a.n), "ask %d", i)
			}
		})
	}
	t.Run("no cap waits for nothing", func(t *testing.T) {
		p := newPacer(0)
		assert.Nil(t, p)
		assert.Zero(t, p.reserveAt(t0, 1000))
	})
}

// arrivals is an UpsertFunc that accepts everything and notes when each
// request arrived and how many records it carried.
type arrivals struct {
	clk *fakeClock
	mu  sync.Mutex
	at  []time.Time
	n   []int
}

func (a *arrivals) note(n int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.at, a.n = append(a.at, a.clk.Now()), append(a.n, n)
}

// The records sent before each request fit under the cap since the call
// began, plus one request's. The bound runs from the clock's start, not
// from the first arrival: the fake clock adds up the sleeps of requests
// that wait together, so the first request can be noted after later ones
// have moved the clock, while none is noted before its booked start. Only
// this bound, not the spacing, is exact here (the pacer's own test has the
// spacing).
func TestAllKeepsUnderItsMaxRate(t *testing.T) {
	const rate, batch, records = 2000, 100, 5000
	for _, conc := range []int{0, 1, 8} {
		t.Run(fmt.Sprintf("concurrency %d (0: adaptive)", conc), func(t *testing.T) {
			clk := newFakeClock()
			start := clk.Now()
			a := &arrivals{clk: clk}
			fi := newFakeIndex(func(_ int, ids []string) error { a.note(len(ids)); return nil })
			opts := []Option{WithUpsertFunc(fi.Upsert), withClock(clk), withRand(maxRand), WithBatchSize(batch), WithMaxRate(rate)}
			if conc > 0 {
				opts = append(opts, WithConcurrency(conc))
			}
			res, err := All(context.Background(), vectors(records, 2), opts...)
			require.NoError(t, err)
			assert.Equal(t, records, res.Upserted)
			sent := 0
			for i, at := range a.at {
				allowed := rate*at.Sub(start).Seconds() + batch
				require.LessOrEqual(t, float64(sent), allowed, "request %d: the records sent before it", i)
				sent += a.n[i]
			}
			assert.Equal(t, records, sent)
		})
	}
}

// WithMaxRate accepts any finite rate above 0; a request's share of time
// at a tiny rate must not overflow into a negative duration that lets
// every later request go at once.
func TestPacerKeepsTheCapAtATinyRate(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, rate := range []float64{1e-8, 1e-12, 5e-324} {
		var c config
		WithMaxRate(rate)(&c)
		require.Empty(t, c.errs, "a finite rate above 0 is accepted")
		p := newPacer(c.maxRate)
		assert.Zero(t, p.reserveAt(now, 1000), "the first request goes at once")
		assert.Positive(t, p.reserveAt(now, 1000), "rate %v: the second waits", rate)
	}
}

// WithMaxRate: "over any span the call sends at most the cap's records
// plus one request's". Requests that passed the pacer while the lane held
// them back (here the index's Retry-After; a breaker outage or a slow
// request in every slot does the same) must not then go out together.
func TestMaxRateHoldsAfterTheLanePausedForRetryAfter(t *testing.T) {
	const rate, batch, records = 10, 10, 60
	clk := newEventClock()
	var mu sync.Mutex
	var at []time.Time
	var n []int
	send := func(_ context.Context, _ string, b []*pinecone.Vector) error {
		mu.Lock()
		defer mu.Unlock()
		at, n = append(at, clk.Now()), append(n, len(b))
		if len(at) == 1 {
			return &Error{Class: ClassRateLimited, RetryAfter: 10 * time.Second, Err: errors.New("429")}
		}
		return nil
	}
	res, err := All(context.Background(), vectors(records, 2), WithUpsertFunc(send), WithBatchSize(batch), WithConcurrency(4),
		WithMaxRate(rate), withClock(clk), withRand(maxRand))
	require.NoError(t, err)
	require.Equal(t, records, res.Upserted)
	mu.Lock()
	defer mu.Unlock()
	for i := range at {
		sent := 0
		for j := i; j < len(at); j++ {
			sent += n[j]
			span := at[j].Sub(at[i])
			require.LessOrEqual(t, float64(sent), rate*span.Seconds()+batch,
				"requests %d..%d: %d records in %v (sent at %v)", i, j, sent, span, at)
		}
	}
}
