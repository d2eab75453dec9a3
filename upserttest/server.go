package upserttest

import (
	"fmt"
	"maps"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/pinecone-io/go-pinecone/v5/pinecone"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
)

// A Server is a Pinecone-compatible gRPC data plane listening on a loopback
// port, for tests. It stores the vectors upserted into it in memory, by
// namespace, and can simulate a limited capacity (see [WithRate],
// [WithSlots], [WithLatency]) and scripted faults (see [Fault]).
//
// Its methods are safe for concurrent use, including while requests are
// being served.
type Server struct {
	cfg   config
	mux   *muxListener
	addr  string
	start time.Time

	genMu  sync.Mutex // serializes Close and Restart
	gen    *generation
	closed bool

	mu       sync.Mutex
	store    map[string]map[string]*pinecone.Vector // namespace -> id -> vector
	dim      int                                    // 0: not yet fixed
	seq      int
	stats    Stats
	inFlight int
	queued   int
	caps     map[string]*nsCapacity
	faults   FaultFunc
}

// Stats counts what a [Server] has seen since it started, or since its last
// [Server.Reset]. It only concerns Upsert requests.
//
// The service counts each answer before sending it, so once a client has
// received an answer, Stats includes it; the exception is a request that
// gRPC rejects itself (see [WithMaxRequestBytes]).
type Stats struct {
	// Requests is the number of Upsert calls received, including rejected
	// ones (even those rejected by gRPC before reaching the service, such as
	// oversized ones).
	Requests int
	// Codes counts the answers to Upsert calls by gRPC status code,
	// codes.OK included. An answer is counted even if its client has already
	// gone (it then is the code the server would have sent). A connection
	// reset by a fault counts as codes.Unavailable; a request dropped from
	// the slot queue because its client gave up counts as
	// codes.DeadlineExceeded or codes.Canceled.
	Codes map[codes.Code]int
	// RateLimited is the number of Upsert requests answered
	// codes.ResourceExhausted because an admission bucket (WithRate,
	// WithByteRate, WithRequestRate) rejected them. Faults are not counted.
	RateLimited int
	// VectorsWritten is the number of vector writes applied, overwrites
	// included.
	VectorsWritten int
	// BytesReceived is the total encoded size, in bytes, of the Upsert
	// requests that reached the service.
	BytesReceived int64
	// MaxInFlight is the most Upsert requests being written at once, a
	// request being written from when it gets a write slot (WithSlots; at
	// admission if slots are unlimited) to the end of its write latency.
	// With WithSlots(n) and a single namespace it never exceeds n (slots are
	// per namespace).
	MaxInFlight int
	// MaxQueued is the most Upsert requests waiting for a write slot at
	// once.
	MaxQueued int
}

// generation is one gRPC server instance serving the Server's socket; Restart
// replaces it.
type generation struct {
	s      *Server
	grpc   *grpc.Server
	stop   chan struct{} // closed when the generation stops
	served chan struct{} // closed when Serve has returned

	mu       sync.Mutex
	stopping bool
	handlers sync.WaitGroup
}

// NewServer starts and returns a new Server listening on a random port of
// 127.0.0.1, configured by opts. The caller should call Close when finished,
// to shut it down. NewServer panics if it cannot listen, like
// net/http/httptest.NewServer.
func NewServer(opts ...Option) *Server {
	cfg := defaultConfig()
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(fmt.Sprintf("upserttest: failed to listen on a port: %v", err))
	}
	s := &Server{
		cfg:    cfg,
		mux:    newMuxListener(ln),
		addr:   ln.Addr().String(),
		start:  time.Now(),
		store:  make(map[string]map[string]*pinecone.Vector),
		dim:    cfg.dimension,
		stats:  Stats{Codes: make(map[codes.Code]int)},
		caps:   make(map[string]*nsCapacity),
		faults: cfg.faults,
	}
	s.gen = s.startGeneration()
	return s
}

// Host returns the server's address as "http://127.0.0.1:PORT", for
// pinecone.NewIndexConnParams.Host: the "http://" scheme makes the SDK use
// plaintext gRPC.
func (s *Server) Host() string { return "http://" + s.addr }

// Addr returns the server's address as "127.0.0.1:PORT".
func (s *Server) Addr() string { return s.addr }

// Close shuts the server down: it stops accepting connections, closes every
// open connection, abandons the requests in progress (those not yet written
// are not written) and waits for their handlers to return. Stored vectors
// remain readable with Vector, Vectors and the other accessors. Close may be
// called more than once and concurrently; later calls return at once, or
// once the first has finished.
func (s *Server) Close() {
	s.genMu.Lock()
	defer s.genMu.Unlock()
	if s.closed {
		return
	}
	s.closed = true
	s.gen.shutdown()
	s.mux.Close()
}

// Restart simulates a restart of the service: it drops every connection and
// abandons the requests in progress, like Close, then serves again on the
// same port. Stored vectors, the learned dimension, stats, fault script and
// rate buckets survive. The listening socket itself stays open, so clients
// that connect during the restart wait instead of being refused.
//
// gRPC clients see codes.Unavailable for calls in progress, and reconnect by
// themselves: a call made right after Restart may still fail with
// codes.Unavailable if the client has not yet noticed that its connection
// was closed. Restart on a closed Server does nothing.
func (s *Server) Restart() {
	s.genMu.Lock()
	defer s.genMu.Unlock()
	if s.closed {
		return
	}
	s.gen.shutdown()
	s.gen = s.startGeneration()
}

func (s *Server) startGeneration() *generation {
	g := &generation{
		s:      s,
		stop:   make(chan struct{}),
		served: make(chan struct{}),
	}
	g.grpc = grpc.NewServer(
		grpc.MaxRecvMsgSize(s.cfg.maxRequestBytes),
		grpc.StatsHandler(statsHandler{s}),
	)
	g.grpc.RegisterService(&serviceDesc, g)
	lis := s.mux.listener()
	go func() {
		defer close(g.served)
		g.grpc.Serve(lis)
	}()
	return g
}

// shutdown stops g: it interrupts its handlers, closes its connections and
// waits until its handlers and Serve have returned.
func (g *generation) shutdown() {
	g.mu.Lock()
	g.stopping = true
	close(g.stop)
	g.mu.Unlock()
	g.grpc.Stop()
	<-g.served
	g.handlers.Wait()
}

// enter registers a running handler; it fails once g is stopping.
func (g *generation) enter() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.stopping {
		return false
	}
	g.handlers.Add(1)
	return true
}

func (g *generation) leave() { g.handlers.Done() }

// Vector returns a deep copy of the vector stored under id in namespace, and
// whether there is one.
func (s *Server) Vector(namespace, id string) (*pinecone.Vector, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.store[namespace][id]
	if !ok {
		return nil, false
	}
	return cloneVector(v), true
}

// Vectors returns deep copies of the vectors stored in namespace, by id. The
// map is empty, not nil, if there are none.
func (s *Server) Vectors(namespace string) map[string]*pinecone.Vector {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]*pinecone.Vector, len(s.store[namespace]))
	for id, v := range s.store[namespace] {
		out[id] = cloneVector(v)
	}
	return out
}

// Count returns the number of vectors stored in namespace.
func (s *Server) Count(namespace string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.store[namespace])
}

// Namespaces returns the namespaces that hold at least one vector, sorted.
func (s *Server) Namespaces() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, 0, len(s.store))
	for ns, vs := range s.store {
		if len(vs) > 0 {
			out = append(out, ns)
		}
	}
	slices.Sort(out)
	return out
}

// Stats returns a snapshot of the server's counters.
func (s *Server) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stats
	st.Codes = maps.Clone(s.stats.Codes)
	return st
}

// Reset forgets every stored vector, the dimension learned from them (not
// one set with WithDimension), the stats, and the Seq count, and refills
// every admission bucket. It keeps the options, the fault script, and the
// connections; requests in progress go on, and are counted in the new
// stats.
func (s *Server) Reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.store = make(map[string]map[string]*pinecone.Vector)
	s.dim = s.cfg.dimension
	s.seq = 0
	s.stats = Stats{
		Codes:       make(map[codes.Code]int),
		MaxInFlight: s.inFlight,
		MaxQueued:   s.queued,
	}
	for _, c := range s.caps {
		c.resetBuckets(&s.cfg)
	}
}

// SetFaults replaces the fault script, for the requests that arrive from now
// on; nil removes it. See [WithFaults].
func (s *Server) SetFaults(f FaultFunc) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = f
}

func (s *Server) faultFunc() FaultFunc {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.faults
}

// capacity returns the capacity state of namespace, creating it if needed.
func (s *Server) capacity(namespace string) *nsCapacity {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.caps[namespace]
	if !ok {
		c = newNSCapacity(&s.cfg)
		s.caps[namespace] = c
	}
	return c
}

// apply writes vectors into namespace, after checking all (the whole
// request) against the dimension of the index.
func (s *Server) apply(namespace string, vectors, all []*pinecone.Vector) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, err := checkDimension(all, s.dim); err != nil {
		return err
	}
	if len(vectors) == 0 {
		return nil
	}
	s.dim, _ = checkDimension(vectors, s.dim)
	m := s.store[namespace]
	if m == nil {
		m = make(map[string]*pinecone.Vector)
		s.store[namespace] = m
	}
	for _, v := range vectors {
		m[v.Id] = v
	}
	s.stats.VectorsWritten += len(vectors)
	return nil
}

// arrive counts an Upsert request reaching the service and returns its Seq.
func (s *Server) arrive(bytes int) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seq++
	s.stats.Requests++
	s.stats.BytesReceived += int64(bytes)
	return s.seq
}

// answered counts the answer to a request counted by arrive.
func (s *Server) answered(code codes.Code, rateLimited bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stats.Codes[code]++
	if rateLimited {
		s.stats.RateLimited++
	}
}

// countUnprocessed counts an Upsert request answered before arrive.
func (s *Server) countUnprocessed(code codes.Code) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stats.Requests++
	s.stats.Codes[code]++
}

func (s *Server) inFlightDelta(d int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.inFlight += d
	s.stats.MaxInFlight = max(s.stats.MaxInFlight, s.inFlight)
}

func (s *Server) queuedDelta(d int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.queued += d
	s.stats.MaxQueued = max(s.stats.MaxQueued, s.queued)
}

func cloneVector(v *pinecone.Vector) *pinecone.Vector {
	c := &pinecone.Vector{Id: v.Id}
	if v.Values != nil {
		vals := slices.Clone(*v.Values)
		c.Values = &vals
	}
	if sv := v.SparseValues; sv != nil {
		c.SparseValues = &pinecone.SparseValues{
			Indices: slices.Clone(sv.Indices),
			Values:  slices.Clone(sv.Values),
		}
	}
	if v.Metadata != nil {
		c.Metadata = proto.Clone(v.Metadata).(*structpb.Struct)
	}
	return c
}
