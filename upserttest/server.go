package upserttest

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"maps"
	"net"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/pinecone-io/go-pinecone/v5/pinecone"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
)

// A Server is a Pinecone-compatible data plane listening on a loopback
// port, for tests: gRPC in plaintext for vectors, and HTTPS on the same port
// for the REST records endpoint of indexes with integrated embedding. It
// stores the vectors and records upserted into it in memory, by namespace,
// and can simulate a limited capacity (see [WithRate], [WithSlots],
// [WithLatency]) and scripted faults (see [Fault]).
//
// Its methods are safe for concurrent use, including while requests are
// being served.
type Server struct {
	cfg   config
	mux   *muxListener
	addr  string
	start time.Time

	tls serverTLS

	life serverLife

	mu       sync.Mutex
	store    map[string]map[string]*pinecone.Vector // namespace -> id -> vector
	records  map[string]map[string]map[string]any   // namespace -> id -> fields
	shape    indexShape                             // the index's type and dimension, as far as known
	seq      int
	stats    Stats
	inFlight int
	queued   int
	caps     map[string]*nsCapacity
	faults   FaultFunc
	recent   []newVectors   // writes that DescribeIndexStats does not count yet (WithStatsLag)
	reserved map[string]int // namespace -> admitted requests not yet written (WithMaxNamespaces)
	open     openRequests   // requests counted by arrive and not yet by answered
	idle     chan struct{}  // closed while no request is open (WaitIdle)

	limits indexLimits
}

// serverLife is a Server's generation of listeners and handlers, which
// Restart replaces and Close ends; mu serializes the two.
type serverLife struct {
	mu     sync.Mutex
	gen    *generation
	closed bool
}

// Stats counts what a [Server] has seen since it started, or since its last
// [Server.Reset]. It only concerns upsert requests: gRPC Upsert calls and
// REST records upserts (POST /records/namespaces/{namespace}/upsert), which
// it counts together, except in RESTRequests and HTTPCodes. "Upsert
// request" below means either.
//
// The service counts each answer before sending it, so once a client has
// received an answer, Stats includes it; the exception is a request that
// gRPC rejects itself (see [WithMaxRequestBytes]).
type Stats struct {
	// Requests is the number of upsert requests received, of both APIs,
	// including rejected ones (even those rejected by gRPC before reaching
	// the service, such as oversized ones).
	Requests int
	// RESTRequests is the number of those requests that came through the
	// REST records endpoint; Requests - RESTRequests came through gRPC.
	RESTRequests int
	// Codes counts the answers to upsert requests by gRPC status code,
	// codes.OK included; REST answers are counted under the code whose HTTP
	// status they sent (see HTTPCodes), so that the counts add up to
	// Requests. An answer is counted even if its client has already gone (it
	// then is the code the server would have sent). A connection reset by a
	// fault counts as codes.Unavailable; a request dropped from the slot
	// queue because its client gave up counts as codes.DeadlineExceeded or
	// codes.Canceled.
	Codes map[codes.Code]int
	// HTTPCodes counts the answers to REST requests by HTTP status: 201 for
	// success, then 400, 401, 429, 500, 503, 504, ... (see the package
	// documentation for the correspondence with gRPC codes). A request that
	// got no status, its connection being reset by a fault or closed by
	// Restart or Close, counts as 0 (and as codes.Unavailable in Codes).
	// Its counts add up to RESTRequests; it is nil until a REST request is
	// answered.
	HTTPCodes map[int]int
	// RateLimited is the number of upsert requests answered
	// codes.ResourceExhausted (HTTP 429) because an admission bucket
	// (WithRate, WithByteRate, WithRequestRate, WithWriteUnitRate,
	// WithEmbedTokensPerMinute) rejected them. Faults are not counted.
	RateLimited int
	// QuotaExceeded is the number of upsert requests refused by a quota
	// (WithMonthlyWriteUnits, WithMaxNamespaces).
	QuotaExceeded int
	// WriteUnits is the write units metered for the admitted upsert
	// requests: 1 per KB of request, at least 5 per request, plus 1 per
	// KB of the records each overwrote (see WithWriteUnitRate).
	WriteUnits int64
	// VectorsWritten is the number of vector writes applied by gRPC Upsert
	// calls, overwrites included.
	VectorsWritten int
	// RecordsWritten is the number of record writes applied by REST
	// records upserts, overwrites included.
	RecordsWritten int
	// BytesReceived is the total size, in bytes, of the upsert requests
	// that reached the service, those with a wrong API key (WithAPIKey)
	// excepted: the encoded protobuf message of a gRPC call, the body of a
	// REST request.
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
	// InFlight and Queued are the Upsert requests being written and
	// waiting for a write slot when Stats was called: both 0 once every
	// request received, its client gone or not, is written or dropped.
	InFlight, Queued int
	// LateWrites is the number of upsert requests written after their
	// client had given up (its deadline passed, or it canceled, during the
	// write latency): the client saw a timeout or a cancellation, and the
	// records landed anyway, as a request past its deadline may on
	// Pinecone. Such requests count in Codes as the code the server would
	// have sent.
	LateWrites int
}

// generation is one pair of servers (gRPC and HTTPS) serving the Server's
// socket; Restart replaces it.
type generation struct {
	s          *Server
	grpc       *grpc.Server
	http       *http.Server
	stop       chan struct{} // closed when the generation stops
	served     chan struct{} // closed when the gRPC Serve has returned
	httpServed chan struct{} // closed when the HTTPS Serve has returned

	mu       sync.Mutex
	stopping bool
	handlers sync.WaitGroup
}

// NewServer starts and returns a new Server listening on a random port of
// 127.0.0.1, configured by opts, with a new self-signed certificate for its
// HTTPS endpoint (see [Server.Client]). The caller should call Close when
// finished, to shut it down. NewServer panics if it cannot listen, like
// net/http/httptest.NewServer, and if opts contradict each other (see
// [Option]).
func NewServer(opts ...Option) *Server {
	cfg := defaultConfig()
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	cfg.check()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(fmt.Sprintf("upserttest: failed to listen on a port: %v", err))
	}
	s := &Server{
		cfg:     cfg,
		mux:     newMuxListener(ln),
		addr:    ln.Addr().String(),
		start:   cfg.now(),
		tls:     newTLS(),
		store:   make(map[string]map[string]*pinecone.Vector),
		records: make(map[string]map[string]map[string]any),
		shape:   cfg.initialShape(),
		stats:   Stats{Codes: make(map[codes.Code]int)},
		idle:    closedChan(),
		caps:    make(map[string]*nsCapacity),
		faults:  cfg.faults,
	}
	s.limits.reset(&s.cfg)
	s.life.gen = s.startGeneration()
	return s
}

// Host returns the server's address as "http://127.0.0.1:PORT", for
// pinecone.NewIndexConnParams.Host: the "http://" scheme makes the SDK use
// plaintext gRPC, and the SDK turns it into "https://127.0.0.1:PORT" for its
// REST calls (such as UpsertRecords), which the same port serves; give the
// SDK the client of [Server.Client] for those.
func (s *Server) Host() string { return "http://" + s.addr }

// RESTHost returns the address of the server's HTTPS endpoint,
// "https://127.0.0.1:PORT": the port of [Server.Host], with the scheme the
// SDK uses for REST calls.
func (s *Server) RESTHost() string { return "https://" + s.addr }

// Addr returns the server's address as "127.0.0.1:PORT".
func (s *Server) Addr() string { return s.addr }

// Certificate returns the self-signed certificate of the server's HTTPS
// endpoint, valid for 127.0.0.1, ::1 and localhost for a day. It must not be
// modified.
func (s *Server) Certificate() *x509.Certificate { return s.tls.cert }

// Client returns an HTTP client that trusts the server's certificate, and
// no other, for pinecone.NewClientParams.RestClient, like
// net/http/httptest.Server.Client:
//
//	pc, err := pinecone.NewClient(pinecone.NewClientParams{ApiKey: "k", RestClient: srv.Client()})
//
// It speaks HTTP/1.1. Every call returns the same client; Close closes its
// idle connections. Its Transport is an *http.Transport, which a test may
// wrap in a RoundTripper of its own.
func (s *Server) Client() *http.Client { return s.tls.client }

// Close shuts the server down: it stops accepting connections, closes every
// open connection, gRPC and HTTPS, abandons the requests in progress (those
// not yet written are not written) and waits for their handlers to return.
// It also closes the idle connections of [Server.Client]. Stored vectors
// and records remain readable with Vector, Records and the other accessors.
// Close may be called more than once and concurrently; later calls return at
// once, or once the first has finished.
func (s *Server) Close() {
	s.life.mu.Lock()
	defer s.life.mu.Unlock()
	if s.life.closed {
		return
	}
	s.life.closed = true
	s.life.gen.shutdown()
	s.mux.Close()
	s.tls.client.CloseIdleConnections()
}

// Restart simulates a restart of the service: it drops every connection
// (gRPC and HTTPS) and abandons the requests in progress, like Close, then
// serves again on the same port. Stored vectors and records, the learned
// dimension, stats, fault script and rate buckets survive, and so does the
// certificate. The listening socket itself stays open, so clients that
// connect during the restart wait instead of being refused.
//
// gRPC clients see codes.Unavailable for calls in progress, and reconnect by
// themselves: a call made right after Restart may still fail with
// codes.Unavailable if the client has not yet noticed that its connection
// was closed. Likewise, REST requests in progress fail with a transport
// error, and an HTTP client may try its next request on a kept-alive
// connection that was closed, and fail once (Go's http.Transport does not
// retry a POST). Restart on a closed Server does nothing.
func (s *Server) Restart() {
	s.life.mu.Lock()
	defer s.life.mu.Unlock()
	if s.life.closed {
		return
	}
	s.life.gen.shutdown()
	s.life.gen = s.startGeneration()
}

func (s *Server) startGeneration() *generation {
	g := &generation{
		s:          s,
		stop:       make(chan struct{}),
		served:     make(chan struct{}),
		httpServed: make(chan struct{}),
	}
	g.grpc = grpc.NewServer(
		grpc.MaxRecvMsgSize(s.cfg.maxRequestBytes),
		grpc.StatsHandler(statsHandler{s}),
	)
	g.grpc.RegisterService(&serviceDesc, g)
	g.http = &http.Server{
		Handler:           g.restHandler(),
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          httpErrorLog,
	}
	grpcLis := s.mux.grpcListener()
	tlsLis := tls.NewListener(s.mux.tlsListener(), s.tls.config)
	go func() {
		defer close(g.served)
		_ = g.grpc.Serve(grpcLis) // returns when shutdown stops it
	}()
	go func() {
		defer close(g.httpServed)
		_ = g.http.Serve(tlsLis) // likewise: http.ErrServerClosed
	}()
	return g
}

// shutdown stops g: it interrupts its handlers, closes its connections and
// waits until its handlers and both Serve have returned.
func (g *generation) shutdown() {
	g.mu.Lock()
	g.stopping = true
	close(g.stop)
	g.mu.Unlock()
	g.grpc.Stop()
	g.http.Close()
	<-g.served
	<-g.httpServed
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

// stopped reports whether g has begun to stop: shutdown closes g.stop
// before it closes g's connections.
func (g *generation) stopped() bool {
	select {
	case <-g.stop:
		return true
	default:
		return false
	}
}

// Vector returns a deep copy of the vector stored under id in namespace, and
// whether there is one.
func (s *Server) Vector(namespace, id string) (*pinecone.Vector, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.store[namespaceKey(namespace)][id]
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
	namespace = namespaceKey(namespace)
	out := make(map[string]*pinecone.Vector, len(s.store[namespace]))
	for id, v := range s.store[namespace] {
		out[id] = cloneVector(v)
	}
	return out
}

// WaitIdle waits until no upsert request the server has received is in
// progress: in its latency, waiting for a slot, being written, or held by
// a fault (a write that [AmbiguousTimeouts] delays past its client's
// timeout included). It returns nil then, or ctx's error if ctx ends
// first. A request still on its way to the server is not waited for. Use
// it before asserting on what landed after a client gave up on requests.
func (s *Server) WaitIdle(ctx context.Context) error {
	s.mu.Lock()
	idle := s.idle
	s.mu.Unlock()
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func closedChan() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}

// Count returns the number of vectors stored in namespace.
func (s *Server) Count(namespace string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.store[namespaceKey(namespace)])
}

// Record returns a deep copy of the fields of the record stored under id in
// namespace by a REST records upsert, and whether there is one. The fields
// are those of the record's JSON object but the one that held its id ("_id",
// or "id" if it had no "_id"), as encoding/json decodes them into an any:
// strings, float64 numbers, bools, nil, []any and map[string]any.
func (s *Server) Record(namespace, id string) (map[string]any, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.records[namespaceKey(namespace)][id]
	if !ok {
		return nil, false
	}
	return cloneFields(r), true
}

// Records returns deep copies of the records stored in namespace by REST
// records upserts, by id, each as [Server.Record] returns it. The map is
// empty, not nil, if there are none. Records are kept apart from vectors: a
// records upsert stores no vector, and Vectors, Count and Namespaces do not
// see records. DescribeIndexStats counts them, as Pinecone counts the
// vectors it embeds from them. An id holds one record of the index, as on
// Pinecone: a records upsert replaces the vector stored under its id (which
// Vector, Vectors, Count and Fetch then no longer see), and an Upsert of
// vectors replaces the record stored under its id.
func (s *Server) Records(namespace string) map[string]map[string]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	namespace = namespaceKey(namespace)
	out := make(map[string]map[string]any, len(s.records[namespace]))
	for id, r := range s.records[namespace] {
		out[id] = cloneFields(r)
	}
	return out
}

// RecordCount returns the number of records stored in namespace by REST
// records upserts.
func (s *Server) RecordCount(namespace string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.records[namespaceKey(namespace)])
}

// Namespaces returns the namespaces that hold at least one vector, sorted.
// The default namespace, "" or "__default__" (one namespace, as on
// Pinecone), is "__default__".
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

// namespacesLocked returns the namespaces that hold vectors or records;
// s.mu is held.
func (s *Server) namespacesLocked() map[string]bool {
	out := make(map[string]bool)
	for ns, vs := range s.store {
		if len(vs) > 0 {
			out[ns] = true
		}
	}
	for ns, rs := range s.records {
		if len(rs) > 0 {
			out[ns] = true
		}
	}
	return out
}

// Stats returns a snapshot of the server's counters.
func (s *Server) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stats
	st.InFlight, st.Queued = s.inFlight, s.queued
	st.Codes = maps.Clone(s.stats.Codes)
	st.HTTPCodes = maps.Clone(s.stats.HTTPCodes)
	return st
}

// Reset forgets every stored vector and record, the dimension learned from
// the vectors (not one set with WithDimension), the stats, and the Seq
// count, refills every admission bucket and gives back the monthly write
// units (WithMonthlyWriteUnits). It keeps the options, the fault
// script, the certificate and the connections.
//
// Requests in progress (received, not yet answered) go on, keep their Seq,
// and are counted in the new stats as if they had arrived after Reset: in
// Requests, RESTRequests and BytesReceived at once, then their answers in
// Codes and HTTPCodes, and what they write in VectorsWritten,
// RecordsWritten and the other counters, so that Codes still adds up to
// Requests once they are answered. Only the write units metered at their
// admission stay in the old stats; those of the records they overwrite
// count in the new. Their writes land in the emptied store. InFlight and
// Queued, which describe the present, are unchanged, and MaxInFlight and
// MaxQueued start from them.
func (s *Server) Reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.store = make(map[string]map[string]*pinecone.Vector)
	s.records = make(map[string]map[string]map[string]any)
	s.recent = nil
	s.shape = s.cfg.initialShape()
	s.seq = 0
	s.stats = Stats{
		Requests:      s.open.requests,
		RESTRequests:  s.open.rest,
		BytesReceived: s.open.bytes,
		Codes:         make(map[codes.Code]int),
		MaxInFlight:   s.inFlight,
		MaxQueued:     s.queued,
	}
	for _, c := range s.caps {
		c.resetBuckets(&s.cfg)
	}
	s.limits.reset(&s.cfg)
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

// currentShape returns the index's shape as it stands.
func (s *Server) currentShape() indexShape {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.shape
}

// apply writes vectors into namespace, after checking all (the whole
// request) against the shape of the index, which they may complete (see
// fit), then meters the records they overwrote (chargeOverwrites).
func (s *Server) apply(namespace string, vectors, all []*pinecone.Vector) error {
	overwritten, err := s.storeVectors(namespaceKey(namespace), vectors, all)
	if err != nil {
		return err
	}
	s.chargeOverwrites(overwritten)
	return nil
}

// storeVectors does apply's write, and returns the size of the records
// the vectors overwrote. A vector replaces what namespace holds under its
// id, a record of a REST records upsert included: one record per id, as
// on Pinecone.
func (s *Server) storeVectors(namespace string, vectors, all []*pinecone.Vector) (overwritten int, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, err := fit(all, s.shape); err != nil {
		return 0, err
	}
	if len(vectors) == 0 {
		return 0, nil
	}
	s.shape, _ = fit(vectors, s.shape)
	m := s.store[namespace]
	if m == nil {
		m = make(map[string]*pinecone.Vector)
		s.store[namespace] = m
	}
	added := 0
	for _, v := range vectors {
		if n, ok := s.storedSizeLocked(namespace, v.Id); ok {
			overwritten += n
		} else {
			added++
		}
		delete(s.records[namespace], v.Id)
		m[v.Id] = v
	}
	s.noteNewVectors(namespace, added)
	s.stats.VectorsWritten += len(vectors)
	return overwritten, nil
}

// storedSizeLocked returns the size of what namespace holds under id, as
// a vector (its encoded Vector message) or as a record (its NDJSON line),
// and whether it holds anything: on Pinecone both are records of the
// index, one per id, which an upsert of the id overwrites; s.mu is held.
func (s *Server) storedSizeLocked(namespace, id string) (size int, ok bool) {
	if v, ok := s.store[namespace][id]; ok {
		return vectorSize(v), true
	}
	if fields, ok := s.records[namespace][id]; ok {
		return recordSize(id, fields), true
	}
	return 0, false
}

// indexedLocked is the number of ids namespace holds, as vectors or as
// records, which DescribeIndexStats counts; s.mu is held. An id is held
// as one or the other, never both (see storeVectors and storeRecords).
func (s *Server) indexedLocked(namespace string) int {
	return len(s.store[namespace]) + len(s.records[namespace])
}

// openRequests are the upsert requests in progress: counted by arrive, not
// yet answered. Reset counts them in the new stats.
type openRequests struct {
	requests, rest int
	bytes          int64
}

// arrive counts an upsert request of the given size reaching the service
// and returns its Seq. rest tells a REST request from a gRPC one. Each
// request it counts must then be counted by answered.
func (s *Server) arrive(bytes int, rest bool) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seq++
	s.stats.Requests++
	if s.open.requests == 0 {
		s.idle = make(chan struct{})
	}
	s.open.requests++
	if rest {
		s.stats.RESTRequests++
		s.open.rest++
	}
	s.stats.BytesReceived += int64(bytes)
	s.open.bytes += int64(bytes)
	return s.seq
}

// noHTTPStatus stands for "not a REST request" in answered and
// countUnprocessed, where 0 stands for a REST request answered by a reset.
const noHTTPStatus = -1

// answered counts the answer err (nil for OK) to a request of the given
// size counted by arrive. httpStatus is the HTTP status sent to a REST
// request, or noHTTPStatus for gRPC.
func (s *Server) answered(err error, httpStatus, bytes int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.open.requests--
	if s.open.requests == 0 {
		close(s.idle)
	}
	if httpStatus != noHTTPStatus {
		s.open.rest--
	}
	s.open.bytes -= int64(bytes)
	s.stats.Codes[status.Code(err)]++
	s.countHTTP(httpStatus)
	if le, ok := err.(*limitError); ok {
		if le.quota {
			s.stats.QuotaExceeded++
		} else {
			s.stats.RateLimited++
		}
	}
}

func (s *Server) countWriteUnits(wu int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stats.WriteUnits += int64(wu)
}

// countUnprocessed counts an upsert request answered before arrive.
// httpStatus is as for answered.
func (s *Server) countUnprocessed(code codes.Code, httpStatus int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stats.Requests++
	s.stats.Codes[code]++
	if httpStatus != noHTTPStatus {
		s.stats.RESTRequests++
	}
	s.countHTTP(httpStatus)
}

// countHTTP counts a REST answer; s.mu is held.
func (s *Server) countHTTP(httpStatus int) {
	if httpStatus == noHTTPStatus {
		return
	}
	if s.stats.HTTPCodes == nil {
		s.stats.HTTPCodes = make(map[int]int)
	}
	s.stats.HTTPCodes[httpStatus]++
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

// lateWrite counts a request written after its client had given up.
func (s *Server) lateWrite() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stats.LateWrites++
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
