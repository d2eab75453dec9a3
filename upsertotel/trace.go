package upsertotel

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	otelcodes "go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/upsertlib/upsert"
)

// runState is what t knows of a running call; the run's context carries it.
type runState struct {
	operation string               // db.operation.name
	namespace string               // the run's namespace, as validUTF8 spells it
	server    []attribute.KeyValue // server.address and server.port: the run's index's, else WithServerAddress's
	span      trace.Span           // the run's span; nil for a Writer
	limiter   func() upsert.LimiterState
	gauge     attribute.Set // the attributes of the limiter gauges
	seq       uint64        // the order the run started in, from 1
}

// runKey is the key of t's runState in a run's context. The keys of the
// context values are t's own, so that several Telemetry values observing
// one run (upsert.WithObserver given more than once) each find their own
// run and spans, never another's.
type runKey struct{ t *Telemetry }

// requestKey marks the span that t's startRequest started, so that
// requestDone never ends a span of the caller's, nor another Telemetry's.
type requestKey struct{ t *Telemetry }

// runOf returns t's state of the run ctx belongs to, or nil.
func (t *Telemetry) runOf(ctx context.Context) *runState {
	rs, _ := ctx.Value(runKey{t}).(*runState)
	return rs
}

// runOrNone returns t's state of the run ctx belongs to, or, when t did
// not see it start, t.noRun: operation "upsert", WithServerAddress's
// server.
func (t *Telemetry) runOrNone(ctx context.Context) *runState {
	if rs := t.runOf(ctx); rs != nil {
		return rs
	}
	return t.noRun
}

// serverOf returns server.address and server.port of host, a
// [upsert.RunEvent].Host, or WithServerAddress's when host is "" (or
// cannot be read).
func (t *Telemetry) serverOf(host string) []attribute.KeyValue {
	if host != "" {
		if attrs, ok := serverAttrs(host); ok {
			return attrs
		}
	}
	return t.server
}

// startRun starts the run's span, except for a Writer (see the package
// documentation), and registers the run for the limiter gauges until
// RunDone, which a Writer whose context ends sends by itself, closed or
// not.
func (t *Telemetry) startRun(ctx context.Context, e upsert.RunEvent) context.Context {
	rs := &runState{operation: "upsert", namespace: validUTF8(e.Namespace), server: t.serverOf(e.Host), limiter: e.LimiterState}
	if e.Operation == "Records" {
		rs.operation = "upsert_records"
	}
	rs.gauge = attribute.NewSet(append(namespaceAttrs(rs.operation, t.namespaces.of(e.Namespace)), rs.server...)...)
	if e.Operation != "Writer" {
		attrs := append(rs.commonAttrs(rs.namespace), attribute.String("upsert.run.operation", e.Operation))
		ctx, rs.span = t.tracer.Start(ctx, "upsert."+e.Operation, trace.WithSpanKind(trace.SpanKindInternal),
			trace.WithAttributes(attrs...))
	}
	t.mu.Lock()
	t.started++
	rs.seq = t.started
	t.runs[rs] = struct{}{}
	t.mu.Unlock()
	return context.WithValue(ctx, runKey{t}, rs)
}

// commonAttrs are the attributes of every span and of the duration
// histogram: the system, the run's operation, db.namespace (given valid
// UTF-8: as validUTF8 spells it on spans, namespaceLabels.of's on
// metrics; left out when "") and the run's server.
func (rs *runState) commonAttrs(namespace string) []attribute.KeyValue {
	attrs := make([]attribute.KeyValue, 0, 8)
	attrs = append(attrs, semconv.DBSystemNameKey.String(SystemName))
	attrs = append(attrs, namespaceAttrs(rs.operation, namespace)...)
	return append(attrs, rs.server...)
}

// startRequest starts the request's span, a client span named as the
// database conventions say: "{db.operation.name} {db.namespace}".
func (t *Telemetry) startRequest(ctx context.Context, e upsert.RequestEvent) context.Context {
	rs := t.runOrNone(ctx)
	ns := validUTF8(e.Namespace)
	name := rs.operation
	if ns != "" {
		name += " " + ns
	}
	attrs := append(rs.commonAttrs(ns),
		attribute.Int("upsert.request.records", e.Records),
		attribute.Int("upsert.request.bytes", e.Bytes),
		attribute.Int("upsert.attempt", e.Attempt))
	ctx, span := t.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
	return context.WithValue(ctx, requestKey{t}, span)
}

// endRequest ends the span t's startRequest started, with the outcome.
func (t *Telemetry) endRequest(e upsert.RequestEvent) {
	span, ok := e.Context.Value(requestKey{t}).(trace.Span)
	if !ok {
		return
	}
	if e.Err != nil {
		span.SetAttributes(errorAttrs(e.Err)...)
		span.SetStatus(otelcodes.Error, e.Err.Error())
	}
	span.End()
}

// retryEvent adds the retry or split to the run's span.
func (t *Telemetry) retryEvent(e upsert.RetryEvent) {
	rs := t.runOf(e.Context)
	if rs == nil || rs.span == nil {
		return
	}
	attrs := []attribute.KeyValue{
		attribute.Int("upsert.request.records", e.Records),
		attribute.Int("upsert.attempt", e.Attempt),
	}
	if e.Namespace != "" {
		attrs = append(attrs, semconv.DBNamespace(validUTF8(e.Namespace)))
	}
	if e.Err != nil {
		attrs = append(attrs, errorAttrs(e.Err)...)
	}
	name := "upsert.split"
	if !e.Split {
		name = "upsert.retry"
		attrs = append(attrs, attribute.Float64("upsert.retry.wait", e.Wait.Seconds()))
	}
	rs.span.AddEvent(name, trace.WithAttributes(attrs...))
}

// runDone ends the run's span with its figures, and stops observing its
// limiter.
func (t *Telemetry) runDone(e upsert.RunEvent) {
	rs := t.runOf(e.Context)
	if rs == nil {
		return
	}
	t.mu.Lock()
	delete(t.runs, rs)
	t.mu.Unlock()
	if rs.span == nil {
		return
	}
	s := e.Stats
	rs.span.SetAttributes(
		attribute.Int("upsert.run.records", s.Records),
		attribute.Int("upsert.run.upserted", s.Upserted),
		attribute.Int("upsert.run.failed", s.Failed),
		attribute.Int("upsert.run.duplicates", s.Duplicates),
		attribute.Int("upsert.run.requests", s.Requests),
		attribute.Int("upsert.run.retries", s.Retries),
		attribute.Int("upsert.run.splits", s.Splits),
	)
	if e.Err != nil {
		rs.span.SetStatus(otelcodes.Error, e.Err.Error())
	}
	rs.span.End()
}
