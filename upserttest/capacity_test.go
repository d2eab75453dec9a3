package upserttest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
)

func TestAdmission(t *testing.T) {
	t0 := time.Unix(1000, 0)

	t.Run("a rejection by one bucket takes no tokens from the others", func(t *testing.T) {
		admit := admitter(WithRate(1, 10), WithRequestRate(1, 1))

		require.True(t, admit(t0, 6, 0))  // vectors 10 -> 4, requests 1 -> 0
		require.False(t, admit(t0, 4, 0)) // no request token
		// One second later: one request token, and 4+1 vector tokens if the
		// rejected request took none.
		assert.True(t, admit(t0.Add(time.Second), 5, 0))
	})

	t.Run("a request larger than the burst waits for a full bucket and leaves a debt", func(t *testing.T) {
		admit := admitter(WithRate(10, 5))

		assert.True(t, admit(t0, 50, 0), "a full bucket admits it")
		assert.False(t, admit(t0.Add(4*time.Second), 1, 0), "45 tokens of debt, 40 repaid")
		assert.True(t, admit(t0.Add(4600*time.Millisecond), 1, 0), "the rate is kept: 50 vectors cost 5 s")
		assert.False(t, admit(t0.Add(4700*time.Millisecond), 50, 0), "a large request waits for a full bucket")
		assert.True(t, admit(t0.Add(5100*time.Millisecond), 50, 0))
	})

	t.Run("buckets refill at their rate", func(t *testing.T) {
		admit := admitter(WithByteRate(1000, 1000))

		assert.True(t, admit(t0, 1, 1000))
		assert.False(t, admit(t0.Add(100*time.Millisecond), 1, 200))
		assert.True(t, admit(t0.Add(200*time.Millisecond), 1, 200))
	})

	t.Run("a burst below 1 means one second's worth", func(t *testing.T) {
		assert.Equal(t, bucketConfig{rate: 2.5, burst: 3}, newBucketConfig("x", 2.5, 0))
		assert.Equal(t, bucketConfig{}, newBucketConfig("x", 0, 10), "a zero rate disables the bucket")
	})

	t.Run("Serverless sets 50 MB/s (10^6 bytes a MB) and 100 requests/s with a second of burst", func(t *testing.T) {
		cfg := defaultConfig()
		Serverless()(&cfg)
		assert.Equal(t, bucketConfig{rate: 50e6, burst: 50e6}, cfg.byteRate)
		assert.Equal(t, bucketConfig{rate: 100, burst: 100}, cfg.requestRate)
		assert.False(t, cfg.vectorRate.enabled())
	})
}

// admitter returns the admission of a server with opts, for namespace "ns".
func admitter(opts ...Option) func(now time.Time, vectors, bytes int) bool {
	cfg := defaultConfig()
	for _, o := range opts {
		o(&cfg)
	}
	s := &Server{cfg: cfg, caps: make(map[string]*nsCapacity), stats: Stats{Codes: make(map[codes.Code]int)}}
	s.limits.reset(&s.cfg)
	return func(now time.Time, vectors, bytes int) bool {
		return s.admit(admission{namespace: "ns", now: now, items: vectors, bytes: bytes}) == nil
	}
}

func TestSlotPool(t *testing.T) {
	ctx := context.Background()
	stop := make(chan struct{})
	noQueue := func(int) {}

	t.Run("waiters get slots in arrival order", func(t *testing.T) {
		p := &slotPool{size: 1}
		require.NoError(t, p.acquire(ctx, stop, noQueue))

		order := make(chan int, 3)
		queued := make(chan struct{}, 3)
		for i := range 3 {
			go func() {
				assert.NoError(t, p.acquire(ctx, stop, func(d int) {
					if d > 0 {
						queued <- struct{}{}
					}
				}))
				order <- i
				p.release()
			}()
			<-queued // make arrival order deterministic
		}
		p.release()
		assert.Equal(t, []int{0, 1, 2}, []int{<-order, <-order, <-order})
	})

	t.Run("a waiter whose context ends leaves the queue", func(t *testing.T) {
		p := &slotPool{size: 1}
		require.NoError(t, p.acquire(ctx, stop, noQueue))
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		assert.ErrorIs(t, p.acquire(cctx, stop, noQueue), context.Canceled)
		assert.Empty(t, p.queue)
		p.release()
		assert.Zero(t, p.used)
	})

	t.Run("stopping ends every wait", func(t *testing.T) {
		p := &slotPool{size: 1}
		require.NoError(t, p.acquire(ctx, stop, noQueue))
		stopped := make(chan struct{})
		close(stopped)
		assert.Equal(t, errStopped, p.acquire(ctx, stopped, noQueue))
	})
}

func TestLatencyFormula(t *testing.T) {
	cfg := defaultConfig()
	WithLatency(10*time.Millisecond, time.Millisecond)(&cfg)
	WithByteLatency(time.Second)(&cfg)
	assert.Equal(t, 10*time.Millisecond+5*time.Millisecond+500*time.Millisecond, cfg.latency(5, 1<<19))

	WithSlowAbove(4, 2)(&cfg)
	assert.Equal(t, 2*(10*time.Millisecond+5*time.Millisecond), cfg.latency(5, 0))
	assert.Equal(t, 10*time.Millisecond+4*time.Millisecond, cfg.latency(4, 0), "requests at the threshold are not slowed")
}

func TestBucketTime(t *testing.T) {
	cfg := defaultConfig()
	WithCapacityChange(5*time.Second, 1)(&cfg)
	WithCapacityChange(2*time.Second, 3)(&cfg) // replaced by the next
	WithCapacityChange(2*time.Second, 0.25)(&cfg)
	require.Equal(t, []CapacityChange{{2 * time.Second, 0.25}, {5 * time.Second, 1}}, cfg.changes, "sorted, the last of one time kept")

	start := time.Unix(1000, 0)
	tests := []struct {
		elapsed, want time.Duration
		factor        float64
	}{
		{0, 0, 1},
		{time.Second, time.Second, 1},
		{2 * time.Second, 2 * time.Second, 0.25},
		{3 * time.Second, 2250 * time.Millisecond, 0.25},
		{6 * time.Second, 2*time.Second + 750*time.Millisecond + time.Second, 1},
	}
	for _, tt := range tests {
		t.Run(tt.elapsed.String(), func(t *testing.T) {
			assert.Equal(t, start.Add(tt.want), cfg.bucketTime(start, start.Add(tt.elapsed)))
			assert.Equal(t, tt.factor, cfg.factorAt(tt.elapsed))
		})
	}
}
