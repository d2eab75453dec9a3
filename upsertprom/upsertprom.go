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
//     other metrics' is; it is "__default__" for the default namespace,
//     and also for a record that a run under [upsert.WithNamespaceOf]
//     failed before it looked at it (the run stopped first), which
//     upsert.Failure.Namespace leaves "".
//   - upsert_retry_wait_seconds_total{namespace} (counter): the backoff
//     chosen before each whole-batch retry ([upsert.RetryEvent].Wait), in
//     seconds, summed; split halves are resent without a backoff. A 429's
//     backoff is never shorter than the index's Retry-After, so that is
//     included; time spent waiting for the retry budget or the circuit
//     breaker is not.
//
// The label namespace is the Pinecone namespace of the request, not the
// Prometheus namespace; [WithNamespaceLabel] renames it (see Kubernetes
// below). The default namespace is labelled [DefaultPineconeNamespace],
// "__default__" (Pinecone's own name for it), whether a run names it ""
// or "__default__" as go-pinecone v5 does: never "", which Prometheus
// takes for an absent label. Namespaces are the user's data (one per
// tenant is Pinecone's pattern for multitenancy), so a Collector labels
// at most [DefaultMaxNamespaces] of them, the first it sees, and every
// later one [OtherNamespace]: see [WithMaxNamespaces]. Prometheus takes
// only UTF-8 label values (client_golang panics on others), and a
// namespace that is not valid UTF-8 reaches the Collector all the same:
// upsert refuses its records before sending, and reports each to the
// Failure observer with that namespace. Such a namespace is labelled with
// each run of invalid bytes replaced by U+FFFD, as [strings.ToValidUTF8]
// does ("tenant-\xff" as "tenant-\uFFFD"), within the cap as any other.
//
// # Series from a namespace's first event
//
// A counter's series that first appears at 1 shows no increase: with
// series made at their first event, increase(upsert_records_failed_total[10m]) > 0
// would miss the first failures after a process starts. So at the first
// event of each namespace label (a request, a retry or a failed record;
// within the cap, and once for [OtherNamespace]) the Collector makes at
// zero every counter series whose labels it can know in advance:
// upsert_requests_total{class="ok", code="OK"}, upsert_records_upserted_total,
// upsert_records_sent_total, upsert_retry_wait_seconds_total, and for every
// [upsert.Class] upsert_records_failed_total and upsert_retries_total of
// both kinds: 28 series per namespace label with the 8 classes of today,
// so at most 101 × 28 = 2828 with the default cap. The series of a failed
// request in upsert_requests_total (whose code is the index's) and the
// histogram's still start at their first event: alert on
// upsert_records_failed_total or upsert_retries_total.
//
// # Kubernetes
//
// Kubernetes service discovery gives every scraped target a label
// "namespace", the pod's. With Prometheus' default honor_labels: false,
// the target's label wins: the metrics' own "namespace" label is renamed
// "exported_namespace", so that dashboards and alerts written for
// "namespace" read the pod's Kubernetes namespace as if it were a
// Pinecone one. Either name the label otherwise,
//
//	c, err := upsertprom.New(prometheus.DefaultRegisterer, upsertprom.WithNamespaceLabel("pinecone_namespace"))
//
// and query that label, or query "exported_namespace". The default stays
// "namespace" so that existing dashboards keep working. (The default
// Pinecone namespace is labelled "__default__", not "", for the same
// reason: a series whose label is empty has no such label, and the
// target's "namespace" would be attached to it unrenamed.)
package upsertprom

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/upsertlib/upsert"
	"github.com/upsertlib/upsert/internal/namecap"
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
	// the Collector labelled its most ([WithMaxNamespaces]). A namespace
	// of that name shares its series with them.
	OtherNamespace = "_other"
	// DefaultPineconeNamespace is the namespace label of Pinecone's default
	// namespace, Pinecone's own name for it, whether a run names it "" or
	// "__default__". Never "": Prometheus takes an empty label for an
	// absent one, which a target label of the same name then fills in.
	DefaultPineconeNamespace = "__default__"
)

// DefaultNamespaceLabel is the name of the label that carries the Pinecone
// namespace unless [WithNamespaceLabel] gives another.
const DefaultNamespaceLabel = "namespace"

// DefaultMaxNamespaces is how many namespaces a Collector labels unless
// [WithMaxNamespaces] says otherwise.
const DefaultMaxNamespaces = 100

// Option configures [New].
type Option func(*config)

type config struct {
	namespace      string
	namespaceLabel string
	buckets        []float64
	maxNamespaces  int
	err            error
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

// WithNamespaceLabel sets the name of the label that carries the Pinecone
// namespace on every metric, [DefaultNamespaceLabel] ("namespace") by
// default. Under Kubernetes service discovery every target has a label
// "namespace" (the pod's), which clashes with the default: see the
// package doc. The name must match [a-zA-Z_][a-zA-Z0-9_]*, must not start
// with "__" (reserved by Prometheus) and must not be one of the metrics'
// other labels ("class", "code", "kind", "le"); New returns an error
// otherwise.
func WithNamespaceLabel(name string) Option {
	return func(c *config) {
		if !validLabel(name) {
			c.err = errors.Join(c.err, fmt.Errorf("upsertprom: WithNamespaceLabel(%q): want a label name matching [a-zA-Z_][a-zA-Z0-9_]*, not starting with \"__\" and other than class, code, kind and le", name))
			return
		}
		c.namespaceLabel = name
	}
}

// validLabel reports whether name can be the namespace label: a classic
// Prometheus label name, not reserved, not another label of the metrics.
func validLabel(name string) bool {
	switch name {
	case "", "class", "code", "kind", "le":
		return false
	}
	return !strings.HasPrefix(name, "__") && !strings.Contains(name, ":") && validPrefix(name)
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

// namespaceLabels gives the namespace label of a Pinecone namespace: the
// namespace itself for the first max seen, OtherNamespace after.
type namespaceLabels struct{ namecap.Cap }

// of returns the label of namespace ns ("" is the default namespace, as
// go-pinecone's "__default__"; one that is not valid UTF-8 is spelt with
// U+FFFD for its invalid bytes), and whether it is the label's first use:
// the first event of a namespace within the cap, or the first of
// OtherNamespace.
func (l *namespaceLabels) of(ns string) (label string, first bool) {
	if ns == "" {
		ns = DefaultPineconeNamespace // one namespace, whichever name a run sends
	}
	return l.Of(ns)
}

// New returns a Collector whose metrics are registered with reg, all or
// none: the error of the registration (such as a
// prometheus.AlreadyRegisteredError when another Collector with the same
// WithNamespace is registered with reg, or an invalid metric name) is
// returned, wrapped. When reg is nil nothing is registered, and the
// Collector can be registered later, as one prometheus.Collector.
func New(reg prometheus.Registerer, opts ...Option) (*Collector, error) {
	cfg := config{namespace: DefaultNamespace, namespaceLabel: DefaultNamespaceLabel, maxNamespaces: DefaultMaxNamespaces}
	for _, o := range opts {
		if o != nil { // as the core's options: a nil one does nothing
			o(&cfg)
		}
	}
	if cfg.err != nil {
		return nil, cfg.err
	}
	buckets := cfg.buckets
	if len(buckets) == 0 {
		buckets = slices.Clone(DefaultBuckets)
	}
	ns, nsLabel := cfg.namespace, cfg.namespaceLabel
	c := &Collector{
		namespaces: namespaceLabels{namecap.Cap{Max: cfg.maxNamespaces, Other: OtherNamespace}},
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Name: "requests_total",
			Help: `Upsert requests sent, retries included, by Pinecone namespace and outcome: class "ok" and code "OK" on success, else the failure's class and code (HTTP status or gRPC code name).`,
		}, []string{nsLabel, "class", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: ns, Name: "request_duration_seconds",
			Help:    "Round trip of upsert requests, successful or not, in seconds, by Pinecone namespace.",
			Buckets: buckets,
		}, []string{nsLabel}),
		recordsUpserted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Name: "records_upserted_total",
			Help: "Records the index confirmed, each once, by Pinecone namespace.",
		}, []string{nsLabel}),
		recordsSent: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Name: "records_sent_total",
			Help: "Records carried by upsert requests, counted again for every retry, by Pinecone namespace.",
		}, []string{nsLabel}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Name: "retries_total",
			Help: `Failed batches about to be sent again, by Pinecone namespace, class of the failure and kind: "backoff" (resent whole after a wait) or "split" (split in halves).`,
		}, []string{nsLabel, "class", "kind"}),
		recordsFailed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Name: "records_failed_total",
			Help: "Records that did not land, by Pinecone namespace and class of their final failure.",
		}, []string{nsLabel, "class"}),
		retryWait: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Name: "retry_wait_seconds_total",
			Help: "Backoff chosen before whole-batch retries, in seconds, by Pinecone namespace (a wait cut short when another batch lands counts whole).",
		}, []string{nsLabel}),
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
// Failure function, or given WithAcks, keeps only the first 1000 to fail
// (Stats.Failed counts all)", and of its MayBeStale: "Only the first 1000
// to be reported are kept when an Observer or WithAcks receives failures;
// Stats.MayBeStale counts all". [upsert.All] keeps
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
	ns := c.label(e.Namespace)
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
	ns := c.label(e.Namespace)
	c.retries.WithLabelValues(ns, class, kind).Inc()
	if !e.Split {
		c.retryWait.WithLabelValues(ns).Add(max(e.Wait.Seconds(), 0))
	}
}

func (c *Collector) failure(f upsert.Failure) {
	c.recordsFailed.WithLabelValues(c.label(f.Namespace), f.Class.String()).Inc()
}

// label returns the namespace label of Pinecone namespace ns, and makes
// the label's series at zero on its first use.
func (c *Collector) label(ns string) string {
	label, first := c.namespaces.of(ns)
	if first {
		c.zero(label)
	}
	return label
}

// zero makes at zero the counters of namespace label ns whose label values
// are known in advance: requests with class "ok", records upserted and
// sent, the retry wait, and for every [upsert.Class] the records failed
// and the retries of both kinds, so that increase() and rate() see their
// first event. A failed request's series of upsert_requests_total is
// made at its first event, since its code is the index's; so is the
// histogram's, at the namespace's first request.
func (c *Collector) zero(ns string) {
	c.requests.WithLabelValues(ns, ClassOK, CodeOK)
	c.recordsUpserted.WithLabelValues(ns)
	c.recordsSent.WithLabelValues(ns)
	c.retryWait.WithLabelValues(ns)
	for _, class := range upsert.Classes() {
		c.recordsFailed.WithLabelValues(ns, class.String())
		c.retries.WithLabelValues(ns, class.String(), KindBackoff)
		c.retries.WithLabelValues(ns, class.String(), KindSplit)
	}
}
