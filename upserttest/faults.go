package upserttest

import (
	"fmt"
	"math"
	"time"

	"google.golang.org/grpc/codes"
)

// A Request describes an upsert request as seen by a [FaultFunc]: a gRPC
// Upsert call, or a REST records upsert (see REST).
type Request struct {
	// Seq is the 1-based order of arrival of the upsert requests, of both
	// APIs, that reached the service of this server (requests rejected
	// before, such as oversized ones, REST bodies that are not NDJSON and
	// requests of either API with a wrong API key, get none). It keeps
	// counting across Restart and starts again from 1 after Reset.
	Seq int
	// Namespace is the request's namespace, exactly as received (for REST,
	// the path segment, unescaped). The Pinecone SDK sends "__default__" when
	// no namespace was given.
	Namespace string
	// IDs are the ids of the vectors, or records, in the request, in order;
	// "" for a record without a string id (which validation then rejects).
	// A FaultFunc must not modify them.
	IDs []string
	// Bytes is the size of the request, in bytes: the encoded protobuf
	// message of a gRPC call, the body of a REST request.
	Bytes int
	// Time is when the request arrived.
	Time time.Time
	// Elapsed is the time from NewServer to the arrival of the request, for
	// time-based scripts such as Outage. Restart and Reset do not reset it.
	Elapsed time.Duration
	// REST reports whether the request is a REST records upsert (the SDK's
	// UpsertRecords) rather than a gRPC Upsert call.
	REST bool
}

// A Fault tells the server how to answer one upsert request. The zero Fault
// means no fault: the request is handled normally. For a REST records
// upsert, the code is answered with its HTTP status (see the package
// documentation), and "vectors" below means records.
//
// A fault that writes nothing (Write == 0) and has Code != codes.OK or Reset
// set is answered without looking at the request any further: it is not
// validated, does not take admission tokens and does not wait for a write
// slot. Any other fault lets the request go through validation, admission,
// the slot queue and the write latency like a normal request (a validation
// or admission failure is then answered as usual), and only changes what is
// written and how it is answered.
type Fault struct {
	// Code is the gRPC status code to answer instead of OK. codes.OK means
	// no error.
	Code codes.Code
	// Message is the status message. If empty, a default for Code is used:
	// the upsert-size message of WithRate for codes.ResourceExhausted, and
	// "upserttest: injected fault: <code>" for the others.
	Message string
	// RetryAfter, if positive, is sent as response metadata "retry-after"
	// (whole seconds, rounded up, like the HTTP header) and
	// "grpc-retry-pushback-ms" (milliseconds, rounded up), both in the
	// response header and in the trailer; to a REST request, as the HTTP
	// header Retry-After (whole seconds, rounded up). It is sent whatever
	// the answer, OK included.
	RetryAfter time.Duration
	// Delay is extra time before answering; if anything is written, it
	// starts after the write. With Code == codes.OK it makes an ambiguous
	// timeout: the write is applied, but the client may time out before it
	// hears so. The delay is waited in full even if the client gives up;
	// only Close and Restart cut it short.
	Delay time.Duration
	// Write is the number of vectors written before answering when Code is
	// not codes.OK or Reset is set: 0 writes none, n > 0 the first n of the
	// request (all of them if it has fewer), and WriteAll all of them (a
	// write that succeeded but was answered with an error). With Code ==
	// codes.OK and no Reset, Write is ignored and all vectors are written.
	Write int
	// Reset, if set, makes the server write per Write, wait Delay, and then
	// close the client's TCP connection (with an RST) without answering.
	// A gRPC client sees codes.Unavailable, an HTTP client a transport
	// error; the request is counted under codes.Unavailable in Stats.Codes
	// (and, for REST, under 0 in Stats.HTTPCodes).
	Reset bool
}

// WriteAll as [Fault.Write] writes every vector of the request.
const WriteAll = -1

// A FaultFunc is a fault script: it is called once for every upsert request
// (gRPC or REST, see [Request.REST]) that reaches the service, and its answer decides how the request is
// treated. It is called concurrently by concurrent requests, so it must be
// safe for concurrent use.
type FaultFunc func(Request) Fault

// shortCircuit reports whether the fault is answered without processing the
// request (see the Fault documentation).
func (f Fault) shortCircuit() bool {
	return f.Write == 0 && (f.Code != codes.OK || f.Reset)
}

// written is the number of the n vectors of a request that the fault lets
// the server write.
func (f Fault) written(n int) int {
	if f.Code == codes.OK && !f.Reset {
		return n
	}
	switch {
	case f.Write < 0:
		return n
	case f.Write > n:
		return n
	default:
		return f.Write
	}
}

func (f Fault) message() string {
	if f.Message != "" {
		return f.Message
	}
	if f.Code == codes.ResourceExhausted {
		return upsertSizeMessage
	}
	return "upserttest: injected fault: " + f.Code.String()
}

// RateLimitBurst returns a fault script that answers codes.ResourceExhausted,
// with the rate-limit message of [WithRate], to the n requests with Seq in
// [from, from+n), and leaves the others alone. Nothing of those requests is
// written. RateLimitBurst panics if n < 0.
func RateLimitBurst(from, n int) FaultFunc {
	if n < 0 {
		panic(fmt.Sprintf("upserttest: RateLimitBurst(%d, %d): need n >= 0", from, n))
	}
	return func(r Request) Fault {
		if r.Seq >= from && r.Seq < from+n {
			return Fault{Code: codes.ResourceExhausted}
		}
		return Fault{}
	}
}

// ErrorRate returns a fault script that answers code, writing nothing, to a
// share p (0 to 1) of requests. Which requests is decided by seed and
// [Request.Seq] alone, so a run is reproducible whatever the interleaving of
// concurrent requests. ErrorRate panics unless 0 <= p <= 1.
func ErrorRate(code codes.Code, p float64, seed int64) FaultFunc {
	checkShare(fmt.Sprintf("ErrorRate(%v, %v, %d)", code, p, seed), p)
	return func(r Request) Fault {
		if chance(seed, saltErrorRate, r.Seq) < p {
			return Fault{Code: code}
		}
		return Fault{}
	}
}

// Outage returns a fault script that answers code, writing nothing, to every
// request that arrives during the last length of each period of every,
// counted from NewServer by [Request.Elapsed]: for k = 0, 1, 2, …, during
//
//	[k*every + every - length, (k+1)*every)
//
// So the server first works for every-length, and "a second of 503s every
// 4 s" is Outage(4*time.Second, time.Second, codes.Unavailable): requests
// fail from 3 s to 4 s, from 7 s to 8 s, and so on. Outage panics unless
// 0 < length <= every.
func Outage(every, length time.Duration, code codes.Code) FaultFunc {
	if every <= 0 || length <= 0 || length > every {
		panic(fmt.Sprintf("upserttest: Outage(%v, %v): need 0 < length <= every", every, length))
	}
	return func(r Request) Fault {
		if r.Elapsed >= 0 && r.Elapsed%every >= every-length {
			return Fault{Code: code}
		}
		return Fault{}
	}
}

// AmbiguousTimeouts returns a fault script that, for a share p of requests
// (decided like [ErrorRate]), writes the request normally and then delays
// the OK answer by delay, so that a client with a shorter deadline times out
// on a write that landed. AmbiguousTimeouts panics unless 0 <= p <= 1 and
// delay >= 0.
func AmbiguousTimeouts(p float64, delay time.Duration, seed int64) FaultFunc {
	name := fmt.Sprintf("AmbiguousTimeouts(%v, %v, %d)", p, delay, seed)
	checkShare(name, p)
	if delay < 0 {
		panic("upserttest: " + name + ": need delay >= 0")
	}
	return func(r Request) Fault {
		if chance(seed, saltAmbiguous, r.Seq) < p {
			return Fault{Delay: delay}
		}
		return Fault{}
	}
}

// PartialWrites returns a fault script that, for a share p of requests
// (decided like [ErrorRate]), writes the first half of the vectors (rounded
// down) and answers codes.Internal. PartialWrites panics unless
// 0 <= p <= 1.
func PartialWrites(p float64, seed int64) FaultFunc {
	checkShare(fmt.Sprintf("PartialWrites(%v, %d)", p, seed), p)
	return func(r Request) Fault {
		if chance(seed, saltPartial, r.Seq) < p {
			return Fault{Code: codes.Internal, Write: len(r.IDs) / 2}
		}
		return Fault{}
	}
}

// ConnectionResets returns a fault script that, for a share p of requests
// (decided like [ErrorRate]), writes nothing and resets the client's
// connection without answering. gRPC clients see codes.Unavailable and
// reconnect on their next call. ConnectionResets panics unless
// 0 <= p <= 1.
func ConnectionResets(p float64, seed int64) FaultFunc {
	checkShare(fmt.Sprintf("ConnectionResets(%v, %d)", p, seed), p)
	return func(r Request) Fault {
		if chance(seed, saltReset, r.Seq) < p {
			return Fault{Reset: true}
		}
		return Fault{}
	}
}

// RejectIDs returns a fault script that rejects, with codes.InvalidArgument,
// every request containing any of ids. The whole request is rejected and
// nothing of it is written; the message names no id, like most of the real
// service's validation errors (see [MaxVectorsPerRequest] for the two that
// do).
func RejectIDs(ids ...string) FaultFunc {
	set := make(map[string]struct{}, len(ids))
	for _, id := range ids {
		set[id] = struct{}{}
	}
	return func(r Request) Fault {
		for _, id := range r.IDs {
			if _, ok := set[id]; ok {
				return Fault{Code: codes.InvalidArgument, Message: "Invalid request: a record in the request was rejected (upserttest.RejectIDs)"}
			}
		}
		return Fault{}
	}
}

// Chain returns a fault script that asks fs in order and returns the first
// fault with Code != codes.OK, Delay > 0 or Reset set, or no fault; the
// faults after it are not asked. Nil elements are skipped.
//
// A fault that only sets RetryAfter is not lost, since RetryAfter is sent
// whatever the answer: the fault returned carries its own RetryAfter if it
// sets one, and otherwise the first one set by the faults asked before it.
// So Chain(hint, ErrorRate(...)), where hint always sets RetryAfter, sends
// hint's RetryAfter with every answer, OK or error, but that of an error
// fault which sets its own.
func Chain(fs ...FaultFunc) FaultFunc {
	return func(r Request) Fault {
		var retryAfter time.Duration
		for _, f := range fs {
			if f == nil {
				continue
			}
			ft := f(r)
			if ft.Code != codes.OK || ft.Delay > 0 || ft.Reset {
				if ft.RetryAfter <= 0 && retryAfter > 0 {
					ft.RetryAfter = retryAfter
				}
				return ft
			}
			if retryAfter <= 0 && ft.RetryAfter > 0 {
				retryAfter = ft.RetryAfter
			}
		}
		return Fault{RetryAfter: retryAfter}
	}
}

// checkShare panics unless p, the share of requests of the fault script
// call (such as "ErrorRate(Unavailable, 1.5, 1)"), is from 0 to 1; NaN is
// not.
func checkShare(call string, p float64) {
	if !(p >= 0 && p <= 1) {
		panic("upserttest: " + call + ": need 0 <= p <= 1")
	}
}

// Salts keep the decisions of different scripts built with the same seed
// independent of each other.
const (
	saltErrorRate = 0x5e1f_0e77_a1b2_c3d4
	saltAmbiguous = 0x3c6e_f372_fe94_f82b
	saltPartial   = 0x9e37_79b9_7f4a_7c15
	saltReset     = 0x2545_f491_4f6c_dd1d
)

// chance maps (seed, salt, seq) to a number in [0, 1), uniformly and
// deterministically (SplitMix64 finalizer).
func chance(seed int64, salt uint64, seq int) float64 {
	x := uint64(seed) ^ salt
	x += uint64(seq) * 0x9e3779b97f4a7c15
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return float64(x>>11) / (1 << 53)
}

// retryAfterValues formats d as the "retry-after" (seconds) and
// "grpc-retry-pushback-ms" (milliseconds) values, both rounded up.
func retryAfterValues(d time.Duration) (seconds, millis string) {
	s := int64(math.Ceil(d.Seconds()))
	ms := int64(math.Ceil(float64(d) / float64(time.Millisecond)))
	return fmt.Sprint(s), fmt.Sprint(ms)
}
