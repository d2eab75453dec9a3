package upserttest_test

import (
	"math"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"google.golang.org/grpc/codes"

	"github.com/upsertlib/upsert/upserttest"
)

func TestOutageFollowsElapsedTime(t *testing.T) {
	f := upserttest.Outage(4*time.Second, time.Second, codes.Unavailable)
	tests := []struct {
		elapsed time.Duration
		want    codes.Code
	}{
		{0, codes.OK},
		{2999 * time.Millisecond, codes.OK},
		{3 * time.Second, codes.Unavailable},
		{3999 * time.Millisecond, codes.Unavailable},
		{4 * time.Second, codes.OK},
		{6999 * time.Millisecond, codes.OK},
		{7500 * time.Millisecond, codes.Unavailable},
		{8 * time.Second, codes.OK},
	}
	for _, tt := range tests {
		t.Run("at "+tt.elapsed.String()+" the answer is "+tt.want.String(), func(t *testing.T) {
			assert.Equal(t, tt.want, f(upserttest.Request{Elapsed: tt.elapsed}).Code)
		})
	}
	assert.Panics(t, func() { upserttest.Outage(time.Second, 2*time.Second, codes.Unavailable) })
}

func TestRandomScriptsAreDeterministic(t *testing.T) {
	scripts := []struct {
		name string
		make func(seed int64) upserttest.FaultFunc
		hit  func(upserttest.Fault) bool
	}{
		{"ErrorRate", func(seed int64) upserttest.FaultFunc { return upserttest.ErrorRate(codes.Internal, 0.3, seed) },
			func(f upserttest.Fault) bool { return f.Code == codes.Internal }},
		{"AmbiguousTimeouts", func(seed int64) upserttest.FaultFunc { return upserttest.AmbiguousTimeouts(0.3, time.Second, seed) },
			func(f upserttest.Fault) bool { return f.Code == codes.OK && f.Delay == time.Second }},
		{"PartialWrites", func(seed int64) upserttest.FaultFunc { return upserttest.PartialWrites(0.3, seed) },
			func(f upserttest.Fault) bool { return f.Code == codes.Internal && f.Write == 2 }},
		{"ConnectionResets", func(seed int64) upserttest.FaultFunc { return upserttest.ConnectionResets(0.3, seed) },
			func(f upserttest.Fault) bool { return f.Reset }},
	}
	for _, s := range scripts {
		t.Run(s.name+" hits the same requests for the same seed, about p of them", func(t *testing.T) {
			a, b, other := s.make(42), s.make(42), s.make(43)
			const n = 10000
			hits, same, differ := 0, 0, 0
			for seq := 1; seq <= n; seq++ {
				r := upserttest.Request{Seq: seq, IDs: []string{"a", "b", "c", "d", "e"}}
				ha := s.hit(a(r))
				if ha == s.hit(b(r)) {
					same++
				}
				if ha != s.hit(other(r)) {
					differ++
				}
				if ha {
					hits++
				}
			}
			assert.Equal(t, n, same)
			assert.InDelta(t, 0.3, float64(hits)/n, 0.02)
			assert.Positive(t, differ, "another seed picks other requests")
		})
	}

	t.Run("p = 0 never hits and p = 1 always does", func(t *testing.T) {
		never, always := upserttest.ErrorRate(codes.Internal, 0, 1), upserttest.ErrorRate(codes.Internal, 1, 1)
		for seq := 1; seq <= 1000; seq++ {
			assert.Equal(t, codes.OK, never(upserttest.Request{Seq: seq}).Code)
			assert.Equal(t, codes.Internal, always(upserttest.Request{Seq: seq}).Code)
		}
	})
}

func TestRateLimitBurstCoversItsSeqRange(t *testing.T) {
	f := upserttest.RateLimitBurst(3, 2)
	var got []codes.Code
	for seq := 1; seq <= 6; seq++ {
		got = append(got, f(upserttest.Request{Seq: seq}).Code)
	}
	assert.Equal(t, []codes.Code{codes.OK, codes.OK, codes.ResourceExhausted, codes.ResourceExhausted, codes.OK, codes.OK}, got)
}

func TestChainReturnsTheFirstEffectiveFault(t *testing.T) {
	none := func(upserttest.Request) upserttest.Fault { return upserttest.Fault{Write: 3} }
	delay := func(upserttest.Request) upserttest.Fault { return upserttest.Fault{Delay: time.Second} }
	fail := func(upserttest.Request) upserttest.Fault { return upserttest.Fault{Code: codes.Internal} }

	assert.Equal(t, upserttest.Fault{Delay: time.Second}, upserttest.Chain(none, nil, delay, fail)(upserttest.Request{}))
	assert.Equal(t, upserttest.Fault{Code: codes.Internal}, upserttest.Chain(none, fail, delay)(upserttest.Request{}))
	assert.Equal(t, upserttest.Fault{}, upserttest.Chain(none)(upserttest.Request{}), "a fault that changes nothing does not win")
	assert.Equal(t, upserttest.Fault{}, upserttest.Chain()(upserttest.Request{}))
}

// A fault that only sets RetryAfter, its answer OK, is not lost in a
// Chain: Fault.RetryAfter is sent "whatever the answer, OK included". The
// answer's own RetryAfter wins; without one, the first set by a fault
// asked before it is kept.
func TestChainKeepsTheRetryAfterOfAFaultThatOnlySetsIt(t *testing.T) {
	hint := func(d time.Duration) upserttest.FaultFunc {
		return func(upserttest.Request) upserttest.Fault { return upserttest.Fault{RetryAfter: d} }
	}
	fail := func(d time.Duration) upserttest.FaultFunc {
		return func(upserttest.Request) upserttest.Fault {
			return upserttest.Fault{Code: codes.Internal, RetryAfter: d}
		}
	}
	tests := []struct {
		name  string
		chain upserttest.FaultFunc
		want  upserttest.Fault
	}{
		{"alone, it is the answer", upserttest.Chain(hint(2 * time.Second)),
			upserttest.Fault{RetryAfter: 2 * time.Second}},
		{"it goes with a later answer that sets none", upserttest.Chain(hint(2*time.Second), nil, fail(0)),
			upserttest.Fault{Code: codes.Internal, RetryAfter: 2 * time.Second}},
		{"a later answer's own wins", upserttest.Chain(hint(2*time.Second), fail(5*time.Second)),
			upserttest.Fault{Code: codes.Internal, RetryAfter: 5 * time.Second}},
		{"the first of two is kept", upserttest.Chain(hint(2*time.Second), hint(3*time.Second)),
			upserttest.Fault{RetryAfter: 2 * time.Second}},
		{"one after the answer is not asked", upserttest.Chain(fail(0), hint(2*time.Second)),
			upserttest.Fault{Code: codes.Internal}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, tt.chain(upserttest.Request{}))
		})
	}

	t.Run("the server sends it with an OK answer", func(t *testing.T) {
		srv := start(t, upserttest.WithFaults(upserttest.Chain(hint(time.Second), upserttest.RejectIDs("bad"))))
		status, header, _ := post(t, srv, "/records/namespaces/ns/upsert", "k", `{"_id":"a","chunk_text":"t"}`)
		assert.Equal(t, http.StatusCreated, status)
		assert.Equal(t, "1", header.Get("Retry-After"))
	})
}

func TestRejectIDs(t *testing.T) {
	f := upserttest.RejectIDs("bad", "worse")
	assert.Equal(t, codes.OK, f(upserttest.Request{IDs: []string{"a", "b"}}).Code)
	ft := f(upserttest.Request{IDs: []string{"a", "worse"}})
	assert.Equal(t, codes.InvalidArgument, ft.Code)
	assert.NotContains(t, ft.Message, "worse")
}

// The fault scripts refuse nonsense arguments as the options do, with a
// panic naming the function and the rule.
func TestFaultScriptsPanicOnNonsenseArguments(t *testing.T) {
	tests := []struct {
		name string
		make func()
		want string
	}{
		{"ErrorRate p > 1", func() { upserttest.ErrorRate(codes.Unavailable, 1.5, 1) },
			"upserttest: ErrorRate(Unavailable, 1.5, 1): need 0 <= p <= 1"},
		{"ErrorRate p < 0", func() { upserttest.ErrorRate(codes.Unavailable, -0.1, 1) },
			"upserttest: ErrorRate(Unavailable, -0.1, 1): need 0 <= p <= 1"},
		{"ErrorRate p NaN", func() { upserttest.ErrorRate(codes.Unavailable, math.NaN(), 1) },
			"upserttest: ErrorRate(Unavailable, NaN, 1): need 0 <= p <= 1"},
		{"PartialWrites p > 1", func() { upserttest.PartialWrites(2, 1) },
			"upserttest: PartialWrites(2, 1): need 0 <= p <= 1"},
		{"ConnectionResets p < 0", func() { upserttest.ConnectionResets(-1, 1) },
			"upserttest: ConnectionResets(-1, 1): need 0 <= p <= 1"},
		{"AmbiguousTimeouts p > 1", func() { upserttest.AmbiguousTimeouts(1.1, time.Second, 1) },
			"upserttest: AmbiguousTimeouts(1.1, 1s, 1): need 0 <= p <= 1"},
		{"AmbiguousTimeouts delay < 0", func() { upserttest.AmbiguousTimeouts(0.5, -time.Second, 1) },
			"upserttest: AmbiguousTimeouts(0.5, -1s, 1): need delay >= 0"},
		{"RateLimitBurst n < 0", func() { upserttest.RateLimitBurst(1, -1) },
			"upserttest: RateLimitBurst(1, -1): need n >= 0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.PanicsWithValue(t, tt.want, tt.make)
		})
	}
	assert.NotPanics(t, func() {
		upserttest.ErrorRate(codes.Unavailable, 0, 1)
		upserttest.PartialWrites(1, 1)
		upserttest.AmbiguousTimeouts(1, 0, 1)
		upserttest.RateLimitBurst(1, 0)
	}, "the bounds are allowed")
}
