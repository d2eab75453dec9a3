package upsert

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/pinecone-io/go-pinecone/v5/pinecone"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/upsertlib/upsert/upserttest"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

func TestClassify(t *testing.T) {
	httpErr := func(code int) error {
		return &pinecone.PineconeError{Code: code, Msg: fmt.Errorf("HTTP %d", code)}
	}
	httpMsg := func(code int, msg string) error { return &pinecone.PineconeError{Code: code, Msg: errors.New(msg)} }
	grpcErr := func(c codes.Code, msg string) error { return status.Error(c, msg) }
	netTimeout := &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}
	tests := []struct {
		name string
		err  error
		want Class
	}{
		{"HTTP 429 is rate-limited", httpErr(429), ClassRateLimited},
		{"HTTP 408 is a timeout", httpErr(408), ClassTimeout},
		{"HTTP 504 is a timeout", httpErr(504), ClassTimeout},
		{"HTTP 500 is a server error", httpErr(500), ClassServer},
		{"HTTP 502 is a server error", httpErr(502), ClassServer},
		{"HTTP 503 is a server error", httpErr(503), ClassServer},
		{"HTTP 413 is too large", httpErr(413), ClassTooLarge},
		{"HTTP 400 is invalid", httpErr(400), ClassInvalid},
		{"HTTP 422 is invalid", httpErr(422), ClassInvalid},
		{"HTTP 409 is invalid", httpErr(409), ClassInvalid},
		{"HTTP 401 is denied", httpErr(401), ClassDenied},
		{"HTTP 403 is denied", httpErr(403), ClassDenied},
		{"HTTP 404 is denied", httpErr(404), ClassDenied},
		// A quota's text under the statuses of the gRPC codes it is read under.
		{"HTTP 400 with a monthly quota's text is quota-exceeded", httpMsg(400, `{"code":3,"message":"You've reached your write unit limit for the current month."}`), ClassQuotaExceeded},
		{"HTTP 409 (ALREADY_EXISTS) with a quota's text is quota-exceeded", httpMsg(409, `{"code":6,"message":"QUOTA_EXCEEDED"}`), ClassQuotaExceeded},
		{"HTTP 409 ABORTED with a quota's text is a server error, as over gRPC", httpMsg(409, `{"code":10,"message":"QUOTA_EXCEEDED"}`), ClassServer},
		{"HTTP 422 with a quota's text is invalid: no gRPC code maps to it", httpMsg(422, "QUOTA_EXCEEDED"), ClassInvalid},
		// What an answer quotes is the caller's data, not Pinecone's words.
		{"INVALID_ARGUMENT quoting an id with a quota's text is invalid", grpcErr(codes.InvalidArgument, "Vector ID must be ASCII, but got 'quota exceeded – é'"), ClassInvalid},
		{"HTTP 400 quoting a metadata key with a quota's text is invalid", httpMsg(400, `{"code":3,"message":"Metadata key '$quota_exceeded' must not start with '$'"}`), ClassInvalid},
		{"INVALID_ARGUMENT quoting an id holding an apostrophe and a quota's text is invalid", grpcErr(codes.InvalidArgument, "Vector ID 'it's-quota_exceeded' is refused"), ClassInvalid},
		{"INVALID_ARGUMENT quoting two keys, the second with a quota's text, is invalid", grpcErr(codes.InvalidArgument, "Metadata keys 'a' and 'l'été quota exceeded' are refused"), ClassInvalid},
		{"INVALID_ARGUMENT quoting a key with the too-large text is invalid", grpcErr(codes.InvalidArgument, "Metadata key 'larger than the maximum supported size' is bad"), ClassInvalid},
		{"a quota's text beside a quoted index name is quota-exceeded", grpcErr(codes.PermissionDenied, "Request failed. You've reached the max namespaces allowed in serverless index 'docs' (100)."), ClassQuotaExceeded},
		{"RESOURCE_EXHAUSTED naming a namespace 'larger than max' is rate-limited", grpcErr(codes.ResourceExhausted, "Request failed. You've reached the upsert QPS limit for namespace 'larger than max' (100 QPS)."), ClassRateLimited},
		{"a wrapped HTTP 429 is rate-limited", fmt.Errorf("upsert: %w", httpErr(429)), ClassRateLimited},
		{"gRPC RESOURCE_EXHAUSTED is rate-limited", grpcErr(codes.ResourceExhausted, "Request failed. You've reached the max upsert size limit per second"), ClassRateLimited},
		{"gRPC's own received-message-too-large is too large", grpcErr(codes.ResourceExhausted, "grpc: received message larger than max (2500000 vs. 2097152)"), ClassTooLarge},
		{"gRPC's own trying-to-send-too-large is too large", grpcErr(codes.ResourceExhausted, "trying to send message larger than max (5000000 vs. 4194304)"), ClassTooLarge},
		{"gRPC DEADLINE_EXCEEDED is a timeout", grpcErr(codes.DeadlineExceeded, "context deadline exceeded"), ClassTimeout},
		{"gRPC UNAVAILABLE is a server error", grpcErr(codes.Unavailable, "connection reset"), ClassServer},
		{"gRPC INTERNAL is a server error", grpcErr(codes.Internal, "oops"), ClassServer},
		{"gRPC's own marshal failure is invalid: nothing was sent", grpcErr(codes.Internal, "grpc: error while marshaling: string field contains invalid UTF-8"), ClassInvalid},
		{"gRPC UNKNOWN is a server error", grpcErr(codes.Unknown, "?"), ClassServer},
		{"gRPC ABORTED is a server error", grpcErr(codes.Aborted, "conflict"), ClassServer},
		{"gRPC DATA_LOSS is a server error", grpcErr(codes.DataLoss, "lost"), ClassServer},
		{"gRPC INVALID_ARGUMENT is invalid", grpcErr(codes.InvalidArgument, "Vector dimension 3 does not match the dimension of the index 4"), ClassInvalid},
		{"gRPC FAILED_PRECONDITION is invalid", grpcErr(codes.FailedPrecondition, "x"), ClassInvalid},
		{"gRPC OUT_OF_RANGE is invalid", grpcErr(codes.OutOfRange, "x"), ClassInvalid},
		{"gRPC ALREADY_EXISTS is invalid", grpcErr(codes.AlreadyExists, "x"), ClassInvalid},
		{"gRPC UNAUTHENTICATED is denied", grpcErr(codes.Unauthenticated, "bad key"), ClassDenied},
		{"gRPC PERMISSION_DENIED is denied", grpcErr(codes.PermissionDenied, "x"), ClassDenied},
		{"gRPC NOT_FOUND is denied", grpcErr(codes.NotFound, "no such index"), ClassDenied},
		{"gRPC UNIMPLEMENTED is denied", grpcErr(codes.Unimplemented, "x"), ClassDenied},
		{"gRPC CANCELED is canceled", grpcErr(codes.Canceled, "context canceled"), ClassCanceled},
		{"a wrapped gRPC status keeps its class", fmt.Errorf("batch 3: %w", grpcErr(codes.ResourceExhausted, "slow down")), ClassRateLimited},
		{"context.Canceled is canceled", context.Canceled, ClassCanceled},
		{"context.DeadlineExceeded is a timeout", context.DeadlineExceeded, ClassTimeout},
		{"a wrapped deadline is a timeout", fmt.Errorf("send: %w", context.DeadlineExceeded), ClassTimeout},
		{"a net timeout is a timeout", netTimeout, ClassTimeout},
		{"a url.Error timeout is a timeout", &url.Error{Op: "Post", URL: "https://x", Err: netTimeout}, ClassTimeout},
		{"ETIMEDOUT is a timeout", &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ETIMEDOUT)}, ClassTimeout},
		{"a reset connection is a server error", &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}, ClassServer},
		{"a refused connection is a server error", &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}, ClassServer},
		{"a backoff.Permanent error is invalid", backoff.Permanent(errors.New("bad record")), ClassInvalid},
		{"the library's own error keeps its class", &Error{Class: ClassTooLarge, Err: errors.New("big")}, ClassTooLarge},
		{"an unknown error is a server error", errors.New("something odd"), ClassServer},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, Classify(tt.err))
		})
	}
	t.Run("nil is no class", func(t *testing.T) {
		assert.Equal(t, Class(0), Classify(nil))
	})
}

func TestErrorMatchesItsSentinel(t *testing.T) {
	for _, c := range Classes() {
		t.Run(c.String()+" matches its sentinel only", func(t *testing.T) {
			err := fmt.Errorf("wrapped: %w", &Error{Class: c, Err: errors.New("cause")})
			for _, other := range Classes() {
				permanent := c == ClassDenied || c == ClassQuotaExceeded
				want := other == c || permanent && other == ClassInvalid || c == ClassQuotaExceeded && other == ClassDenied
				assert.Equal(t, want, errors.Is(err, other.Err()), "errors.Is(%v, %v)", c, other)
			}
			var ue *Error
			require.ErrorAs(t, err, &ue)
			assert.Equal(t, c, ue.Class)
		})
	}
}

func TestDescribeKeepsCodesAndRetryAfter(t *testing.T) {
	t.Run("a gRPC status keeps its code", func(t *testing.T) {
		e := describe(status.Error(codes.Unavailable, "down"), Classify)
		assert.Equal(t, ClassServer, e.Class)
		assert.Equal(t, codes.Unavailable, e.GRPCCode)
		assert.Equal(t, "Unavailable", e.Code())
	})
	t.Run("an HTTP error keeps its status", func(t *testing.T) {
		e := describe(&pinecone.PineconeError{Code: 429, Msg: errors.New("slow down")}, Classify)
		assert.Equal(t, 429, e.StatusCode)
		assert.Equal(t, "429", e.Code())
	})
	t.Run("a pushback is read from the error chain", func(t *testing.T) {
		err := &pushbackError{err: status.Error(codes.ResourceExhausted, "slow"), after: 3 * time.Second}
		e := describe(fmt.Errorf("wrapped: %w", err), Classify)
		assert.Equal(t, ClassRateLimited, e.Class)
		assert.Equal(t, 3*time.Second, e.RetryAfter)
	})
	t.Run("a custom classifier returning nothing falls back to server", func(t *testing.T) {
		e := describe(errors.New("x"), func(error) Class { return 0 })
		assert.Equal(t, ClassServer, e.Class)
	})
}

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	tests := []struct {
		name, in string
		want     time.Duration
	}{
		{"whole seconds are read", "3", 3 * time.Second},
		{"fractions of seconds are read", "0.5", 500 * time.Millisecond},
		{"an HTTP date is a wait from now", now.Add(7 * time.Second).Format(http1123), 7 * time.Second},
		{"a date in the past is no wait", now.Add(-time.Minute).Format(http1123), 0},
		{"garbage is no wait", "soon", 0},
		{"a negative value is no wait", "-1", 0},
		{"an empty value is no wait", "", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, parseRetryAfter(tt.in, now))
		})
	}
}

const http1123 = "Mon, 02 Jan 2006 15:04:05 GMT"

func TestFullJitterStaysWithinItsCeiling(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	policies := []struct {
		name      string
		base, cap time.Duration
	}{
		{"the defaults", 250 * time.Millisecond, 30 * time.Second},
		{"a tiny base", time.Nanosecond, time.Second},
		{"a base equal to the cap", time.Second, time.Second},
	}
	for _, p := range policies {
		t.Run("each wait of "+p.name+" is within [0, min(cap, base·2^n)]", func(t *testing.T) {
			b := &fullJitter{base: p.base, cap: p.cap, rand: rng.Int64N}
			for n := range 80 {
				ceil := time.Duration(math.Min(float64(p.cap), float64(p.base)*math.Pow(2, float64(n))))
				d := b.NextBackOff()
				assert.GreaterOrEqual(t, d, time.Duration(0), "retry %d", n)
				assert.LessOrEqual(t, d, ceil, "retry %d", n)
			}
		})
	}
	t.Run("the top of the range is the ceiling itself", func(t *testing.T) {
		b := &fullJitter{base: 250 * time.Millisecond, cap: 30 * time.Second, rand: maxRand}
		var got []time.Duration
		for range 9 {
			got = append(got, b.NextBackOff())
		}
		assert.Equal(t, []time.Duration{
			250 * time.Millisecond, 500 * time.Millisecond, time.Second, 2 * time.Second,
			4 * time.Second, 8 * time.Second, 16 * time.Second, 30 * time.Second, 30 * time.Second,
		}, got)
	})
	t.Run("the waits are spread over the whole range", func(t *testing.T) {
		b := &fullJitter{base: time.Second, cap: time.Second, rand: rng.Int64N}
		low, high := 0, 0
		for range 1000 {
			switch d := b.NextBackOff(); {
			case d < 250*time.Millisecond:
				low++
			case d > 750*time.Millisecond:
				high++
			}
		}
		assert.Greater(t, low, 150, "full jitter has no floor")
		assert.Greater(t, high, 150)
	})
	t.Run("Reset starts over", func(t *testing.T) {
		b := &fullJitter{base: time.Second, cap: time.Minute, rand: maxRand}
		b.NextBackOff()
		b.NextBackOff()
		b.Reset()
		assert.Equal(t, time.Second, b.NextBackOff())
	})
}

func TestRateLimitedWaitsLonger(t *testing.T) {
	p := defaultRetryPolicy()
	rl := p.backoffFor(ClassRateLimited, maxRand)
	srv := p.backoffFor(ClassServer, maxRand)
	for n := range 5 {
		assert.Greater(t, rl.NextBackOff(), srv.NextBackOff(), "retry %d", n)
	}
}

// A typed nil *Error in an error interface is a Go trap: a function that
// returns one means "no error" but hands over a non-nil error. It must be a
// failure the library survives, never a crash on one of its goroutines.
func TestATypedNilErrorIsAFailureNotACrash(t *testing.T) {
	var typedNil *Error
	t.Run("Classify and the methods of a nil *Error do not panic", func(t *testing.T) {
		assert.Equal(t, ClassServer, Classify(typedNil))
		assert.Equal(t, ClassServer, Classify(fmt.Errorf("wrapped: %w", typedNil)))
		assert.False(t, errors.Is(typedNil, ErrServer))
		assert.Nil(t, typedNil.Unwrap())
		assert.NotEmpty(t, typedNil.Error())
		assert.NotEmpty(t, typedNil.Code())
		e := describe(typedNil, Classify)
		require.NotNil(t, e)
		assert.Equal(t, ClassServer, e.Class)
	})
	t.Run("an UpsertFunc returning one fails its records, with a message that says so", func(t *testing.T) {
		send := func(context.Context, string, []*pinecone.Vector) error { return typedNil }
		res, err := All(context.Background(), vectors(3, 2), WithUpsertFunc(send), withClock(newFakeClock()), withRand(maxRand))
		require.ErrorIs(t, err, ErrServer)
		require.Len(t, res.Failed, 3)
		assert.Contains(t, res.Failed[0].Err.Error(), "nil *upsert.Error")
	})
	// The library reads an error's text (neverSent, the logs): an Error
	// method that dereferences a nil receiver panicked on a worker and
	// killed the process.
	t.Run("an UpsertFunc returning a typed nil of its own error type fails its records", func(t *testing.T) {
		send := func(context.Context, string, []*pinecone.Vector) error {
			var e *derefError
			return e
		}
		res, err := All(context.Background(), vectors(3, 2), WithUpsertFunc(send), withClock(newFakeClock()), withRand(maxRand))
		require.ErrorIs(t, err, ErrServer)
		require.Len(t, res.Failed, 3)
		var pe *PanicError
		require.ErrorAs(t, res.Failed[0].Err, &pe)
		assert.Contains(t, pe.Error(), "the send function's error (a method of its chain) panicked")
	})
	t.Run("an UpsertFunc returning a typed nil whose Unwrap panics fails its records", func(t *testing.T) {
		send := func(context.Context, string, []*pinecone.Vector) error {
			var e *unwrapDerefError
			return e
		}
		res, err := All(context.Background(), vectors(3, 2), WithUpsertFunc(send), withClock(newFakeClock()), withRand(maxRand),
			WithLogger(slog.New(slog.DiscardHandler)))
		require.ErrorIs(t, err, ErrServer)
		require.Len(t, res.Failed, 3)
		var pe *PanicError
		require.ErrorAs(t, res.Failed[0].Err, &pe)
	})
	t.Run("Classify of a nil *pinecone.PineconeError", func(t *testing.T) {
		var pe *pinecone.PineconeError
		assert.Equal(t, ClassServer, Classify(fmt.Errorf("wrapped: %w", error(pe))))
	})
}

// unwrapDerefError is an error type whose Error method is nil-safe and
// whose Unwrap dereferences its receiver.
type unwrapDerefError struct{ cause error }

func (e *unwrapDerefError) Error() string {
	if e == nil {
		return "transport failed"
	}
	return "transport: " + e.cause.Error()
}

func (e *unwrapDerefError) Unwrap() error { return e.cause }

// derefError is an error type whose Error method dereferences its
// receiver, as most do.
type derefError struct{ cause error }

func (e *derefError) Error() string { return "transport: " + e.cause.Error() }

// The index's wait counts up to maxServerWait, whichever way it comes: a
// gRPC pushback of 1000 hours, an HTTP Retry-After of 25 hours and an
// *Error's RetryAfter from a custom transport all wait the same bounded
// time, and a larger ask never waits less than a smaller one.
func TestServerWaitsHaveOneBound(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	hours := func(h int) time.Duration { return time.Duration(h) * time.Hour }
	assert.Equal(t, maxServerWait, pushbackOf(metadata.Pairs("grpc-retry-pushback-ms", fmt.Sprint(hours(1000).Milliseconds()))), "gRPC pushback")
	assert.Equal(t, maxServerWait, pushbackOf(metadata.Pairs("retry-after", "90000")), "retry-after over gRPC")
	assert.Equal(t, maxServerWait, parseRetryAfter("90000", now), "HTTP Retry-After in seconds")
	assert.Equal(t, maxServerWait, parseRetryAfter(now.Add(hours(1000)).Format(http1123), now), "HTTP Retry-After as a date")
	assert.Equal(t, maxServerWait, describe(&Error{Class: ClassRateLimited, RetryAfter: hours(1000)}, Classify).RetryAfter, "an *Error's RetryAfter")
	assert.Equal(t, maxServerWait, describe(&pushbackError{err: status.Error(codes.ResourceExhausted, "x"), after: hours(1000)}, Classify).RetryAfter)
	assert.Equal(t, 2*time.Second, pushbackOf(metadata.Pairs("grpc-retry-pushback-ms", "2000")), "a wait under the bound is kept")
	prev := time.Duration(0)
	for _, s := range []string{"1", "30", "59", "60", "61", "3600", "86400", "86401", "1e12"} {
		d := parseRetryAfter(s, now)
		assert.GreaterOrEqual(t, d, prev, "Retry-After %s", s)
		prev = d
	}
}

// WithBackoff accepts max = time.Duration(math.MaxInt64), a common way to
// say "no cap". A backoff at that ceiling once drew rand(cap+1), which
// overflowed, and math/rand/v2.Int64N panicked on a worker goroutine,
// killing the caller's process (a 429 with base 1 s reached it at a
// batch's 33rd refusal, which spared refusals reach without spending
// retries).
func TestBackoffWithNoCapNeverPanics(t *testing.T) {
	cfg, err := newConfig([]Option{WithUpsertFunc(newFakeIndex(nil).Upsert), WithBackoff(time.Second, time.Duration(math.MaxInt64))}, vectorKind, entryAll)
	if err != nil {
		t.Fatalf("WithBackoff(1s, MaxInt64) refused: %v", err)
	}
	r := &run{cfg: cfg}
	r.cfg.rand = rand.Int64N // the default
	for _, c := range []Class{ClassRateLimited, ClassServer} {
		for n := 30; n <= 40; n++ {
			func() {
				defer func() {
					if v := recover(); v != nil {
						t.Fatalf("backoff(%v, step %d) panicked: %v", c, n, v)
					}
				}()
				if d := r.backoff(c, n, 0); d < 0 {
					t.Errorf("backoff(%v, %d) = %v", c, n, d)
				}
			}()
		}
	}
}

// cancelOnSleepClock is a fakeClock that calls cancel at its first Sleep
// of a positive duration (the first backoff): the caller gives up while a
// failed batch waits to be resent.
type cancelOnSleepClock struct {
	*fakeClock
	once   sync.Once
	cancel context.CancelFunc
}

func (c *cancelOnSleepClock) Sleep(ctx context.Context, d time.Duration) error {
	if d > 0 {
		c.once.Do(c.cancel)
	}
	return c.fakeClock.Sleep(ctx, d)
}

// Stats.Retries counts resends: a batch whose run stopped during its
// backoff was never resent, and is counted in neither Retries,
// RetriesByClass nor RetriesPerBatch.
func TestStatsCountOnlyRetriesThatWereSent(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	clk := &cancelOnSleepClock{fakeClock: newFakeClock(), cancel: cancel}
	fi := newFakeIndex(func(int, []string) error { return status.Error(codes.Unavailable, "down") })

	res, err := All(ctx, vectors(1, 2), WithUpsertFunc(fi.Upsert), withClock(clk), withRand(maxRand))

	require.ErrorIs(t, err, ErrCanceled)
	require.Len(t, fi.Calls(), 1, "the batch was sent once; the cancel came during its backoff")
	assert.Equal(t, 1, res.Stats.Requests)
	assert.Zero(t, res.Stats.Retries, "no batch was resent")
	assert.Empty(t, res.Stats.RetriesByClass, "no batch was resent")
	assert.Equal(t, []int{1}, res.Stats.RetriesPerBatch, "the one batch was never retried")
}

// A grpc-retry-pushback-ms beyond int64 waits the bound, as any ask over
// a minute does: a larger ask never waits less.
func TestAHugeGRPCPushbackWaitsTheBoundNotNothing(t *testing.T) {
	assert.Equal(t, maxServerWait, pushbackOf(metadata.Pairs("grpc-retry-pushback-ms", "9223372036854775807")), "the largest int64 waits the bound")
	assert.Equal(t, maxServerWait, pushbackOf(metadata.Pairs("grpc-retry-pushback-ms", "99999999999999999999")), "a larger ask must not wait less")
}

// Retry-After's delay-seconds has no upper bound (RFC 9110 §10.2.3): a
// number beyond float64 waits the bound, not nothing.
func TestAHugeRetryAfterWaitsTheBoundNotNothing(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	huge := strings.Repeat("9", 400) // valid delay-seconds, beyond float64
	assert.Equal(t, maxServerWait, parseRetryAfter("90000", now))
	assert.Equal(t, maxServerWait, parseRetryAfter(huge, now), "a larger ask must not wait less")
	assert.Equal(t, maxServerWait, pushbackOf(metadata.Pairs("retry-after", huge)), "over gRPC too")
}

// The observers' Retry events count what Stats.Retries counts: a batch
// whose run stopped during its backoff was not resent, and is told to
// neither.
func TestBackoffRetryEventsMatchStatsRetriesWhenTheRunStopsDuringTheBackoff(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	clk := &cancelOnSleepClock{fakeClock: newFakeClock(), cancel: cancel}
	fi := newFakeIndex(func(int, []string) error { return status.Error(codes.Unavailable, "down") })
	var events atomic.Int64
	obs := Observer{Retry: func(e RetryEvent) {
		if !e.Split {
			events.Add(1)
		}
	}}

	res, err := All(ctx, vectors(1, 2), WithUpsertFunc(fi.Upsert), withClock(clk), withRand(maxRand), WithObserver(obs))

	require.ErrorIs(t, err, ErrCanceled)
	require.Len(t, fi.Calls(), 1, "the batch was sent once; the cancel came during its backoff")
	assert.Equal(t, int64(res.Stats.Retries), events.Load(), "the backoff retries the observers hear of are the ones Stats.Retries counts")
}

// httpOnlyServer answers every request, over plaintext HTTP/2
// (as gRPC's prior-knowledge h2c reaches it), with HTTP status code and an
// HTML page: what a load balancer or proxy in front of the index answers
// when it refuses a request itself. It returns the host to give the SDK.
func httpOnlyServer(t *testing.T, code int) string {
	t.Helper()
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(code)
		_, _ = io.WriteString(w, "<html><body><h1>"+http.StatusText(code)+"</h1></body></html>")
	})}
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	srv.Protocols = &p
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return "http://" + ln.Addr().String()
}

// An HTTP status answered over gRPC by whatever fronts the index (a load
// balancer's 504, a proxy's 413 body limit or 429) reaches the library as
// grpc-go renders it: a code grpc-go guessed (429, 502, 503, 504 ->
// UNAVAILABLE; 413 -> UNKNOWN) and a message quoting the status,
// "unexpected HTTP status code received from server: 413 (Request Entity
// Too Large)". It is classified by that status, as over REST: read by the
// code, a 413 was resent unchanged, a 504 never split, and a 429 opened
// the circuit breaker instead of cutting the rate.
func TestGRPCAnswersOfAnHTTPProxyAreClassifiedByTheirHTTPStatus(t *testing.T) {
	for _, tt := range []struct {
		code int
		want Class
	}{
		{http.StatusRequestEntityTooLarge, ClassTooLarge},
		{http.StatusGatewayTimeout, ClassTimeout},
		{http.StatusTooManyRequests, ClassRateLimited},
	} {
		t.Run(fmt.Sprint(tt.code), func(t *testing.T) {
			pc, err := pinecone.NewClient(pinecone.NewClientParams{ApiKey: "k"})
			require.NoError(t, err)
			idx, err := pc.Index(pinecone.NewIndexConnParams{Host: httpOnlyServer(t, tt.code), Namespace: "ns"})
			require.NoError(t, err)
			defer idx.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_, err = idx.UpsertVectors(ctx, []*pinecone.Vector{{Id: "a", Values: &[]float32{1, 2}}})
			require.Error(t, err)
			require.Contains(t, err.Error(), fmt.Sprintf("unexpected HTTP status code received from server: %d", tt.code),
				"the SDK surfaces the proxy's HTTP status in grpc-go's message")
			assert.Equal(t, tt.want, Classify(err), "an HTTP %d is classified by its status whichever transport surfaced it: %v", tt.code, err)
		})
	}
}

// Pinecone's REST data plane (and upserttest's, httpStatusFromCode) maps
// gRPC codes to HTTP statuses as grpc-gateway does: CANCELED -> 499,
// UNIMPLEMENTED -> 501. The same answer ends in the same class whichever
// transport carried it: CANCELED while the caller's context is alive is a
// server error (retried), UNIMPLEMENTED denied (the run stops). Read as
// other 4xx and 5xx, a 499 bisected the batch and failed a record for
// good, and a 501 was resent four times.
func TestRESTCanceledAndUnimplementedEndLikeTheirGRPCCodes(t *testing.T) {
	t.Run("a transient CANCELED answer (REST 499) is retried as over gRPC", func(t *testing.T) {
		for _, rest := range []bool{false, true} {
			t.Run(fmt.Sprintf("REST %v", rest), func(t *testing.T) {
				srv := upserttest.NewServer(upserttest.WithFaults(func(r upserttest.Request) upserttest.Fault {
					if r.Seq == 1 {
						return upserttest.Fault{Code: codes.Canceled, Message: "request canceled"}
					}
					return upserttest.Fault{}
				}))
				defer srv.Close()
				idx := recordsConn(t, srv, srv.Client(), true)
				var res Result
				var err error
				if rest {
					res, err = Records(context.Background(), slices.Values(textRecordsOf(1)), WithIndex(idx), withClock(newFakeClock()), withRand(maxRand))
				} else {
					res, err = All(context.Background(), []*pinecone.Vector{{Id: "v", Values: &[]float32{1, 2}}}, WithIndex(idx), withClock(newFakeClock()), withRand(maxRand))
				}
				if rest {
					require.Equal(t, 1, srv.Stats().HTTPCodes[499], "upserttest answered CANCELED with 499")
				}
				assert.NoError(t, err, "a CANCELED answer says nothing against the record: %v", err)
				assert.Empty(t, res.Failed)
				assert.Equal(t, 1, res.Upserted)
			})
		}
	})
	t.Run("an UNIMPLEMENTED answer (REST 501) stops the run as over gRPC", func(t *testing.T) {
		for _, rest := range []bool{false, true} {
			t.Run(fmt.Sprintf("REST %v", rest), func(t *testing.T) {
				srv := upserttest.NewServer(upserttest.WithFaults(func(upserttest.Request) upserttest.Fault {
					return upserttest.Fault{Code: codes.Unimplemented, Message: "Method not implemented"}
				}))
				defer srv.Close()
				idx := recordsConn(t, srv, srv.Client(), true)
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				var res Result
				var err error
				if rest {
					res, err = Records(ctx, slices.Values(textRecordsOf(1)), WithIndex(idx), withClock(newFakeClock()), withRand(maxRand))
				} else {
					res, err = All(ctx, []*pinecone.Vector{{Id: "v", Values: &[]float32{1, 2}}}, WithIndex(idx), withClock(newFakeClock()), withRand(maxRand))
				}
				require.Error(t, err)
				if rest {
					require.NotZero(t, srv.Stats().HTTPCodes[http.StatusNotImplemented], "upserttest answered UNIMPLEMENTED with 501")
				}
				assert.ErrorIs(t, err, ErrDenied, "a method the index does not implement is no transient failure: %v", err)
				assert.Equal(t, 1, srv.Stats().Requests, "nothing is resent after an answer no retry can change")
				require.Len(t, res.Failed, 1)
				assert.Equal(t, ClassDenied, res.Failed[0].Class)
			})
		}
	})
}

// Pinecone's REST API answers a gRPC code with the status grpc-gateway
// gives it (README), as upserttest does: a quota's text under
// INVALID_ARGUMENT, FAILED_PRECONDITION or OUT_OF_RANGE comes as 400, under
// ALREADY_EXISTS as 409. Over REST as over gRPC it stops the run at its
// first answer and leaves every record to the resumed run (Resend, the
// checkpoint at 0). Read as invalid over REST, it bisected every batch
// down to single records (each request costing write units against a
// spent quota) that failed for good, and the checkpoint passed them all.
func TestAQuotaAnsweredAs400Or409OverRESTStopsTheRunAsOverGRPC(t *testing.T) {
	const month = "Request failed. You've reached your write unit limit for the current month. To continue writing data, upgrade your plan."
	for _, tt := range []struct {
		code   codes.Code
		status int // over REST
	}{
		{codes.InvalidArgument, http.StatusBadRequest},
		{codes.FailedPrecondition, http.StatusBadRequest},
		{codes.OutOfRange, http.StatusBadRequest},
		{codes.AlreadyExists, http.StatusConflict},
	} {
		for _, rest := range []bool{false, true} {
			t.Run(fmt.Sprintf("%v REST %v", tt.code, rest), func(t *testing.T) {
				srv := upserttest.NewServer(upserttest.WithFaults(func(upserttest.Request) upserttest.Fault {
					return upserttest.Fault{Code: tt.code, Message: month}
				}))
				defer srv.Close()
				cp := FileCheckpoint(filepath.Join(t.TempDir(), "cp"))
				opts := []Option{WithIndex(recordsConn(t, srv, srv.Client(), true)), WithCheckpoint(cp), withClock(newFakeClock()), withRand(maxRand)}
				var res Result
				var err error
				if rest {
					res, err = Records(context.Background(), slices.Values(textRecordsOf(200)), opts...)
					require.NotZero(t, srv.Stats().HTTPCodes[tt.status], "upserttest answered %v with %d", tt.code, tt.status)
				} else {
					res, err = Stream(context.Background(), slices.Values(vectors(200, 2)), opts...)
				}
				require.ErrorIs(t, err, ErrQuotaExceeded, "requests sent: %d", res.Stats.Requests)
				assert.Less(t, res.Stats.Requests, 10, "a spent quota stops the run at its first answer")
				mark, err := cp.Load(context.Background())
				require.NoError(t, err)
				assert.Zero(t, mark, "the checkpoint passed records the quota refused")
				assert.Zero(t, res.Upserted)
				require.NotEmpty(t, res.Failed) // the records pulled: the stop stops the pulling too
				for _, f := range res.Failed {
					assert.True(t, f.Resend, "record %d: %v", f.Index, f.Err)
				}
			})
		}
	}
}

// Pinecone's quota of namespaces per index refuses writes into a new
// namespace only: those the index holds still take writes. A run writing
// to one it holds and to a new one over the quota fails the new one's
// records (quota-exceeded, to resend once the quota changes), sending no
// more of them after the first refusal, and lands the others. It stopped
// at the first refusal, failing 15 records of the namespace that takes
// writes with a cause not theirs.
func TestANamespaceQuotaFailsOnlyTheNewNamespacesRecords(t *testing.T) {
	srv := upserttest.NewServer(upserttest.WithMaxNamespaces(1))
	defer srv.Close()
	idx := shapeIndex(t, srv, "old")
	_, err := idx.UpsertVectors(context.Background(), vectors(1, 4)) // "old" exists
	require.NoError(t, err)

	nsOf := func(v *pinecone.Vector) string {
		if n, _ := strconv.Atoi(strings.TrimPrefix(v.Id, "v")); n%2 == 1 {
			return "new"
		}
		return "old"
	}
	res, err := All(context.Background(), vectors(40, 4), WithIndex(idx), WithNamespaceOf(nsOf), WithBatchSize(5), WithConcurrency(1))
	require.ErrorIs(t, err, ErrQuotaExceeded)
	assert.Equal(t, 20, res.Upserted)
	assert.Equal(t, 20, srv.Count("old"))
	require.Len(t, res.Failed, 20)
	for _, f := range res.Failed {
		assert.Equal(t, "new", f.Namespace, f.ID)
		assert.Equal(t, ClassQuotaExceeded, f.Class, f.ID)
		assert.True(t, f.Resend, f.ID)
	}
	assert.Equal(t, 1, srv.Stats().Codes[codes.PermissionDenied], "one request into the new namespace")
}

// namespacesQuota is Pinecone's answer to a write into a new namespace of
// an index at its quota of namespaces (upserttest's text).
const namespacesQuota = "Request failed. You've reached the max namespaces allowed in serverless index upserttest. To add more namespaces, upgrade your plan."

// The records of a namespace the index refused to create fail unsent
// after the first refusal. WithMaxRate caps "the records this call sends
// a second": records never sent take none of it from the namespaces that
// still take writes. Here 200 records land under a cap of 100 a second
// (about 2 s); the 190 refused records were booked on the cap before the
// refusal was looked at, and the run took 3.9 s.
func TestRecordsOfARefusedNamespaceSpendNoneOfTheRateCap(t *testing.T) {
	clk := newEventClock()
	var mu sync.Mutex
	sent := map[string]int{}
	send := func(ctx context.Context, ns string, b []*pinecone.Vector) error {
		_ = clk.Sleep(context.WithoutCancel(ctx), 10*time.Millisecond)
		mu.Lock()
		defer mu.Unlock()
		sent[ns] += len(b)
		if ns == "new" {
			return status.Error(codes.PermissionDenied, namespacesQuota)
		}
		return nil
	}
	nsOf := WithNamespaceOf(func(v *pinecone.Vector) string {
		if n, _ := strconv.Atoi(strings.TrimPrefix(v.Id, "v")); n%2 == 1 {
			return "new"
		}
		return "old"
	})
	res, err := All(context.Background(), vectors(400, 4), WithUpsertFunc(send), withClock(clk), withRand(maxRand),
		nsOf, WithBatchSize(10), WithConcurrency(1), WithMaxRate(100))
	took := clk.Now().Sub(clk.start)
	t.Logf("virtual %v, sent %v, upserted %d, failed %d: %v", took, sent, res.Upserted, len(res.Failed), err)
	assert.True(t, errors.Is(err, ErrQuotaExceeded))
	assert.Equal(t, 200, res.Upserted)
	assert.Equal(t, 10, sent["new"], "one request into the refused namespace")
	assert.Less(t, took, 2500*time.Millisecond, "records failed unsent spend none of WithMaxRate's cap")
}

// ClassQuotaExceeded's doc: the records of a namespace the index refused
// to create fail "(those after the first refusal unsent)". A stream over
// many namespaces that comes back to the refused one after its idle route
// was dropped (routeTable.dropIdle) sends none of them again: the refusal
// lived on the dropped route, and the route made again sent them.
func TestARefusedNamespaceRevisitedAfterItsRouteWasDroppedStaysUnsent(t *testing.T) {
	var mu sync.Mutex
	sent := map[string]int{}
	send := func(ctx context.Context, ns string, b []*pinecone.Vector) error {
		mu.Lock()
		defer mu.Unlock()
		if ns == "new" {
			sent[ns]++
			return status.Error(codes.PermissionDenied, namespacesQuota)
		}
		return nil
	}
	answered := func() bool { mu.Lock(); defer mu.Unlock(); return sent["new"] > 0 }
	const others = 3 * minRoutes
	seq := func(yield func(*pinecone.Vector) bool) {
		if !yield(routeVec("new/0")) {
			return
		}
		require.True(t, waitFor(5*time.Second, answered))
		time.Sleep(50 * time.Millisecond) // its batch settles: the route is idle
		for i := range others {
			if !yield(routeVec(fmt.Sprintf("o%d/0", i))) {
				return
			}
		}
		yield(routeVec("new/1"))
	}
	res, err := Stream(context.Background(), seq, WithUpsertFunc(send), withClock(newFakeClock()), withRand(maxRand), WithBatchSize(1),
		WithNamespaceOf(func(v *pinecone.Vector) string { ns, _, _ := strings.Cut(v.Id, "/"); return ns }))
	require.ErrorIs(t, err, ErrQuotaExceeded)
	assert.Equal(t, others, res.Upserted)
	assert.Equal(t, map[Class][]string{ClassQuotaExceeded: {"new/0", "new/1"}}, failedIDs(res))
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, 1, sent["new"], "records of the refused namespace after its first refusal go unsent")
}

// Pinecone's request-rate answer names the namespace: "You've reached the
// upsert QPS limit for namespace <namespace> (<limit> QPS)" (reference.md).
// Namespaces are the caller's data (tenant ids, queue names): the quota's
// and the limits' phrases are looked for in the answer without it, or a
// QPS 429 in a namespace named "quota_exceeded" stopped the whole run as a
// spent quota, at an answer that a short wait fixes.
func TestARateLimitNamingANamespaceIsNotTakenForAQuota(t *testing.T) {
	for _, ns := range []string{"alerts_quota_exceeded", "billing quota exceeded", "payment required queue"} {
		msg := fmt.Sprintf("Request failed. You've reached the upsert QPS limit for namespace %s (100 QPS). "+
			"Pace your upsert requests or contact Pinecone Support (https://app.pinecone.io/organizations/-/settings/support/ticket) to request a higher limit.", ns)
		t.Run(ns, func(t *testing.T) {
			assert.Equal(t, ClassRateLimited, Classify(status.Error(codes.ResourceExhausted, msg)), "over gRPC")
			assert.Equal(t, ClassRateLimited, Classify(httpError(http.StatusTooManyRequests, 0,
				[]byte(fmt.Sprintf(`{"code":8,"message":%q,"details":[]}`, msg)))), "over REST")
			assert.Equal(t, LimitRequests, describe(status.Error(codes.ResourceExhausted, msg), Classify).Limit)
		})
	}
}

// An answer quotes the caller's data ("Vector ID must be ASCII, but got
// '<id>'", "Metadata key '<key>'…"): one invalid record whose quoted id
// holds a quota's phrase fails alone, as invalid, and the others land.
// The phrase was looked for in the whole text: the run stopped as at a
// spent quota, and all 40 records failed as quota-exceeded.
func TestAnInvalidRecordQuotingAQuotasPhraseDoesNotStopTheRun(t *testing.T) {
	for _, bad := range []string{"quota_exceeded", "it's-quota_exceeded"} { // an apostrophe closed the quote early
		recs := vectors(40, 4)
		recs[3].Id = bad
		fi := newFakeIndex(func(_ int, ids []string) error {
			if slices.Contains(ids, bad) {
				return status.Error(codes.InvalidArgument, fmt.Sprintf("Vector ID '%s' is refused", bad))
			}
			return nil
		})
		res, err := All(context.Background(), recs, testOpts(fi, WithBatchSize(10), WithConcurrency(1))...)
		require.Error(t, err)
		assert.Equal(t, map[Class][]string{ClassInvalid: {bad}}, failedIDs(res))
		assert.Equal(t, 39, res.Upserted)
	}
}

// A REST request whose TLS handshake fails never reached the index, as
// over gRPC ("authentication handshake failed"): its records are not
// MayHaveLanded and the error names the host. Here the host answers plain
// HTTP (the SDK rewrites REST hosts to https); a TLS alert or a first
// record that is not TLS is read alike. Before, only a certificate that
// failed verification was.
func TestARESTRequestWhoseTLSHandshakeFailedIsNotMayHaveLanded(t *testing.T) {
	plain := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
	}))
	defer plain.Close()
	pc, err := NewClient(pinecone.NewClientParams{ApiKey: "k"})
	require.NoError(t, err)
	idx, err := pc.Index(pinecone.NewIndexConnParams{Host: plain.URL, Namespace: "docs"})
	require.NoError(t, err)
	defer idx.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := Records(ctx, slices.Values(textRecordsOf(3)), WithIndex(idx), withClock(newFakeClock()), withRand(maxRand))
	require.Error(t, err)
	require.Len(t, res.Failed, 3)
	for _, f := range res.Failed {
		require.Contains(t, f.Err.Error(), "server gave HTTP response to HTTPS client", "the handshake failed: nothing was sent")
		assert.False(t, f.MayHaveLanded, "%s: nothing reached the index: %v", f.ID, f.Err)
		assert.Contains(t, f.Err.Error(), "cannot reach", "the error names the host the request never reached")
	}
}

// A tls.RecordHeaderError is a failed handshake only for the first record
// (it has a Conn then): crypto/tls also returns one after the handshake,
// reading a record with a bad header. Here the server read the whole
// request (it may have applied it) and then sent a corrupt record: the
// records may have landed.
func TestARecordHeaderErrorAfterTheRequestWasReadMayHaveLanded(t *testing.T) {
	var got atomic.Int64
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		got.Add(1) // the request reached the index, which may apply it
		c, _, err := w.(http.Hijacker).Hijack()
		if err != nil {
			return
		}
		defer c.Close()
		if tc, ok := c.(*tls.Conn); ok {
			// An application-data record header announcing 65535 bytes:
			// the client's tls.Conn fails with a RecordHeaderError.
			_, _ = tc.NetConn().Write([]byte{0x17, 0x03, 0x03, 0xff, 0xff})
		}
	}))
	defer srv.Close()
	pc, err := NewClient(pinecone.NewClientParams{ApiKey: "k", RestClient: srv.Client()})
	require.NoError(t, err)
	idx, err := pc.Index(pinecone.NewIndexConnParams{Host: srv.URL, Namespace: "docs"})
	require.NoError(t, err)
	defer idx.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := Records(ctx, slices.Values(textRecordsOf(2)), WithIndex(idx), withClock(newFakeClock()), withRand(maxRand))
	require.Error(t, err)
	require.NotZero(t, got.Load(), "the index read the request")
	require.NotEmpty(t, res.Failed)
	for _, f := range res.Failed {
		require.Contains(t, f.Err.Error(), "oversized record received", "a corrupt record after the request was read: %v", f.Err)
		assert.True(t, f.MayHaveLanded, "%s: the index read the request, it may have applied it: %v", f.ID, f.Err)
		assert.NotContains(t, f.Err.Error(), "nothing was sent", "the request was sent")
	}
}

// timeoutDerefError is a transport's error type that implements net.Error
// with pointer receivers: its Error method is nil-safe, its Timeout and
// Temporary dereference the receiver.
type timeoutDerefError struct{ timeout bool }

func (e *timeoutDerefError) Error() string {
	if e == nil {
		return "transport failed"
	}
	return "transport: failed"
}
func (e *timeoutDerefError) Timeout() bool   { return e.timeout }
func (e *timeoutDerefError) Temporary() bool { return e.timeout }

// WithClassifier replaces Classify: an error the library's Classify would
// panic on (a typed nil whose Timeout dereferences it) and the caller's
// classifier reads is the caller's class, not a *PanicError: the library
// walked every send error with its own Classify first.
func TestTheCallersClassifierDecidesOnAnErrorTheLibrarysClassifyCannotRead(t *testing.T) {
	send := func(context.Context, string, []*pinecone.Vector) error {
		var e *timeoutDerefError
		return e
	}
	classify := func(err error) Class {
		var te *timeoutDerefError
		if errors.As(err, &te) {
			return ClassInvalid // this transport's errors: the records are refused
		}
		return Classify(err)
	}
	res, err := All(context.Background(), vectors(3, 2), WithUpsertFunc(send), WithClassifier(classify),
		withClock(newFakeClock()), withRand(maxRand), WithLogger(slog.New(slog.DiscardHandler)))
	require.Error(t, err)
	assert.ErrorIs(t, err, ErrInvalid, "the caller's classifier says invalid")
	require.Len(t, res.Failed, 3)
	f := res.Failed[0]
	assert.Equal(t, ClassInvalid, f.Class)
	assert.False(t, f.MayHaveLanded)
	var pe *PanicError
	assert.False(t, errors.As(f.Err, &pe), "no panic: the library's Classify is not the run's classifier: %v", f.Err)
}

// Two batches of a namespace the index then refuses, admitted together
// (the call's two slots freed at once), the second waiting WithMaxRate's
// pace once admitted: the first's 403 comes while it waits, and it goes
// unsent. It went out to a 403 of its own and a second ERROR line.
func TestABatchPacedOnceAdmittedIsNotSentAfterItsNamespaceWasRefused(t *testing.T) {
	clk := newEventClock()
	var mu sync.Mutex
	sent := map[string]int{}
	send := func(ctx context.Context, ns string, b []*pinecone.Vector) error {
		mu.Lock()
		sent[ns]++
		n := sent[ns]
		mu.Unlock()
		if ns == "new" {
			_ = clk.Sleep(context.WithoutCancel(ctx), 100*time.Millisecond)
			return status.Error(codes.PermissionDenied, namespacesQuota)
		}
		// The old namespace's two requests (sent 0.5 s apart at the
		// pace) end together, at 2.5 s.
		_ = clk.Sleep(context.WithoutCancel(ctx), time.Duration(2500-500*(n-1))*time.Millisecond)
		return nil
	}
	recs := make([]*pinecone.Vector, 0, 40)
	for _, ns := range []string{"old", "new"} {
		for i := range 20 {
			recs = append(recs, routeVec(fmt.Sprintf("%s/%d", ns, i)))
		}
	}
	logs := &logCounts{byMsg: map[string]int{}}
	res, err := Stream(context.Background(), slices.Values(recs), WithUpsertFunc(send), withClock(clk), withRand(maxRand),
		WithBatchSize(10), WithConcurrency(2), WithMaxRate(20), WithLogger(slog.New(logs)),
		WithNamespaceOf(func(v *pinecone.Vector) string { ns, _, _ := strings.Cut(v.Id, "/"); return ns }))
	require.ErrorIs(t, err, ErrQuotaExceeded)
	assert.Equal(t, 20, res.Upserted)
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, 1, sent["new"], "one request into the refused namespace")
	assert.Equal(t, 1, logs.count("ERROR index refused a new namespace; its records fail"))
}
