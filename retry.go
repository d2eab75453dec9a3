package upsert

import (
	"context"
	"errors"
	"math"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/pinecone-io/go-pinecone/v5/pinecone"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Classify returns the class of err: what kind of failure it is and so what
// the library does about it. It understands *pinecone.PineconeError (HTTP
// statuses), gRPC status errors (also wrapped), context errors, net and
// syscall errors, *backoff.PermanentError and the library's own [*Error].
// An error it does not recognise is [ClassServer]: retried a few times, then
// reported. Classify(nil) returns 0.
//
// Classify cannot tell the caller's context ending from a per-request
// timeout (both are context.DeadlineExceeded); the pipeline checks the
// caller's context first, so a deadline seen here is a [ClassTimeout].
func Classify(err error) Class {
	if err == nil {
		return 0
	}
	if ue := asError(err); ue != nil && ue.Class.valid() {
		return ue.Class
	}
	var pe *backoff.PermanentError
	if errors.As(err, &pe) {
		return ClassInvalid
	}
	if code := httpStatus(err); code != 0 {
		return classOfHTTP(code, err.Error())
	}
	if st, ok := grpcStatus(err); ok {
		if clientMarshalFailed(st) {
			return ClassInvalid
		}
		return classOfGRPC(st.Code(), st.Message())
	}
	switch {
	case errors.Is(err, context.Canceled):
		return ClassCanceled
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, syscall.ETIMEDOUT):
		return ClassTimeout
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return ClassTimeout
	}
	return ClassServer
}

// classOfHTTP returns the class of an HTTP answer with status code and
// message msg (the body, or the error's text that holds it).
func classOfHTTP(code int, msg string) Class {
	switch {
	case code == http.StatusPaymentRequired, quotaStatus(code, msg) && isQuota(msg):
		return ClassQuotaExceeded
	case code == http.StatusRequestEntityTooLarge,
		code/100 == 4 && tooLargeText(msg):
		// Before 429: whatever status carries it, a request too large is
		// split, not resent whole after a wait.
		return ClassTooLarge
	case code == http.StatusTooManyRequests:
		return ClassRateLimited
	case code == http.StatusRequestTimeout, code == http.StatusGatewayTimeout:
		return ClassTimeout
	case code == http.StatusUnauthorized, code == http.StatusForbidden, code == http.StatusNotFound,
		code == http.StatusNotImplemented: // UNIMPLEMENTED, as grpc-gateway maps it
		return ClassDenied
	case code == statusClientClosedRequest:
		// CANCELED, as grpc-gateway maps it: canceled as over gRPC, which
		// the run retries while the caller's context is alive.
		return ClassCanceled
	case code >= 500,
		code == http.StatusConflict && aborted(msg):
		// ABORTED, as grpc-gateway maps it to 409: a conflict worth
		// another try, as over gRPC.
		return ClassServer
	case code >= 400:
		return ClassInvalid
	default:
		// A 1xx-3xx reported as an error: the exchange went wrong, not the
		// records, so it is worth another try.
		return ClassServer
	}
}

// quotaStatus reports whether an HTTP answer with status code (and
// message msg) is one under which classOfHTTP reads a quota's text: the
// statuses grpc-gateway gives the gRPC codes under which classOfGRPC reads
// it, so that a quota stops a run over REST as over gRPC. Those are 429
// (RESOURCE_EXHAUSTED), 403 (PERMISSION_DENIED), 400 (INVALID_ARGUMENT,
// FAILED_PRECONDITION, OUT_OF_RANGE) and 409 (ALREADY_EXISTS; not
// ABORTED's 409, a conflict worth another try).
func quotaStatus(code int, msg string) bool {
	switch code {
	case http.StatusTooManyRequests, http.StatusForbidden, http.StatusBadRequest:
		return true
	case http.StatusConflict:
		return !aborted(msg)
	}
	return false
}

// statusClientClosedRequest is the HTTP status grpc-gateway gives gRPC's
// CANCELED (nginx's 499).
const statusClientClosedRequest = 499

// proxyStatus matches grpc-go's status for an HTTP answer that was no gRPC
// one (a proxy's or a load balancer's page), whose code grpc-go guessed:
// the HTTP status it quotes says more.
var proxyStatus = regexp.MustCompile(`^unexpected HTTP status code received from server: (\d{3})\b`)

// abortedCode matches the numeric code of ABORTED in a google.rpc.Status
// body, the shape of Pinecone's data-plane REST errors ({"code":10,...}),
// also as the SDK's own error quotes it, escaped in a JSON string.
var abortedCode = regexp.MustCompile(`\\?"code\\?"\s*:\s*10\b`)

// aborted reports whether an HTTP error body (or an error's text holding
// it) carries gRPC's ABORTED, by name or by number.
func aborted(msg string) bool {
	return strings.Contains(msg, "ABORTED") || abortedCode.MatchString(msg)
}

func classOfGRPC(code codes.Code, msg string) Class {
	if m := proxyStatus.FindStringSubmatch(msg); m != nil {
		status, _ := strconv.Atoi(m[1])
		return classOfHTTP(status, msg)
	}
	switch code {
	case codes.ResourceExhausted:
		// gRPC answers RESOURCE_EXHAUSTED itself when a message exceeds
		// the size limit of either peer. Its status carries nothing but
		// the text to tell that apart from the index's rate limit, so the
		// text is matched here; so is a monthly quota's.
		switch {
		case strings.Contains(wording(msg), "larger than max"), tooLargeText(msg):
			return ClassTooLarge
		case isQuota(msg):
			return ClassQuotaExceeded
		}
		return ClassRateLimited
	case codes.DeadlineExceeded:
		return ClassTimeout
	case codes.InvalidArgument, codes.FailedPrecondition, codes.OutOfRange, codes.AlreadyExists:
		switch {
		case isQuota(msg):
			return ClassQuotaExceeded
		case tooLargeText(msg):
			return ClassTooLarge
		}
		return ClassInvalid
	case codes.PermissionDenied:
		if isQuota(msg) {
			return ClassQuotaExceeded
		}
		return ClassDenied
	case codes.Unauthenticated, codes.NotFound, codes.Unimplemented:
		return ClassDenied
	case codes.Canceled:
		return ClassCanceled
	default: // Unavailable, Internal, Unknown, Aborted, DataLoss
		return ClassServer
	}
}

// clientMarshalFailed reports gRPC's own INTERNAL error for a request it
// could not encode (a string that is not UTF-8, say): nothing was sent,
// and resending the same records fails the same way, so the batch is
// bisected as invalid. Validation refuses what it knows of first.
func clientMarshalFailed(st *status.Status) bool {
	return st.Code() == codes.Internal && strings.HasPrefix(st.Message(), "grpc: error while marshaling")
}

// httpStatus returns the HTTP status carried by err, or 0.
func httpStatus(err error) int {
	var pe *pinecone.PineconeError
	if errors.As(err, &pe) && pe != nil && pe.Code >= 100 {
		return pe.Code
	}
	if ue := asError(err); ue != nil {
		return ue.StatusCode
	}
	return 0
}

// grpcStatus returns the gRPC status carried by err, also when wrapped.
func grpcStatus(err error) (*status.Status, bool) {
	var gs interface{ GRPCStatus() *status.Status }
	if !errors.As(err, &gs) {
		return nil, false
	}
	st := gs.GRPCStatus()
	return st, st != nil && st.Code() != codes.OK
}

// maxServerWait bounds the wait an index asks for, however it asks
// (Retry-After, grpc-retry-pushback-ms, an [*Error]'s RetryAfter): a
// Retry-After pauses every request of the namespace, and Pinecone's limits
// are per second and per minute, so a longer ask is not about them and
// would stall the run until its context ends.
const maxServerWait = time.Minute

// serverWait is the one rule for a wait the index asked for: nothing for
// none or a negative one, at most maxServerWait (a larger ask never waits
// less than a smaller one).
func serverWait(d time.Duration) time.Duration {
	return min(max(d, 0), maxServerWait)
}

// retryAfterOf returns the wait the index asked for, from any error in the
// chain that has a RetryAfter() time.Duration method (the library's gRPC
// interceptor and REST transport add one), or 0.
func retryAfterOf(err error) time.Duration {
	var ra interface{ RetryAfter() time.Duration }
	if errors.As(err, &ra) {
		return serverWait(ra.RetryAfter())
	}
	if ue := asError(err); ue != nil {
		return serverWait(ue.RetryAfter)
	}
	return 0
}

// describe turns any error from a request into the library's [*Error],
// using classify for the class.
func describe(err error, classify func(error) Class) *Error {
	if ue := asError(err); ue != nil && ue.Class.valid() {
		if ue.RetryAfter == serverWait(ue.RetryAfter) {
			return ue
		}
		bounded := *ue
		bounded.RetryAfter = serverWait(ue.RetryAfter)
		return &bounded
	}
	e := &Error{Class: classify(err), Err: err, RetryAfter: retryAfterOf(err)}
	if !e.Class.valid() {
		e.Class = ClassServer
	}
	e.StatusCode = httpStatus(err)
	if st, ok := grpcStatus(err); ok {
		e.GRPCCode = st.Code()
	}
	if e.Class == ClassRateLimited {
		e.Limit = limitNamed(err.Error())
	}
	return e
}

// parseRetryAfter reads a Retry-After value, delay-seconds or an HTTP
// date, bounded by [serverWait]. It returns 0 when v is empty or
// unreadable.
func parseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	// A number beyond float64 parses as an infinity, with ErrRange: the
	// longest wait, not none.
	if s, err := strconv.ParseFloat(v, 64); err == nil || errors.Is(err, strconv.ErrRange) {
		if math.IsNaN(s) {
			return 0
		}
		// Bounded before the conversion, which would overflow.
		return serverWait(time.Duration(min(s, maxServerWait.Seconds()) * float64(time.Second)))
	}
	if t, err := http.ParseTime(v); err == nil {
		return serverWait(t.Sub(now))
	}
	return 0
}

// retryPolicy holds how many times each class is retried and how long to
// wait in between.
type retryPolicy struct {
	maxRetries [numClasses]int
	base, cap  time.Duration
}

// Defaults from the article the library started from (see README).
const (
	defaultBackoffBase = 250 * time.Millisecond
	defaultBackoffCap  = 30 * time.Second
	// rateLimitedFactor stretches the backoff of a 429: the index asked for
	// less load, and the limiter needs a round trip to lower it.
	rateLimitedFactor = 2
)

func defaultRetryPolicy() retryPolicy {
	var p retryPolicy
	p.maxRetries[ClassRateLimited] = 8
	p.maxRetries[ClassTimeout] = 4
	p.maxRetries[ClassServer] = 4
	p.base, p.cap = defaultBackoffBase, defaultBackoffCap
	return p
}

// backoffFor returns the full-jitter backoff for class c.
func (p *retryPolicy) backoffFor(c Class, rnd func(int64) int64) *fullJitter {
	base := p.base
	if c == ClassRateLimited {
		if base > p.cap/rateLimitedFactor {
			base = p.cap // the ceiling's anyway, and the product could overflow
		} else {
			base *= rateLimitedFactor
		}
	}
	return &fullJitter{base: base, cap: p.cap, rand: rnd}
}

// fullJitter is a backoff.BackOff that waits a uniformly random duration in
// [0, min(cap, base·2^n)] before the n-th retry (n from 0): the "full
// jitter" of AWS's analysis, which spreads retries best. cenkalti/backoff's
// own randomisation keeps a floor, so it is written here.
type fullJitter struct {
	base, cap time.Duration
	n         int
	rand      func(n int64) int64 // uniform in [0, n)
}

var _ backoff.BackOff = (*fullJitter)(nil)

// NextBackOff returns the next wait; it never returns backoff.Stop, the
// retry limits are counted by the caller.
func (b *fullJitter) NextBackOff() time.Duration {
	ceil := b.ceiling(b.n)
	b.n++
	if ceil <= 0 {
		return 0
	}
	n := int64(ceil)
	if n < math.MaxInt64 {
		n++ // ceil itself may be drawn; at MaxInt64 (a cap meaning none) it may not
	}
	return time.Duration(b.rand(n))
}

// Reset starts the sequence over.
func (b *fullJitter) Reset() { b.n = 0 }

// ceiling returns min(cap, base·2^n) without overflowing.
func (b *fullJitter) ceiling(n int) time.Duration {
	if b.base <= 0 {
		return 0
	}
	if n >= 62 || b.base > b.cap>>min(n, 62) {
		return b.cap
	}
	return min(b.cap, b.base<<n)
}
