package upserttest

import (
	"context"
	"time"

	"github.com/pinecone-io/go-pinecone/v5/pinecone"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// The life of an Upsert request:
//
//  1. arrival: counted in Stats, given its Seq;
//  2. API key check (WithAPIKey);
//  3. the fault script (WithFaults, SetFaults); a fault that writes nothing
//     and fails is answered now, after its Delay;
//  4. validation: per-request limits, then the dimension of the index;
//  5. admission by the namespace's token buckets (WithRate, ...);
//  6. waiting for a write slot of the namespace, in FIFO order (WithSlots);
//     a request whose client gives up while it waits is dropped;
//  7. write latency (WithLatency, ...), then the write, then the slot is
//     freed;
//  8. the fault's Delay, then the answer: OK, the fault's code, or a reset
//     connection.
//
// From step 7 on, the request's context is ignored: only Close and Restart
// interrupt it.

var (
	errRateLimited = status.Error(codes.ResourceExhausted, rateLimitMessage)
	errReset       = status.Error(codes.Unavailable, "upserttest: connection reset")
)

func (g *generation) upsert(ctx context.Context, req proto.Message) (proto.Message, error) {
	s := g.s
	arrival := time.Now()
	ns, vectors := decodeUpsert(req.ProtoReflect())
	size := proto.Size(req)
	seq := s.arrive(size)

	resp, err := g.processUpsert(ctx, Request{
		Seq:       seq,
		Namespace: ns,
		IDs:       ids(vectors),
		Bytes:     size,
		Time:      arrival,
		Elapsed:   arrival.Sub(s.start),
	}, vectors)
	s.answered(status.Code(err), err == errRateLimited)
	if err == errReset {
		// After counting, so that Stats is up to date when the client sees
		// the reset.
		s.resetConn(ctx)
	}
	return resp, err
}

func (g *generation) processUpsert(ctx context.Context, r Request, vectors []*pinecone.Vector) (proto.Message, error) {
	s := g.s
	if err := s.authorize(ctx); err != nil {
		return nil, err
	}

	var fault Fault
	if f := s.faultFunc(); f != nil {
		fault = f(r)
	}
	if fault.RetryAfter > 0 {
		sec, ms := retryAfterValues(fault.RetryAfter)
		md := metadata.Pairs("retry-after", sec, "grpc-retry-pushback-ms", ms)
		grpc.SetHeader(ctx, md)
		grpc.SetTrailer(ctx, md)
	}
	if fault.shortCircuit() {
		if err := g.wait(fault.Delay); err != nil {
			return nil, err
		}
		return nil, s.faultAnswer(fault)
	}

	if err := validate(vectors); err != nil {
		return nil, err
	}
	s.mu.Lock()
	dim := s.dim
	s.mu.Unlock()
	if _, err := checkDimension(vectors, dim); err != nil {
		return nil, err
	}

	caps := s.capacity(r.Namespace)
	if !caps.admit(r.Time, len(vectors), r.Bytes) {
		return nil, errRateLimited
	}

	if err := caps.slots.acquire(ctx, g.stop, s.queuedDelta); err != nil {
		if err == errStopped {
			return nil, err
		}
		return nil, status.FromContextError(err).Err()
	}
	s.inFlightDelta(+1)
	err := g.sleep(s.cfg.latency(len(vectors), r.Bytes))
	if err == nil {
		err = s.apply(r.Namespace, vectors[:fault.written(len(vectors))], vectors)
	}
	s.inFlightDelta(-1)
	caps.slots.release()
	if err != nil {
		return nil, err
	}

	if err := g.wait(fault.Delay); err != nil {
		return nil, err
	}
	if fault.Code != codes.OK || fault.Reset {
		return nil, s.faultAnswer(fault)
	}
	return newUpsertResponse(len(vectors)), nil
}

func ids(vectors []*pinecone.Vector) []string {
	out := make([]string, len(vectors))
	for i, v := range vectors {
		out[i] = v.Id
	}
	return out
}

// faultAnswer is the error answered for a fault with Code != OK or Reset;
// errReset asks upsert to reset the connection.
func (s *Server) faultAnswer(f Fault) error {
	if f.Reset {
		return errReset
	}
	return status.Error(f.Code, f.message())
}

// resetConn resets the connection the request of ctx came in on.
func (s *Server) resetConn(ctx context.Context) {
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		s.mux.reset(p.Addr.String())
	}
}

// authorize checks the "api-key" metadata against WithAPIKey.
func (s *Server) authorize(ctx context.Context) error {
	if s.cfg.apiKey == "" {
		return nil
	}
	md, _ := metadata.FromIncomingContext(ctx)
	if v := md.Get("api-key"); len(v) == 0 || v[0] != s.cfg.apiKey {
		return status.Error(codes.Unauthenticated, "Invalid API key")
	}
	return nil
}

// sleep waits d, ignoring the request's context: a write in progress is
// finished even if its client has gone. Only stopping the generation
// interrupts it, with errStopped.
func (g *generation) sleep(d time.Duration) error {
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-g.stop:
		return errStopped
	}
}

// wait waits d before an answer. Like sleep, it ignores the request's
// context: answering early when the client gives up could race the client's
// own deadline and deliver an answer it should have missed.
func (g *generation) wait(d time.Duration) error { return g.sleep(d) }
