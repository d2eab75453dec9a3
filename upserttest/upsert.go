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

// The life of an upsert request, gRPC Upsert or REST records upsert:
//
//  1. API key check (WithAPIKey), for a REST request before its body is
//     read: a request with a wrong key is answered codes.Unauthenticated
//     (401), counted in Stats.Requests and Codes, and gets no Seq;
//  2. arrival: counted in Stats, given its Seq;
//  3. the fault script (WithFaults, SetFaults); a fault that writes nothing
//     and fails is answered now, after its Delay;
//  4. validation: per-request limits, then, for vectors, the type and
//     dimension of the index, for records, the text to embed;
//  5. admission (limits.go): the quotas (WithMaxNamespaces,
//     WithMonthlyWriteUnits), then the namespace's token buckets (WithRate,
//     ...) and the index's (WithWriteUnitRate, WithEmbedTokensPerMinute);
//     an admitted request reserves its namespace for WithMaxNamespaces
//     until it has written or will not write (releaseNamespace);
//  6. waiting for a write slot of the namespace, in FIFO order (WithSlots);
//     a request whose client gives up while it waits is dropped;
//  7. write latency (WithLatency, ..., WithLatencyJitter), then the write,
//     which meters the write units of the records it overwrites, then the
//     slot is freed;
//  8. the fault's Delay, then the answer: OK, the fault's code, or a reset
//     connection.
//
// From step 7 on, the request's context is ignored: only Close and Restart
// interrupt it. processUpsert runs steps 3 to 8 for both APIs; upsert (here)
// and serveRecordsUpsert (rest.go) check the key, decode, count and answer
// in their protocol.

var errReset = status.Error(codes.Unavailable, "upserttest: connection reset")

// upsertCall is an upsert request as processUpsert sees it, whatever its
// protocol.
type upsertCall struct {
	// req is what the fault script sees; len(req.IDs) is the number of
	// items (vectors or records) of the request.
	req Request
	// tokens are the embedding tokens of a REST records upsert; 0 for
	// vectors.
	tokens int
	// retryAfter sends a fault's RetryAfter with the answer, whatever it
	// is.
	retryAfter func(time.Duration)
	// validate checks the request before admission.
	validate func() error
	// write applies the first k items of the request.
	write func(k int) error
}

func (g *generation) upsert(ctx context.Context, req proto.Message) (proto.Message, error) {
	s := g.s
	arrival := s.cfg.now()
	if err := s.authorizeGRPC(ctx); err != nil {
		// Before arrive, as a REST request's key is checked before its body
		// is read: no Seq, no bytes.
		s.countUnprocessed(codes.Unauthenticated, noHTTPStatus)
		return nil, err
	}
	ns, vectors := decodeUpsert(req.ProtoReflect())
	size := proto.Size(req)
	seq := s.arrive(size, false)

	err := g.processUpsert(ctx, upsertCall{
		req: Request{
			Seq:       seq,
			Namespace: ns,
			IDs:       ids(vectors),
			Bytes:     size,
			Time:      arrival,
			Elapsed:   arrival.Sub(s.start),
		},
		retryAfter: func(d time.Duration) {
			sec, ms := retryAfterValues(d)
			md := metadata.Pairs("retry-after", sec, "grpc-retry-pushback-ms", ms)
			_ = grpc.SetHeader(ctx, md)
			_ = grpc.SetTrailer(ctx, md)
		},
		validate: func() error {
			if err := validateNamespace(ns); err != nil {
				return err
			}
			shape := s.currentShape()
			if err := validate(vectors, shape); err != nil {
				return err
			}
			_, err := fit(vectors, shape)
			return err
		},
		write: func(k int) error { return s.apply(ns, vectors[:k], vectors) },
	})
	s.answered(err, noHTTPStatus, size)
	if err == errReset {
		// After counting, so that Stats is up to date when the client sees
		// the reset.
		s.resetConn(ctx)
	}
	if err != nil {
		return nil, err
	}
	return newUpsertResponse(len(vectors)), nil
}

// processUpsert runs steps 3 to 8 of the life of an upsert request. It
// returns nil for OK, errReset for a fault that resets the connection, and
// otherwise a gRPC status error.
func (g *generation) processUpsert(ctx context.Context, c upsertCall) error {
	s := g.s
	r := c.req

	var fault Fault
	if f := s.faultFunc(); f != nil {
		fault = f(r)
	}
	if fault.RetryAfter > 0 {
		c.retryAfter(fault.RetryAfter)
	}
	if fault.shortCircuit() {
		if err := g.wait(fault.Delay); err != nil {
			return err
		}
		return s.faultAnswer(fault)
	}

	if err := c.validate(); err != nil {
		return err
	}

	n := len(r.IDs)
	key := namespaceKey(r.Namespace)
	if err := s.admit(admission{namespace: key, now: r.Time, items: n, bytes: r.Bytes, tokens: c.tokens}); err != nil {
		return err
	}
	if err := g.writeInSlot(ctx, c, key, fault.written(n)); err != nil {
		return err
	}
	if err := g.wait(fault.Delay); err != nil {
		return err
	}
	if fault.Code != codes.OK || fault.Reset {
		return s.faultAnswer(fault)
	}
	return nil
}

// writeInSlot writes the first written records of c, an upsert admitted to
// namespace key, once one of the namespace's write slots is free and after
// the index's write latency, and releases the admission.
func (g *generation) writeInSlot(ctx context.Context, c upsertCall, key string, written int) error {
	s, r := g.s, c.req
	caps := s.capacity(key)
	if err := caps.slots.acquire(ctx, g.stop, s.queuedDelta); err != nil {
		s.releaseNamespace(key)
		if err == errStopped {
			return err
		}
		return status.FromContextError(err).Err()
	}
	if s.cfg.stalled(s.cfg.now().Sub(s.start)) {
		caps.slots.release()
		s.releaseNamespace(key)
		return s.faultAnswer(Fault{Code: codes.Unavailable})
	}
	s.inFlightDelta(+1)
	err := g.sleep(s.cfg.writeLatency(len(r.IDs), r.Bytes, r.Seq))
	if err == nil {
		err = c.write(written)
		if err == nil && ctx.Err() != nil {
			s.lateWrite()
		}
	}
	s.releaseNamespace(key)
	s.inFlightDelta(-1)
	caps.slots.release()
	return err
}

func ids(vectors []*pinecone.Vector) []string {
	out := make([]string, len(vectors))
	for i, v := range vectors {
		out[i] = v.Id
	}
	return out
}

// faultAnswer is the error answered for a fault with Code != OK or Reset;
// errReset asks the caller to reset the connection.
func (s *Server) faultAnswer(f Fault) error {
	if f.Reset {
		return errReset
	}
	return status.Error(f.Code, f.message())
}

// resetConn resets the connection the gRPC request of ctx came in on.
func (s *Server) resetConn(ctx context.Context) {
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		s.mux.reset(p.Addr.String())
	}
}

// authorizeGRPC checks the "api-key" metadata against WithAPIKey.
func (s *Server) authorizeGRPC(ctx context.Context) error {
	md, _ := metadata.FromIncomingContext(ctx)
	return s.checkAPIKey(md.Get("api-key"))
}

// checkAPIKey checks the values of the API key header of a request (the
// first one counts) against WithAPIKey.
func (s *Server) checkAPIKey(values []string) error {
	if s.cfg.apiKey == "" {
		return nil
	}
	if len(values) == 0 || values[0] != s.cfg.apiKey {
		return status.Error(codes.Unauthenticated, "Unauthorized")
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
