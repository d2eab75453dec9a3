// Package upsertotel traces and measures [upsert] runs with OpenTelemetry.
// The upsert package itself never imports OpenTelemetry; this package
// turns its [upsert.Observer] into spans and metric instruments:
//
//	tel, err := upsertotel.New()
//	if err != nil { ... }
//	res, err := upsert.All(ctx, records, upsert.WithIndex(idx), upsert.WithObserver(tel.Observer()))
//
// By default the spans go to the global TracerProvider and the metrics to
// the global MeterProvider (otel.GetTracerProvider, otel.GetMeterProvider);
// [WithTracerProvider] and [WithMeterProvider] choose others. One
// Telemetry serves any number of runs, concurrent ones included, and
// several may observe one run: each starts its own spans and records the
// run's metrics into its own MeterProvider, so that two on one
// MeterProvider count such a run twice (see [Telemetry.Observer]). Its
// observer receives failures: see [Telemetry.Observer] for what that does
// to a Result.
//
// # Spans
//
// A run of [upsert.All], [upsert.Stream] or [upsert.Records] is a span
// named after the call ("upsert.All", ...), of kind internal, started from
// the caller's context: it nests under the service's own span. Each
// upsert request is a span of kind client, child of the run's, named after
// the operation and the namespace ("upsert docs"), and the request is sent
// with that span's context, so that the span of an otelgrpc-instrumented
// connection nests under it. A batch resent after a backoff, and one split
// in halves, is an event of the run's span, "upsert.retry" or
// "upsert.split".
//
// A [upsert.Writer] gets no run span: it may live for days, and one trace
// would hold every request it ever sent. Its request spans descend from the
// context given to [upsert.NewWriter] (the roots of their own traces when
// it holds no span). Its run, for the limiter gauges, lasts until
// [upsert.Writer.Close], or until that context ends if it ends first: the
// Writer then stops by itself, and is no longer observed whether or not
// it is ever closed. With no run span, no span status tells how a Writer
// ended; its failed records and requests are counted and traced as any
// run's.
//
// # Attributes
//
// From OpenTelemetry's semantic conventions (database client spans and
// metrics, v1.43.0):
//
//   - db.system.name: "pinecone" (no registered value exists; the
//     conventions allow a custom one).
//   - db.operation.name: "upsert" for vectors (gRPC Upsert), "upsert_records"
//     for integrated records (REST).
//   - db.namespace: the Pinecone namespace of the request, left out when
//     empty (the default namespace). On spans it is the namespace itself;
//     on metrics, one of a bounded set: see Namespaces on metrics below.
//     A namespace that is not valid UTF-8 (upsert refuses its records
//     before sending, and reports each to the Failure observer with it)
//     is spelt with U+FFFD for each run of invalid bytes, as
//     [strings.ToValidUTF8] does, here and in span names: OTLP carries
//     strings as protobuf, which fails a whole export over one that is
//     not UTF-8.
//   - server.address, server.port: the host of the run's index, as
//     [upsert.RunEvent].Host names it (port 443 when it names none), so
//     that one Telemetry observing runs into several indexes tells them
//     apart; for a run that names no index ([upsert.WithUpsertFunc],
//     [upsert.WithRecordsFunc]), the host given to [WithServerAddress],
//     left out without it.
//   - error.type: the [upsert.Class] of a failed request ("rate-limited",
//     "timeout", ...): low-cardinality, and what the library did about it.
//   - db.response.status_code: the HTTP status ("429") or the gRPC code
//     ("RESOURCE_EXHAUSTED") the index answered, when it answered one.
//   - rpc.response.status_code (gRPC) or http.response.status_code (REST):
//     the same code, under the transport's own convention.
//
// db.operation.batch.size is not set: the conventions say that a call is
// not a batch because one operation takes many operands (rows, documents,
// points), and an upsert of many vectors is one operation. The library's
// own attributes carry that and the rest, under the "upsert." prefix:
//
//   - upsert.request.records, upsert.request.bytes, upsert.attempt on request
//     spans (attempt counts from 1, the halves of a split continuing it);
//   - on the run span's events: upsert.request.records and upsert.attempt
//     of the failed request, error.type, and upsert.retry.wait (seconds) for
//     a retry;
//   - on the run span, when it ends: upsert.run.records, upsert.run.upserted,
//     upsert.run.failed, upsert.run.duplicates, upsert.run.requests,
//     upsert.run.retries and upsert.run.splits, the figures of
//     [upsert.Stats].
//
// A failed request's span and a run that returned an error have status
// Error with the error's message. Vector values, metadata and the API key
// never appear.
//
// # Metrics
//
//   - db.client.operation.duration (histogram, s): each request's round trip
//     ([upsert.RequestEvent].Latency), with db.system.name,
//     db.operation.name, db.namespace, server.address and port (the run's),
//     and, when it
//     failed, error.type and db.response.status_code. Its count is the
//     number of requests ([upsert.Stats].Requests), by outcome.
//   - upsert.records.upserted (counter, {record}): records the index
//     confirmed ([upsert.Stats].Upserted), with db.system.name,
//     db.operation.name, db.namespace, server.address and port (the run's).
//   - upsert.records.failed (counter, {record}): records that did not land,
//     by error.type, the class of their final failure ([upsert.Stats].Failed),
//     and db.namespace (left out for the default namespace); no
//     server.address, as an [upsert.Failure] does not say which run
//     reported it.
//   - upsert.retries (counter, {retry}): failed batches sent again, by
//     error.type and upsert.retry.kind: "backoff" when resent whole after a
//     wait (the sum is [upsert.Stats].Retries, by class RetriesByClass),
//     "split" when split in halves ([upsert.Stats].Splits); with
//     db.system.name, db.operation.name, db.namespace (the batch's, left
//     out when empty), server.address and port (the run's).
//   - upsert.limiter.rate ({record}/s), upsert.limiter.concurrency
//     ({request}) and upsert.limiter.batch_size ({record}) (gauges): the
//     [upsert.LimiterState] of each running call's namespace
//     ([upsert.RunEvent].Namespace), by db.operation.name, db.namespace,
//     server.address and server.port (the run's index), read when the
//     metrics are collected. The rate is left out while it is unlimited
//     (before the index first answered 429). Running calls whose points
//     would have the same attributes report one point: the earliest
//     started call's, until it ends, then the next one's. Calls into one
//     index and namespace share a [upsert.Limiter] by default, and so its
//     state; calls given separate Limiters ([upsert.WithLimiter]), calls
//     through [upsert.WithUpsertFunc] (each starts its own, and names no
//     index) and calls into namespaces beyond the cap (all
//     [OtherNamespace]) each have their own, and only the earliest's is
//     reported. One call's state, rather than a sum or a maximum over
//     them, keeps the three gauges consistent, each the state of one
//     Limiter, and the same point from one collection to the next.
//
// # Namespaces on metrics
//
// Namespaces are the user's data (one per tenant is Pinecone's pattern for
// multitenancy), and every namespace would be an attribute set of every
// instrument: past the SDK's cardinality limit (2000 attribute sets per
// instrument by default) the rest fold into one otel.metric.overflow
// point, their namespace lost. So a Telemetry's metrics name in
// db.namespace at most [DefaultMaxNamespaces] namespaces, the first it sees
// in any event, for its life, and every later one [OtherNamespace]
// ("_other"): see [WithMaxNamespaces]. The default namespace has no
// db.namespace and takes no place. upsertprom bounds its namespace label
// alike, with the same default and value. Spans are not bounded: they
// name each request's namespace as it is.
package upsertotel

import (
	"errors"
	"fmt"
	"net/url"
	"reflect"
	"strconv"
	"strings"
	"sync"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/upsertlib/upsert"
	"github.com/upsertlib/upsert/internal/namecap"
)

// ScopeName is the instrumentation scope of the tracer and the meter.
const ScopeName = "github.com/upsertlib/upsert/upsertotel"

// SystemName is the value of db.system.name.
const SystemName = "pinecone"

// Option configures [New].
type Option func(*config)

type config struct {
	tp            trace.TracerProvider
	mp            metric.MeterProvider
	attrs         []attribute.KeyValue // server.address and server.port
	maxNamespaces int
	err           error
}

// WithTracerProvider sends the spans to tp instead of the global
// TracerProvider.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(c *config) {
		if isNil(tp) {
			c.err = errors.Join(c.err, errors.New("upsertotel: WithTracerProvider: nil TracerProvider"))
		}
		c.tp = tp
	}
}

// WithMeterProvider sends the metrics to mp instead of the global
// MeterProvider.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(c *config) {
		if isNil(mp) {
			c.err = errors.Join(c.err, errors.New("upsertotel: WithMeterProvider: nil MeterProvider"))
		}
		c.mp = mp
	}
}

// WithServerAddress sets server.address and server.port from an index's
// host, as given to pinecone.NewIndexConnParams ("https://NAME.svc.pinecone.io",
// or a host and port without a scheme; port 443 when it names none), for
// the runs that do not name their index: those through
// [upsert.WithUpsertFunc] or [upsert.WithRecordsFunc], whose
// [upsert.RunEvent].Host is "". A run through [upsert.WithIndex] carries
// its own index's host, which wins: one Telemetry observing runs into
// several indexes tells them apart, whatever this option says. Without
// the option, the runs with no host have no server attributes. New
// returns an error for a host it cannot read.
func WithServerAddress(host string) Option {
	return func(c *config) {
		attrs, ok := serverAttrs(host)
		if !ok {
			c.err = errors.Join(c.err, fmt.Errorf("upsertotel: WithServerAddress(%q): want an index host such as https://NAME.svc.REGION.pinecone.io", host))
			return
		}
		c.attrs = attrs
	}
}

// WithMaxNamespaces sets how many Pinecone namespaces the Telemetry's
// metrics name in db.namespace, the first it sees in any event; the
// metrics of later ones have db.namespace [OtherNamespace], so that the
// number of attribute sets of each instrument stays bounded whatever the
// data (a run over thousands of tenants' namespaces would otherwise make
// thousands per instrument, and past the SDK's cardinality limit, 2000
// by default, fold the rest into one otel.metric.overflow point, their
// namespace lost). The default is [DefaultMaxNamespaces], as upsertprom's;
// 0 gives every namespace [OtherNamespace] on the metrics. The default
// namespace has no db.namespace and takes no place. Spans are not
// bounded: they name each request's namespace as it is. A negative n is
// an error of New.
func WithMaxNamespaces(n int) Option {
	return func(c *config) {
		if n < 0 {
			c.err = errors.Join(c.err, fmt.Errorf("upsertotel: WithMaxNamespaces(%d): want 0 or more", n))
			return
		}
		c.maxNamespaces = n
	}
}

// serverAttrs returns server.address and server.port of an index host,
// given with or without a scheme (a host without one, as
// [upsert.RunEvent].Host spells it, is dialed on port 443 when it names
// no port), and false for a host it cannot read.
func serverAttrs(host string) ([]attribute.KeyValue, bool) {
	s := host
	if !strings.Contains(s, "://") {
		s = "https://" + s
	}
	u, err := url.Parse(s)
	if err != nil || u.Hostname() == "" {
		return nil, false
	}
	attrs := []attribute.KeyValue{semconv.ServerAddress(validUTF8(u.Hostname()))}
	port := u.Port()
	if port == "" && u.Scheme == "https" {
		port = "443"
	}
	if p, err := strconv.Atoi(port); err == nil {
		attrs = append(attrs, semconv.ServerPort(p))
	}
	return attrs, true
}

// Telemetry turns the events of upsert runs into spans and metrics. Pass
// [Telemetry.Observer] to [upsert.WithObserver]. It is safe for concurrent
// use.
type Telemetry struct {
	tracer     trace.Tracer
	server     []attribute.KeyValue // WithServerAddress's server.address and server.port, if given
	noRun      *runState            // what is known of an event's run when t did not see it start
	namespaces namespaceLabels      // db.namespace on metrics
	instruments

	mu      sync.Mutex
	runs    map[*runState]struct{} // running calls, for the limiter gauges
	started uint64                 // runs started so far, the last one's runState.seq
}

// isNil reports whether p is nil, or holds a nil pointer (a provider
// declared and set only when telemetry is on).
func isNil(p any) bool {
	v := reflect.ValueOf(p)
	return !v.IsValid() || v.Kind() == reflect.Pointer && v.IsNil()
}

// New returns a Telemetry with its instruments created from the meter of
// the MeterProvider. It returns the error of an option (a nil provider is
// one) or of the MeterProvider.
func New(opts ...Option) (*Telemetry, error) {
	cfg := config{tp: otel.GetTracerProvider(), mp: otel.GetMeterProvider(), maxNamespaces: DefaultMaxNamespaces}
	for _, o := range opts {
		if o != nil { // as the core's options: a nil one does nothing
			o(&cfg)
		}
	}
	if cfg.err != nil {
		return nil, cfg.err
	}
	t := &Telemetry{
		tracer:     cfg.tp.Tracer(ScopeName, trace.WithSchemaURL(semconv.SchemaURL)),
		server:     cfg.attrs,
		noRun:      &runState{operation: "upsert", server: cfg.attrs},
		namespaces: namespaceLabels{namecap.Cap{Max: cfg.maxNamespaces, Other: OtherNamespace}},
		runs:       make(map[*runState]struct{}),
	}
	meter := cfg.mp.Meter(ScopeName, metric.WithSchemaURL(semconv.SchemaURL))
	if err := t.instruments.init(meter, t.observeLimiters); err != nil { //nolint:staticcheck // QF1008: t.init would read as initializing the whole Telemetry
		return nil, fmt.Errorf("upsertotel: %w", err)
	}
	return t, nil
}

// Observer returns the observer that feeds t, for [upsert.WithObserver].
// The same observer may be given to any number of runs, and a run may be
// given the observers of several Telemetry values (one per
// TracerProvider, say): each starts and ends its own spans, and each adds
// the run to the instruments of its MeterProvider. Telemetry values that
// share a MeterProvider (the global one, by default) and observe one run
// count its records and requests once each: give all but one of them
// WithMeterProvider(noop.NewMeterProvider()), from
// go.opentelemetry.io/otel/metric/noop.
//
// The observer has a Failure function (for upsert.records.failed), so a
// run of [upsert.Stream], [upsert.Records] or a [upsert.Writer] given it
// keeps at most the first 1000 failures in [upsert.Result].Failed, as
// those calls document; [upsert.Stats].Failed still counts all.
func (t *Telemetry) Observer() upsert.Observer {
	return upsert.Observer{
		StartRun:     t.startRun,
		StartRequest: t.startRequest,
		RequestDone:  t.requestDone,
		Retry:        t.retry,
		Failure:      t.failure,
		RunDone:      t.runDone,
	}
}

// grpcCodeNames are the canonical names of the gRPC status codes, as
// rpc.response.status_code spells them (codes.Code's String is CamelCase).
var grpcCodeNames = [...]string{
	"OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND",
	"ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
	"ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS",
	"UNAUTHENTICATED",
}

// errorAttrs returns the attributes of a failed request, in this order:
// error.type, then the code the index answered, if any, under the
// database's convention and under the transport's.
func errorAttrs(e *upsert.Error) []attribute.KeyValue {
	attrs := []attribute.KeyValue{semconv.ErrorTypeKey.String(e.Class.String())}
	switch c := int(e.GRPCCode); {
	case e.StatusCode != 0:
		attrs = append(attrs,
			semconv.DBResponseStatusCode(strconv.Itoa(e.StatusCode)),
			semconv.HTTPResponseStatusCode(e.StatusCode))
	case c > 0 && c < len(grpcCodeNames):
		attrs = append(attrs,
			semconv.DBResponseStatusCode(grpcCodeNames[c]),
			semconv.RPCResponseStatusCode(grpcCodeNames[c]))
	}
	return attrs
}
