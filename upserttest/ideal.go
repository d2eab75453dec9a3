package upserttest

import (
	"math"
	"sync"
	"time"

	"github.com/pinecone-io/go-pinecone/v5/pinecone"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// This file holds the ideal time of an Index: how long a client that knew
// the index in advance needs to write a run into it.

// IdealMaxInFlight is the most requests the ideal client of
// [Index.IdealTime] keeps in flight at once: the upsert library's largest
// adaptive concurrency. A client with more in flight can beat the ideal
// where no limit of the index binds below it (unlimited slots, buckets
// that do not bind: seeds 6, 85, 137, 519, 543, 608 and 625 of 1–800).
const IdealMaxInFlight = 64

// IdealTime returns how long a client that knew ix in advance needs, at
// best, to write records of the run's records into a fresh server made
// with ix.Options(), from NewServer to the last record written, with
// requests that time out after timeout. It is 0 for records <= 0, and
// also when every request, even of one record, would time out (no client
// can write into such an index).
//
// The ideal client sends batches of one size n at a time (one that reaches
// the capacity of [Index.Throughput] at the capacity factor in force, so n
// changes with the capacity changes), keeps up to IdealMaxInFlight
// requests outstanding, and never sends a request that an admission
// bucket would refuse. Every limit is then a token bucket of records, with
// its rate and burst: the vectors, bytes (RequestBytes(n)/n a record) and
// requests (1/n a record) per second of the namespace, at the capacity
// factor in force, and the requests in flight. These hold min(slots, 64)
// and refill at 64 per mean time a request of n holds a slot of the
// client (its latency, jitter included, or the timeout if shorter: the
// client frees its slot at the timeout, and the server still writes the
// request), or, if fewer, at the index's slots per mean write latency of
// n (a request holds its slot of the index until written); when n
// changes, the requests in flight free their slots in the time of the
// batch they carry, and where they would outnumber the new batch's
// requests in flight (a quicker batch), the client sends nothing until the
// slots have written the excess. A bucket that took a batch over its
// burst into debt likewise keeps the debt when the batch gets smaller. A
// request whose latency, jitter included, exceeds the timeout is written
// but sent again (its client cannot know it landed): the ideal counts its
// records landed by the request sent again, so each record landed costs
// 1/(1 − q(n)) of every bucket's tokens, q(n) the share of such requests.
// Records are admitted as fast as the emptiest bucket allows, as a fluid:
// at once while every bucket holds tokens (so an index gives its bursts at
// once, as far as the others let it), then at the least rate among the
// empty ones. Every bucket starts full at NewServer, and keeps refilling
// during an outage, when nothing is admitted.
//
// The server takes a request's admission tokens when it arrives, and the
// request then waits for a slot: before a capacity drop, a client can have
// requests admitted at the high rate that the slots write after it. So,
// where the index has fewer than 64 slots, a client may also queue: keep
// up to 64 − slots more requests outstanding, waiting for the slots, and
// no more than the slots write within the timeout less the mean write
// latency of n (the last one queued is written by the timeout). Its
// requests in flight hold that many more. A request that gets its slot
// during an outage fails (withStall): the records still queued when an
// outage starts, whatever the batch they were sent in, are admitted again
// after it, so queueing can also lose.
//
// The ideal time is when the last record is admitted plus the mean write
// latency of its batch, or when the requests then in flight, queued ones
// too, are written (the last one's wait for its slot and its latency), if
// that is later.
//
// So the ideal assumes: the mean latency (the jitter counts only through
// the requests that time out, not through a queued request's wait, which
// makes it time out more often); no time to encode, send or answer a
// request (the machine serves any rate); no random 429s (a refused
// request costs a round trip and no token, which the ideal neglects); the
// run starting at NewServer; whole batches (the last one may be partial
// and quicker); a timed-out request resent whole, not split. Efficiency,
// ideal ÷ actual, can thus slightly exceed 1 only where a partial batch
// or a lucky jitter helps, for a client that keeps no more than
// IdealMaxInFlight requests in flight.
//
// Where several sizes reach the capacity (a rate binds, not the latency),
// the ideal time is the least of three clients': one sending the largest
// of them (the most records a request, so the most of a bucket's burst
// that its requests in flight can take at once), one the largest within a
// thousandth of the capacity (the share of requests that time out grows
// with the size, by millionths where the latency is far under the
// timeout, and a client that knew the index would not give up a burst
// for that), and one the quickest (its last batch lands soonest: above a
// size where the index slows down, the largest takes many times as long);
// each of them with and without a queue.
func (ix Index) IdealTime(records int, timeout time.Duration) time.Duration {
	best := time.Duration(math.MaxInt64)
	for _, c := range idealClients {
		best = min(best, ix.model(timeout).clientTime(records, c))
	}
	return best
}

// idealClients are the six clients IdealTime takes the least time of.
var idealClients = [...]idealClient{
	{}, {slack: 1e-3}, {quickest: true},
	{queue: true}, {slack: 1e-3, queue: true}, {quickest: true, queue: true},
}

// idealClient is how a client that knows the index picks its batch among
// the sizes that reach the capacity: the largest, or the quickest; a size
// reaches it when within slack of it (a share; 0: within rounding). A
// client that queues keeps requests waiting for the index's slots as well
// (see idealModel.queued).
type idealClient struct {
	quickest bool
	slack    float64
	queue    bool
}

// clientTime is the ideal time of client c on a fresh model m.
func (m *idealModel) clientTime(records int, c idealClient) time.Duration {
	m.client = c
	if records <= 0 || m.plan(1).batch == 0 {
		return 0
	}
	return time.Duration(m.admitAll(float64(records)) * float64(time.Second))
}

// Throughput returns the steady capacity C of ix at the capacity factor
// (1 before any change, see [CapacityChange]) for requests that time out
// after timeout, in records per second, and the batch size n that
// reaches it: the largest n of those that maximise
//
//	C(n) = (1 − q(n)) × min(factor × vector rate, factor × byte rate × n / RequestBytes(n),
//	           factor × request rate × n, IdealMaxInFlight × n / held(n), slots × n / latency(n))
//
// over the n of at most MaxBatch() records; latency(n) is the mean write
// latency of a request of n records, q(n) the share of those requests
// whose latency, jitter included, exceeds timeout (they are written, and
// sent again), held(n) the mean of that latency or the timeout, whichever
// is shorter (the time the request holds a slot of its client, which
// gives it up at the timeout), and an absent limit does not count. So where
// the slots do not bind, a size whose requests mostly time out can reach
// the most. It returns 0, 0 when every request would time out, and +Inf
// when nothing limits the index.
func (ix Index) Throughput(factor float64, timeout time.Duration) (perSecond float64, batch int) {
	p := ix.model(timeout).planAt(factor)
	return p.perSecond, p.batch
}

// RecordBytes returns the bytes each of the run's records adds to an
// Upsert request: a record with an id of 8 characters ("r0000001" …) and
// Dimension dense values, without sparse values or metadata.
func (ix Index) RecordBytes() int {
	_, per := requestSizes(namespaceKey(ix.Namespace), ix.Dimension)
	return per
}

// RequestBytes returns the encoded size of an Upsert request of n of the
// run's records (see [Index.RecordBytes]), as the Pinecone SDK sends it
// into ix.Namespace ("" sent as "__default__"): what the server counts in
// [Request.Bytes] and its byte rate.
func (ix Index) RequestBytes(n int) int {
	empty, per := requestSizes(namespaceKey(ix.Namespace), ix.Dimension)
	return empty + n*per
}

// sizeKey and sizes cache requestSizes, which encodes a request.
type sizeKey struct {
	namespace string
	dimension int
}

var sizes sync.Map // sizeKey -> [2]int

// requestSizes returns the encoded size of an Upsert request into
// namespace without vectors, and the bytes a record of the given dimension
// with an id of 8 characters adds to it: every such record encodes to the
// same size (fixed-width values, ids of one length).
func requestSizes(namespace string, dimension int) (empty, perRecord int) {
	key := sizeKey{namespace, dimension}
	if v, ok := sizes.Load(key); ok {
		s := v.([2]int)
		return s[0], s[1]
	}
	req := desc.upsertReq.New()
	req.Set(desc.upsertNamespace, protoreflect.ValueOfString(namespace))
	empty = proto.Size(req.Interface())
	vectors := req.Mutable(desc.upsertVectors).List()
	v := vectors.NewElement()
	values := make([]float32, dimension)
	encodeVector(v.Message(), &pinecone.Vector{Id: "r0000001", Values: &values})
	vectors.Append(v)
	perRecord = proto.Size(req.Interface()) - empty
	sizes.Store(key, [2]int{empty, perRecord})
	return empty, perRecord
}

// MaxBatch returns the most of the run's records one Upsert request can
// carry: MaxVectorsPerRequest, or fewer if their request would exceed
// DefaultMaxRequestBytes.
func (ix Index) MaxBatch() int {
	empty, per := ix.RequestBytes(0), ix.RecordBytes()
	return max(0, min(MaxVectorsPerRequest, (DefaultMaxRequestBytes-empty)/per))
}

// idealModel is what the ideal time of an Index needs: its server's
// configuration, its outages, the timeout, and the best batch at each
// capacity factor met.
type idealModel struct {
	ix       Index
	cfg      config
	timeout  time.Duration
	empty    int // RequestBytes(0)
	perBytes int // RecordBytes()
	maxBatch int
	client   idealClient
	plans    map[float64]batchPlan
}

// batchPlan is how the ideal client writes at one capacity factor.
type batchPlan struct {
	batch     int     // 0: no batch fits the timeout
	perSecond float64 // C(batch), records per second
	latency   float64 // mean write latency of a batch, in seconds
	lost      float64 // share of its requests that time out: written, but sent again
}

func (ix Index) model(timeout time.Duration) *idealModel {
	cfg := defaultConfig()
	for _, o := range ix.Options() {
		o(&cfg)
	}
	return &idealModel{
		ix: ix, cfg: cfg, timeout: timeout,
		empty:    ix.RequestBytes(0),
		perBytes: ix.RecordBytes(),
		maxBatch: ix.MaxBatch(),
		plans:    make(map[float64]batchPlan),
	}
}

// latency is the mean write latency of a batch of n, in seconds.
func (m *idealModel) latency(n int) float64 {
	return m.cfg.latency(n, m.empty+n*m.perBytes).Seconds()
}

// inFlight is the most requests the ideal client has in flight.
func (m *idealModel) inFlight() float64 {
	if m.cfg.slots > 0 {
		return float64(min(m.cfg.slots, IdealMaxInFlight))
	}
	return IdealMaxInFlight
}

// flightRate is the most requests of n records a second that the requests
// in flight let through, or +Inf if they take no time: IdealMaxInFlight
// per mean time that a request holds a slot of the client (see heldTime),
// and at most the index's slots per mean write latency of n (a request
// holds its slot of the index until written, timed out or not).
func (m *idealModel) flightRate(n int) float64 {
	held, lat := m.heldTime(n), m.latency(n)
	if held <= 0 || lat <= 0 {
		return math.Inf(1)
	}
	rate := IdealMaxInFlight / held
	if m.cfg.slots > 0 {
		rate = min(rate, float64(m.cfg.slots)/lat)
	}
	return rate
}

// queued is how many requests of batch p, beyond the index's slots, the
// ideal client keeps waiting in its slot queue if it queues (0 if not): as
// many as keep it within IdealMaxInFlight requests outstanding, and no
// more than the slots write within the timeout less the batch's mean
// latency, so that the last one queued is written by the timeout. A
// queued request's admission tokens are taken when it arrives.
func (m *idealModel) queued(p batchPlan) float64 {
	slots := float64(m.cfg.slots)
	if !m.client.queue || slots <= 0 || slots >= IdealMaxInFlight {
		return 0
	}
	room := IdealMaxInFlight - slots
	if p.latency > 0 {
		room = min(room, max(0, m.timeout.Seconds()-p.latency)*slots/p.latency)
	}
	return room
}

// heldTime is the mean time, in seconds, that a request of n records holds
// a slot of its client: its write latency, jitter included, or the timeout
// if that is shorter (the client then frees the slot, and the server still
// writes the request). It is E[min(lat × F, timeout)], F the jitter's
// lognormal factor exp(σZ − σ²/2), whose partial mean E[F; lat × F ≤
// timeout] is Φ(d − σ), d = (ln(timeout/lat) + σ²/2)/σ, and P(lat × F >
// timeout) = 1 − Φ(d) is timedOut(n).
func (m *idealModel) heldTime(n int) float64 {
	lat, limit, s := m.latency(n), m.timeout.Seconds(), m.cfg.jitter.sigma
	if lat <= 0 || s <= 0 {
		return min(lat, limit)
	}
	d := (math.Log(limit/lat) + s*s/2) / s
	return lat*normalCDF(d-s) + limit*(1-normalCDF(d))
}

// timedOut is the share of requests of n records whose write latency,
// jitter included, exceeds the timeout.
func (m *idealModel) timedOut(n int) float64 {
	lat, limit, s := m.latency(n), m.timeout.Seconds(), m.cfg.jitter.sigma
	switch {
	case lat <= 0:
		return 0
	case s <= 0 && lat > limit:
		return 1
	case s <= 0:
		return 0
	}
	// The factor is exp(σZ − σ²/2): P(lat × factor > limit).
	return 1 - normalCDF((math.Log(limit/lat)+s*s/2)/s)
}

// normalCDF is Φ, the standard normal distribution function.
func normalCDF(x float64) float64 { return 0.5 * math.Erfc(-x/math.Sqrt2) }

// capacity is C(n) at factor f, in records per second.
func (m *idealModel) capacity(n int, f float64) float64 {
	return (1 - m.timedOut(n)) * m.admitted(n, f)
}

// admitted is the rate at which the index takes in records in batches of
// n at factor f, timed out or not.
func (m *idealModel) admitted(n int, f float64) float64 {
	c := math.Inf(1)
	if r := m.cfg.vectorRate.rate; r > 0 {
		c = min(c, f*r)
	}
	if r := m.cfg.byteRate.rate; r > 0 {
		c = min(c, f*r*float64(n)/float64(m.empty+n*m.perBytes))
	}
	if r := m.cfg.requestRate.rate; r > 0 {
		c = min(c, f*r*float64(n))
	}
	return min(c, m.flightRate(n)*float64(n))
}

// plan returns the best batch at factor f (memoized).
func (m *idealModel) plan(f float64) batchPlan {
	if p, ok := m.plans[f]; ok {
		return p
	}
	p := m.planAt(f)
	m.plans[f] = p
	return p
}

// planAt finds the largest of the batches that maximise C at factor f
// (within the client's slack), or the quickest of them (the largest among
// equally quick) for a client that sends the quickest.
func (m *idealModel) planAt(f float64) batchPlan {
	best := 0.0
	for n := 1; n <= m.maxBatch; n++ {
		best = max(best, m.capacity(n, f))
	}
	if best <= 0 {
		return batchPlan{}
	}
	var p batchPlan
	for n := m.maxBatch; n >= 1; n-- {
		c := m.capacity(n, f)
		if c < best*(1-max(1e-9, m.client.slack)) {
			continue
		}
		if lat := m.latency(n); p.batch == 0 || lat < p.latency {
			p = batchPlan{batch: n, perSecond: c, latency: lat, lost: m.timedOut(n)}
		}
		if !m.client.quickest {
			break // the largest
		}
	}
	return p
}
