package main

import (
	"context"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// upsertMethod ends the full gRPC method name of the SDK's upsert call
// ("/VectorService/Upsert", with the proto package before it).
const upsertMethod = "VectorService/Upsert"

// calls records, on the client side, the round trip and the answer code of
// every upsert call made through an index connection, whatever the strategy
// that made it. It is safe for concurrent use.
type calls struct {
	mu        sync.Mutex
	latencies []time.Duration
	codes     map[codes.Code]int
}

// dialOption returns the gRPC dial option, for pinecone.Client.Index, that
// records the connection's upsert calls into c. It chains a unary client
// interceptor, leaving any other interceptor in place.
func (c *calls) dialOption() grpc.DialOption {
	return grpc.WithChainUnaryInterceptor(c.intercept)
}

func (c *calls) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if !strings.HasSuffix(method, upsertMethod) {
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	start := time.Now()
	err := invoker(ctx, method, req, reply, cc, opts...)
	c.record(time.Since(start), status.Code(err))
	return err
}

func (c *calls) record(d time.Duration, code codes.Code) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.latencies = append(c.latencies, d)
	if c.codes == nil {
		c.codes = make(map[codes.Code]int)
	}
	c.codes[code]++
}

// callStats summarises the upsert calls seen by one or more recorders.
type callStats struct {
	// requests is the number of calls, and rateLimited those answered
	// codes.ResourceExhausted, as the client saw them.
	requests, rateLimited int
	p50, p99              time.Duration
}

// summarize returns the figures of the calls recorded by every c.
func summarize(cs ...*calls) callStats {
	var (
		all []time.Duration
		s   callStats
	)
	for _, c := range cs {
		c.mu.Lock()
		all = append(all, c.latencies...)
		s.rateLimited += c.codes[codes.ResourceExhausted]
		c.mu.Unlock()
	}
	slices.Sort(all)
	s.requests = len(all)
	s.p50 = quantile(all, 0.50)
	s.p99 = quantile(all, 0.99)
	return s
}

// quantile returns the q-quantile (0 to 1) of sorted by the nearest-rank
// method, or 0 when sorted is empty.
func quantile[T any](sorted []T, q float64) T {
	if len(sorted) == 0 {
		var zero T
		return zero
	}
	rank := int(math.Ceil(q * float64(len(sorted))))
	return sorted[min(max(rank, 1), len(sorted))-1]
}

// efficiency compares a run with the ideal of profile p: the time the
// index needs at best to accept the landed records, divided by the time the
// run took to settle all its records (or until it was stopped). When every
// record landed, that is the ideal time of the records; when some were lost
// or the run was stopped, it is the rate achieved beyond the burst as a
// share of the capacity. It returns 0 for a run that took no time.
func efficiency(p profile, landed int, elapsed time.Duration) float64 {
	if elapsed <= 0 {
		return 0
	}
	return p.idealTime(landed).Seconds() / elapsed.Seconds()
}
