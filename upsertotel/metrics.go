package upsertotel

import (
	"cmp"
	"context"
	"math"
	"slices"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/semconv/v1.43.0/dbconv"

	"github.com/upsertlib/upsert"
)

// DurationBuckets are the bucket boundaries, in seconds, of
// db.client.operation.duration: those the semantic conventions advise for
// it, with 30 s added for upsert's default request timeout.
var DurationBuckets = []float64{0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30}

// Values of upsert.retry.kind.
const (
	RetryKindBackoff = "backoff" // the batch is resent whole after a wait
	RetryKindSplit   = "split"   // the batch is split in halves
)

// instruments are the metric instruments of a Telemetry.
type instruments struct {
	duration         metric.Float64Histogram
	upserted, failed metric.Int64Counter
	retries          metric.Int64Counter
	rate             metric.Float64ObservableGauge
	concurrency      metric.Int64ObservableGauge
	batchSize        metric.Int64ObservableGauge
}

func (in *instruments) init(m metric.Meter, observe metric.Callback) error {
	var err error
	var d dbconv.ClientOperationDuration
	if in.duration, err = m.Float64Histogram(d.Name(), metric.WithUnit(d.Unit()), metric.WithDescription(d.Description()),
		metric.WithExplicitBucketBoundaries(DurationBuckets...)); err != nil {
		return err
	}
	if in.upserted, err = m.Int64Counter("upsert.records.upserted", metric.WithUnit("{record}"),
		metric.WithDescription("Records the index confirmed.")); err != nil {
		return err
	}
	if in.failed, err = m.Int64Counter("upsert.records.failed", metric.WithUnit("{record}"),
		metric.WithDescription("Records that did not land, by the class of their final failure.")); err != nil {
		return err
	}
	if in.retries, err = m.Int64Counter("upsert.retries", metric.WithUnit("{retry}"),
		metric.WithDescription("Failed batches sent again, resent whole after a backoff or split in halves, by the class of the failure.")); err != nil {
		return err
	}
	if in.rate, err = m.Float64ObservableGauge("upsert.limiter.rate", metric.WithUnit("{record}/s"),
		metric.WithDescription("The limiter's send rate cap; absent while unlimited.")); err != nil {
		return err
	}
	if in.concurrency, err = m.Int64ObservableGauge("upsert.limiter.concurrency", metric.WithUnit("{request}"),
		metric.WithDescription("How many requests the limiter lets be in flight.")); err != nil {
		return err
	}
	if in.batchSize, err = m.Int64ObservableGauge("upsert.limiter.batch_size", metric.WithUnit("{record}"),
		metric.WithDescription("How many records the limiter lets a request carry.")); err != nil {
		return err
	}
	_, err = m.RegisterCallback(observe, in.rate, in.concurrency, in.batchSize)
	return err
}

// requestDone ends the request's span and measures it.
func (t *Telemetry) requestDone(e upsert.RequestEvent) {
	t.endRequest(e)
	rs := t.runOrNone(e.Context)
	ns := t.namespaces.of(e.Namespace)
	attrs := rs.commonAttrs(ns)
	if e.Err == nil {
		t.upserted.Add(e.Context, int64(e.Records), metric.WithAttributes(attrs...))
	}
	if e.Err != nil {
		errAttrs := errorAttrs(e.Err)
		attrs = append(attrs, errAttrs[:min(2, len(errAttrs))]...) // db.response.status_code says the transport's code
	}
	t.duration.Record(e.Context, e.Latency.Seconds(), metric.WithAttributes(attrs...))
}

func (t *Telemetry) retry(e upsert.RetryEvent) {
	t.retryEvent(e)
	kind := RetryKindBackoff
	if e.Split {
		kind = RetryKindSplit
	}
	class := upsert.ClassServer
	if e.Err != nil {
		class = e.Err.Class
	}
	rs := t.runOrNone(e.Context)
	attrs := append(rs.commonAttrs(t.namespaces.of(e.Namespace)),
		semconv.ErrorTypeKey.String(class.String()), attribute.String("upsert.retry.kind", kind))
	t.retries.Add(e.Context, 1, metric.WithAttributes(attrs...))
}

func (t *Telemetry) failure(f upsert.Failure) {
	attrs := []attribute.KeyValue{semconv.ErrorTypeKey.String(f.Class.String())}
	if ns := t.namespaces.of(f.Namespace); ns != "" {
		attrs = append(attrs, semconv.DBNamespace(ns))
	}
	t.failed.Add(context.Background(), 1, metric.WithAttributes(attrs...))
}

// observeLimiters reports the limiter state of each running call's
// index and namespace: one point per attribute set (db.operation.name,
// db.namespace, server.address and server.port), the earliest started
// call's when several share one.
func (t *Telemetry) observeLimiters(_ context.Context, o metric.Observer) error {
	runs := t.running()
	seen := make(map[attribute.Distinct]bool, len(runs))
	for _, rs := range runs {
		key := rs.gauge.Equivalent()
		if seen[key] || rs.limiter == nil {
			continue
		}
		seen[key] = true
		st := rs.limiter()
		opt := metric.WithAttributeSet(rs.gauge)
		if !math.IsInf(st.Rate, 0) {
			o.ObserveFloat64(t.rate, st.Rate, opt)
		}
		o.ObserveInt64(t.concurrency, int64(st.Concurrency), opt)
		o.ObserveInt64(t.batchSize, int64(st.BatchSize), opt)
	}
	return nil
}

// running returns the running calls, in the order they started.
func (t *Telemetry) running() []*runState {
	t.mu.Lock()
	runs := make([]*runState, 0, len(t.runs))
	for rs := range t.runs {
		runs = append(runs, rs)
	}
	t.mu.Unlock()
	slices.SortFunc(runs, func(a, b *runState) int { return cmp.Compare(a.seq, b.seq) })
	return runs
}
