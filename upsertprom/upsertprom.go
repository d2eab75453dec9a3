// Package upsertprom exports the events of an [upsert] run as Prometheus
// metrics. The upsert package itself never imports Prometheus; this package
// turns its [upsert.Observer] into counters and a histogram:
//
//	c, err := upsertprom.New(prometheus.DefaultRegisterer)
//	if err != nil { ... }
//	res, err := upsert.All(ctx, records, upsert.WithIndex(idx), upsert.WithObserver(c.Observer()))
//
// One Collector serves any number of runs, concurrent ones included; its
// metrics only grow.
//
// # Metrics
//
// With the default prefix "upsert" (see [WithNamespace]), the metrics are:
//
//   - upsert_requests_total{namespace, class, code} (counter): upsert
//     requests sent, retries included, by outcome. A request that succeeded
//     has class "ok" and code "OK"; a failed one has the name of its
//     [upsert.Class] ("rate-limited", "timeout", "server", "too-large",
//     "invalid", "denied", "canceled", "quota-exceeded") and the code of its [upsert.Error]
//     as given by [upsert.Error.Code]: the HTTP status ("429"), else the gRPC
//     code name ("ResourceExhausted", "Unavailable", ...), else the class.
//   - upsert_request_duration_seconds{namespace} (histogram): the round
//     trip of each request, successful or not, in seconds, from its
//     admission by upsert's limiter to the answer ([upsert.RequestEvent].Latency;
//     the wait for rate tokens and a concurrency slot is not included). Buckets:
//     [DefaultBuckets] unless [WithBuckets].
//   - upsert_records_upserted_total{namespace} (counter): records the
//     index confirmed, each counted once: [upsert.Stats].Upserted, summed
//     over runs.
//   - upsert_records_sent_total{namespace} (counter): records carried by
//     requests, counted once per request that carried them, so a record
//     resent by a retry counts again. Compare it with the records given to
//     upsert.All to see the cost of retries.
//   - upsert_retries_total{namespace, class, kind} (counter): failed
//     batches about to be sent again, by the class of the failure. kind is
//     "backoff" when the batch is resent whole after a wait (the sum over
//     classes equals [upsert.Stats].Retries) and "split" when it is split in
//     halves (timeouts, too large, invalid bisection; the sum equals
//     [upsert.Stats].Splits).
//   - upsert_records_failed_total{namespace, class} (counter): records that
//     did not land, by the class of their final failure, counted as soon as
//     each failure is final: the records that [upsert.Stats].Failed counts,
//     those rejected before sending included. The namespace label is the
//     record's, as routed ([upsert.Failure].Namespace), bounded as the
//     other metrics' is; it is "" for the default namespace, and also for
//     a record that a run under [upsert.WithNamespaceOf] failed before it
//     looked at it (the run stopped first), which
//     upsert.Failure.Namespace leaves "".
//   - upsert_retry_wait_seconds_total{namespace} (counter): the backoff
//     chosen before each whole-batch retry ([upsert.RetryEvent].Wait), in
//     seconds, summed; split halves are resent without a backoff. A 429's
//     backoff is never shorter than the index's Retry-After, so that is
//     included; time spent waiting for the retry budget or the circuit
//     breaker is not.
//
// The label namespace is the Pinecone namespace of the request ("" for the
// default namespace, also when a run names it "__default__", as
// go-pinecone v5 does), not the Prometheus namespace. Namespaces are the
// user's data (one per tenant is Pinecone's pattern for multitenancy), so
// a Collector labels at most [DefaultMaxNamespaces] of them, the first it
// sees, and every later one [OtherNamespace]: see [WithMaxNamespaces].
package upsertprom

import (
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/upsertlib/upsert"
)

// DefaultNamespace is the prefix of the metric names unless [WithNamespace]
// gives another.
const DefaultNamespace = "upsert"

// DefaultBuckets are the upper bounds, in seconds, of the latency
// histogram unless [WithBuckets] gives others: 5 ms to about 41 s, doubling,
// which covers fast writes as well as requests that run into upsert's
// default 30 s request timeout.
var DefaultBuckets = prometheus.ExponentialBuckets(0.005, 2, 14)

// Label values used by the metrics.
const (
	// ClassOK and CodeOK are the class and code labels of a request that
	// succeeded.
	ClassOK = "ok"
	CodeOK  = "OK"
	// KindBackoff and KindSplit are the kind label of a retry: the batch
	// is resent whole after a wait, or split in halves.
	KindBackoff = "backoff"
	KindSplit   = "split"
	// OtherNamespace is the namespace label of the namespaces seen after
	// the Collector labelled its most ([WithMaxNamespaces]).
	OtherNamespace = "_other"
)

// DefaultMaxNamespaces is how many namespaces a Collector labels unless
// [WithMaxNamespaces] says otherwise.
const DefaultMaxNamespaces = 100

// Option configures [New].
type Option func(*config)

type config struct {
	namespace     string
	buckets       []float64
	maxNamespaces int
	err           error
}

// WithMaxNamespaces sets how many Pinecone namespaces the Collector's
// metrics label, the first it sees; later ones are labelled
// [OtherNamespace], so that the number of series stays bounded whatever
// the data (a run over thousands of tenants' namespaces would otherwise
// make thousands of series per metric). The default is
// [DefaultMaxNamespaces]; 0 labels every namespace [OtherNamespace]. A
// negative n is an error of New.
func WithMaxNamespaces(n int) Option {
	return func(c *config) {
		if n < 0 {
			c.err = errors.Join(c.err, fmt.Errorf("upsertprom: WithMaxNamespaces(%d): want 0 or more", n))
			return
		}
		c.maxNamespaces = n
	}
}

// WithNamespace sets the Prometheus namespace: the prefix of every metric
// name, "upsert" by default, so that WithNamespace("ingest") yields
// ingest_requests_total and so on. It must match [a-zA-Z_:][a-zA-Z0-9_:]*,
// the classic metric name syntax that PromQL accepts unquoted; New returns
// an error otherwise. The empty string leaves the names unprefixed
// (requests_total).
func WithNamespace(ns string) Option {
	return func(c *config) {
		if !validPrefix(ns) {
			c.err = errors.Join(c.err, fmt.Errorf("upsertprom: WithNamespace(%q): want a metric name prefix matching [a-zA-Z_:][a-zA-Z0-9_:]*", ns))
			return
		}
		c.namespace = ns
	}
}

func validPrefix(s string) bool {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c == '_', c == ':':
		case c >= '0' && c <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}

// WithBuckets sets the upper bounds, in seconds, of the buckets of
// upsert_request_duration_seconds. They must be strictly increasing; New
// returns an error otherwise. An empty slice means [DefaultBuckets].
func WithBuckets(buckets []float64) Option {
	return func(c *config) {
		for i := 1; i < len(buckets); i++ {
			if !(buckets[i] > buckets[i-1]) {
				c.err = errors.Join(c.err, fmt.Errorf("upsertprom: WithBuckets: buckets must be strictly increasing, got %v", buckets))
				return
			}
		}
		c.buckets = slices.Clone(buckets)
	}
}

// Collector holds the metrics of upsert runs. Pass [Collector.Observer] to
// [upsert.WithObserver]. A Collector is a [prometheus.Collector] of all its
// metrics, and is safe for concurrent use.
type Collector struct {
	requests        *prometheus.CounterVec
	duration        *prometheus.HistogramVec
	recordsUpserted *prometheus.CounterVec
	recordsSent     *prometheus.CounterVec
	retries         *prometheus.CounterVec
	recordsFailed   *prometheus.CounterVec
	retryWait       *prometheus.CounterVec
	namespaces      namespaceLabels
}

var _ prometheus.Collector = (*Collector)(nil)

// defaultNamespace is Pinecone's other name of the default namespace, ""
// (go-pinecone v5 sends it through WithIndex).
const defaultNamespace = "__default__"

// namespaceLabels gives the namespace label of a Pinecone namespace: the
// namespace itself for the first max seen, OtherNamespace after.
type namespaceLabels struct {
	mu   sync.Mutex
	max  int
	seen map[string]struct{}
}

func (l *namespaceLabels) of(ns string) string {
	if ns == defaultNamespace {
		ns = "" // one namespace, whichever name a run sends
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.seen[ns]; ok {
		return ns
	}
	if len(l.seen) >= l.max {
		return OtherNamespace
	}
	if l.seen == nil {
		l.seen = make(map[string]struct{})
	}
	l.seen[ns] = struct{}{}
	return ns
}

// New returns a Collector whose metrics are registered with reg, all or
// none: the error of the registration (such as a
// prometheus.AlreadyRegisteredError when another Collector with the same
// WithNamespace is registered with reg, or an invalid metric name) is
// returned, wrapped. When reg is nil nothing is registered, and the
// Collector can be registered later, as one prometheus.Collector.
func New(reg prometheus.Registerer, opts ...Option) (*Collector, error) {
	cfg := config{namespace: DefaultNamespace, maxNamespaces: DefaultMaxNamespaces}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.err != nil {
		return nil, cfg.err
	}
	buckets := cfg.buckets
	if len(buckets) == 0 {
		buckets = slices.Clone(DefaultBuckets)
	}
	ns := cfg.namespace
	c := &Collector{
		namespaces: namespaceLabels{max: cfg.maxNamespaces},
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Name: "requests_total",
			Help: `Upsert requests sent, retries included, by Pinecone namespace and outcome: class "ok" and code "OK" on success, else the failure's class and code (HTTP status or gRPC code name).`,
		}, []string{"namespace", "class", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: ns, Name: "request_duration_seconds",
			Help:    "Round trip of upsert requests, successful or not, in seconds, by Pinecone namespace.",
			Buckets: buckets,
		}, []string{"namespace"}),
		recordsUpserted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Name: "records_upserted_total",
			Help: "Records the index confirmed, each once, by Pinecone namespace.",
		}, []string{"namespace"}),
		recordsSent: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Name: "records_sent_total",
			Help: "Records carried by upsert requests, counted again for every retry, by Pinecone namespace.",
		}, []string{"namespace"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Name: "retries_total",
			Help: `Failed batches about to be sent again, by Pinecone namespace, class of the failure and kind: "backoff" (resent whole after a wait) or "split" (split in halves).`,
		}, []string{"namespace", "class", "kind"}),
		recordsFailed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Name: "records_failed_total",
			Help: "Records that did not land, by Pinecone namespace and class of their final failure.",
		}, []string{"namespace", "class"}),
		retryWait: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Name: "retry_wait_seconds_total",
			Help: "Backoff chosen before whole-batch retries, in seconds, by Pinecone namespace (a wait cut short when another batch lands counts whole).",
		}, []string{"namespace"}),
	}
	if reg != nil {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("upsertprom: registering the metrics: %w", err)
		}
	}
	return c, nil
}

func (c *Collector) collectors() []prometheus.Collector {
	return []prometheus.Collector{c.requests, c.duration, c.recordsUpserted, c.recordsSent, c.retries, c.recordsFailed, c.retryWait}
}

// Describe implements [prometheus.Collector].
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, m := range c.collectors() {
		m.Describe(ch)
	}
}

// Collect implements [prometheus.Collector].
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	for _, m := range c.collectors() {
		m.Collect(ch)
	}
}

// Observer returns the observer that feeds c, for [upsert.WithObserver].
// The same observer may be given to any number of runs.
//
// The observer has a Failure function (for upsert_records_failed_total), so
// a run of [upsert.Stream], [upsert.Records] or an [upsert.Writer] given it
// keeps at most 1000 failures in its result. In the words of
// [upsert.Result]: "a Stream, Records or Writer whose Observer has a
// Failure function keeps only the first 1000 (Stats.Failed counts all)",
// and of its MayBeStale: "Only the first 1000 are kept when an Observer
// receives failures; Stats.MayBeStale counts all". [upsert.All] keeps
// them all. A program that needs every failure of such a run gets them
// from a Failure function of its own, such as the Write method of
// ndjson.DeadLetters.
func (c *Collector) Observer() upsert.Observer {
	return upsert.Observer{
		RequestDone: c.requestDone,
		Retry:       c.retry,
		Failure:     c.failure,
	}
}

func (c *Collector) requestDone(e upsert.RequestEvent) {
	class, code := ClassOK, CodeOK
	if e.Err != nil {
		class, code = e.Err.Class.String(), e.Err.Code()
	}
	ns := c.namespaces.of(e.Namespace)
	c.requests.WithLabelValues(ns, class, code).Inc()
	c.duration.WithLabelValues(ns).Observe(e.Latency.Seconds())
	if e.Records > 0 {
		c.recordsSent.WithLabelValues(ns).Add(float64(e.Records))
		if e.Err == nil {
			c.recordsUpserted.WithLabelValues(ns).Add(float64(e.Records))
		}
	}
}

func (c *Collector) retry(e upsert.RetryEvent) {
	class := upsert.ClassServer.String()
	if e.Err != nil {
		class = e.Err.Class.String()
	}
	kind := KindBackoff
	if e.Split {
		kind = KindSplit
	}
	ns := c.namespaces.of(e.Namespace)
	c.retries.WithLabelValues(ns, class, kind).Inc()
	if !e.Split {
		// Touch the series even for a zero wait, so that it exists as soon
		// as the namespace has retried.
		c.retryWait.WithLabelValues(ns).Add(max(e.Wait.Seconds(), 0))
	}
}

func (c *Collector) failure(f upsert.Failure) {
	c.recordsFailed.WithLabelValues(c.namespaces.of(f.Namespace), f.Class.String()).Inc()
}
