package upsert

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
)

// Class says what kind of failure an error is. The class decides what the
// library does about it: wait and retry, split the batch, or give up on the
// records. Every error maps to exactly one class; see [Classify].
type Class int

// The classes, in the order the library checks them. The zero Class is not
// a failure class; [Classify] never returns it for a non-nil error.
const (
	// ClassRateLimited: the index refused the request because the caller is
	// writing too fast (HTTP 429, gRPC RESOURCE_EXHAUSTED). Retried after a
	// longer backoff while the limiter lowers the send rate.
	ClassRateLimited Class = iota + 1

	// ClassTimeout: no answer in time (HTTP 408 or 504, gRPC
	// DEADLINE_EXCEEDED, the per-request timeout, a network timeout). The
	// write may or may not have landed. Retried; a batch of more than one
	// record is split in halves first.
	ClassTimeout

	// ClassServer: the index failed (HTTP 5xx but 501, gRPC UNAVAILABLE,
	// INTERNAL, UNKNOWN, ABORTED, DATA_LOSS; CANCELED from the index, HTTP
	// 499, while the caller's context lives; a reset or refused
	// connection) or the error is not recognised. Retried after a backoff.
	ClassServer

	// ClassTooLarge: the request was larger than the index or the transport
	// accepts (gRPC's own "message larger than max", HTTP 413). The batch is
	// split in halves; it is never resent unchanged.
	ClassTooLarge

	// ClassInvalid: the index rejected the content of the request (other
	// 4xx but 499, gRPC INVALID_ARGUMENT, FAILED_PRECONDITION, OUT_OF_RANGE,
	// ALREADY_EXISTS) or the record broke one of Pinecone's rules before it
	// was sent. Never retried: a batch is bisected so that only the bad
	// records fail.
	ClassInvalid

	// ClassDenied: the index refused the caller, not the records (HTTP 401,
	// 403, 404, 501, gRPC UNAUTHENTICATED, PERMISSION_DENIED, NOT_FOUND,
	// UNIMPLEMENTED). Every later request would fail the same way, so the
	// run stops and the remaining records fail with this class. A denied
	// error also matches [ErrInvalid]: both are permanent.
	ClassDenied

	// ClassCanceled: the caller's context ended. Not a timeout: nothing is
	// retried and records not yet written are reported with this class.
	// [Classify] also gives it to the index's own CANCELED (gRPC, or HTTP
	// 499), which a run retries as ClassServer while the caller's context
	// lives.
	ClassCanceled

	// ClassQuotaExceeded: the project's quota or plan forbids more writes:
	// the monthly write units are spent (HTTP 429 or gRPC
	// RESOURCE_EXHAUSTED "…reached your write unit limit for the current
	// month…"), a quota such as storage or namespaces is reached (HTTP 403
	// QUOTA_EXCEEDED, gRPC PERMISSION_DENIED with a quota message), or
	// payment is required (HTTP 402). No retry can succeed before the
	// quota changes, so the run stops at the first such answer and the
	// remaining records fail with this class. The quota of namespaces per
	// index ("…reached the max namespaces…") refuses only a namespace the
	// index does not hold yet: the records of that namespace fail with
	// this class (those after the first refusal unsent), and the other
	// namespaces go on. It is a kind of denial: a quota error also
	// matches [ErrDenied] and [ErrInvalid].
	ClassQuotaExceeded

	numClasses = iota + 1
)

// Sentinels, one per class, for errors.Is on the error returned by [All]
// and on [Failure.Err].
var (
	ErrRateLimited = errors.New("rate limited")
	ErrTimeout     = errors.New("timeout")
	ErrServer      = errors.New("server error")
	ErrTooLarge    = errors.New("request too large")
	ErrInvalid     = errors.New("invalid")
	ErrDenied      = errors.New("denied")
	ErrCanceled    = errors.New("canceled")
	// ErrQuotaExceeded: an error of the quota class matches ErrDenied and
	// ErrInvalid too.
	ErrQuotaExceeded = errors.New("quota exceeded")
)

// ErrBadOption is matched (errors.Is) by the error a run ([All], [Stream],
// [Records], [NewWriter]) returns when an option or an argument is missing
// or makes no sense. Nothing was sent in that case.
var ErrBadOption = errors.New("upsert: bad option")

var classNames = [numClasses]string{
	ClassRateLimited:   "rate-limited",
	ClassTimeout:       "timeout",
	ClassServer:        "server",
	ClassTooLarge:      "too-large",
	ClassInvalid:       "invalid",
	ClassDenied:        "denied",
	ClassCanceled:      "canceled",
	ClassQuotaExceeded: "quota-exceeded",
}

var classSentinels = [numClasses]error{
	ClassRateLimited:   ErrRateLimited,
	ClassTimeout:       ErrTimeout,
	ClassServer:        ErrServer,
	ClassTooLarge:      ErrTooLarge,
	ClassInvalid:       ErrInvalid,
	ClassDenied:        ErrDenied,
	ClassCanceled:      ErrCanceled,
	ClassQuotaExceeded: ErrQuotaExceeded,
}

// String returns the class's name as used in logs and reports, such as
// "rate-limited".
func (c Class) String() string {
	if c.valid() {
		return classNames[c]
	}
	return fmt.Sprintf("Class(%d)", int(c))
}

// Err returns the class's sentinel error, or nil for an unknown class.
func (c Class) Err() error {
	if c.valid() {
		return classSentinels[c]
	}
	return nil
}

func (c Class) valid() bool { return c > 0 && c < numClasses }

// Classes returns every class in order, for reports that list counts by
// class.
func Classes() []Class {
	cs := make([]Class, 0, numClasses-1)
	for c := Class(1); c < numClasses; c++ {
		cs = append(cs, c)
	}
	return cs
}

// Error is the library's error: one failed request, or one record rejected
// before it was sent. Use errors.As to read it from the error [All] returns
// or from [Failure.Err], and errors.Is with the class sentinels.
type Error struct {
	// Class is what the library made of the failure.
	Class Class
	// StatusCode is the HTTP status the index answered, or 0.
	StatusCode int
	// GRPCCode is the gRPC status code the index answered, or codes.OK when
	// the failure was not a gRPC status.
	GRPCCode codes.Code
	// RetryAfter is how long the index asked the caller to wait (Retry-After
	// or gRPC pushback), or 0 when it did not say. The library counts at
	// most a minute of it, also when an UpsertFunc returns an *Error with a
	// longer one.
	RetryAfter time.Duration
	// Limit is the limit of the index that a rate-limited answer names, so
	// that the limiter lowers what was exceeded; [LimitUnknown] when the
	// answer does not say, and for other classes.
	Limit Limit
	// Err is the underlying error; the API key never appears in it.
	Err error
}

func (e *Error) Error() string {
	if e == nil {
		return errTypedNil.Error()
	}
	var b strings.Builder
	b.WriteString(e.Class.String())
	switch {
	case e.StatusCode != 0:
		fmt.Fprintf(&b, " (HTTP %d)", e.StatusCode)
	case e.GRPCCode != codes.OK:
		fmt.Fprintf(&b, " (gRPC %s)", e.GRPCCode)
	}
	if e.Err != nil {
		b.WriteString(": ")
		b.WriteString(e.Err.Error())
	}
	return b.String()
}

// Unwrap returns the underlying error.
func (e *Error) Unwrap() error {
	if e == nil {
		return nil
	}
	return e.Err
}

// Is reports whether target is the sentinel of e's class. A denied error is
// also [ErrInvalid], since both are permanent, and a quota error is also
// [ErrDenied] and [ErrInvalid].
func (e *Error) Is(target error) bool {
	if e == nil || target == nil {
		return false
	}
	if target == e.Class.Err() {
		return true
	}
	switch e.Class {
	case ClassQuotaExceeded:
		return target == ErrDenied || target == ErrInvalid
	case ClassDenied:
		return target == ErrInvalid
	}
	return false
}

// errTypedNil is the cause given to a nil *Error found in an error chain:
// a function declared to return error that returned a nil *Error ("var e
// *Error; return e") handed over a non-nil error that says nothing.
var errTypedNil = errors.New("a nil *upsert.Error was returned as an error (a typed nil); treated as an unknown failure")

// asError returns the first *Error in err's chain, or nil. A typed nil
// *Error is replaced by a server-class *Error that says what it was, so that
// no caller dereferences nil.
func asError(err error) *Error {
	var e *Error
	if !errors.As(err, &e) {
		return nil
	}
	if e == nil {
		return &Error{Class: ClassServer, Err: errTypedNil}
	}
	return e
}

// Limit names a limit of the index that an answer says was reached.
type Limit int

// The limits Pinecone's rate-limited answers name.
const (
	// LimitUnknown: the answer does not say which limit (a bare 429 or
	// RESOURCE_EXHAUSTED).
	LimitUnknown Limit = iota
	// LimitRequests: upsert requests per second of a namespace.
	LimitRequests
	// LimitBytes: upsert size (bytes) per second.
	LimitBytes
	// LimitEmbedTokens: embedding tokens per minute, for integrated records.
	LimitEmbedTokens
	// LimitInferenceRequests: embedding (inference) requests per second or
	// per minute, for integrated records.
	LimitInferenceRequests
)

var limitNames = [...]string{
	LimitUnknown:           "unknown",
	LimitRequests:          "requests",
	LimitBytes:             "bytes",
	LimitEmbedTokens:       "embed-tokens",
	LimitInferenceRequests: "inference-requests",
}

// String returns the limit's name as used in logs, such as "requests".
func (l Limit) String() string {
	if l >= 0 && int(l) < len(limitNames) {
		return limitNames[l]
	}
	return fmt.Sprintf("Limit(%d)", int(l))
}

// Code returns the error's code as logs show it: the HTTP status, else the
// gRPC code name, else the class.
func (e *Error) Code() string {
	switch {
	case e == nil:
		return ClassServer.String()
	case e.StatusCode != 0:
		return fmt.Sprint(e.StatusCode)
	case e.GRPCCode != codes.OK:
		return e.GRPCCode.String()
	default:
		return e.Class.String()
	}
}

// RunError is the error a run ([All], [Stream], [Records], [Writer.Close])
// returns when some records did not land. It
// summarises the failures by class and wraps one [*Error] per class, so that
// errors.Is(err, ErrRateLimited) and errors.As(err, &upsertErr) work. The
// records themselves are in [Result.Failed].
type RunError struct {
	// Failed is the number of records that did not land, out of Total.
	Failed, Total int
	// ByClass counts the failed records per class.
	ByClass map[Class]int
	// Errs holds the first error of each class that failed records, in
	// class order.
	Errs []error
}

func (e *RunError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "upsert: %d of %d records failed", e.Failed, e.Total)
	sep := ": "
	for _, c := range Classes() {
		n := e.ByClass[c]
		if n == 0 {
			continue
		}
		fmt.Fprintf(&b, "%s%d %s", sep, n, c)
		sep = ", "
	}
	if len(e.Errs) > 0 {
		fmt.Fprintf(&b, " (first: %v)", e.Errs[0])
	}
	return b.String()
}

// Unwrap returns one error per failure class.
func (e *RunError) Unwrap() []error { return e.Errs }

// PanicError is the cause of a batch's failure when the function sending it
// (an [UpsertFunc], a [RecordsFunc], the SDK under [WithIndex]) or the
// classifier of [WithClassifier] panicked. The library recovers the panic
// on its own goroutine, where it would kill the process, and fails the
// batch at once with a server-class [*Error] wrapping this: a panic is a
// bug, which a retry would repeat, and the batch may have been sent before
// it. Read it with errors.As from [Failure.Err] or the run's error. A
// panic of the function of [WithAcks] or [WithProgress] stops the run with
// a canceled-class [*Error] wrapping one; a panic of a [Checkpoint]'s
// method is that method's error, wrapping one.
type PanicError struct {
	// Value is what the function panicked with.
	Value any
	// Stack is the panicking goroutine's stack, for a bug report.
	Stack []byte
	fn    string // the function that panicked, when not the send function
}

func (e *PanicError) Error() string {
	fn := e.fn
	if fn == "" {
		fn = "send function"
	}
	return fmt.Sprintf("upsert: the %s panicked: %v", fn, e.Value)
}

// Unwrap returns the panic's value when it is an error.
func (e *PanicError) Unwrap() error {
	err, _ := e.Value.(error)
	return err
}
