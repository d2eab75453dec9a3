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
	operation string     // db.operation.name
	namespace string     // the run's namespace
	span      trace.Span // the run's span; nil for a Writer
	limiter   func() upsert.LimiterState
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

// startRun starts the run's span, except for a Writer (see the package
// documentation), and registers the run for the limiter gauges until
// RunDone, which a Writer whose context ends sends by itself, closed or
// not.
func (t *Telemetry) startRun(ctx context.Context, e upsert.RunEvent) context.Context {
	rs := &runState{operation: "upsert", namespace: e.Namespace, limiter: e.LimiterState}
	if e.Operation == "Records" {
		rs.operation = "upsert_records"
	}
	if e.Operation != "Writer" {
		attrs := append(t.commonAttrs(rs.operation, e.Namespace), attribute.String("upsert.run.operation", e.Operation))
		ctx, rs.span = t.tracer.Start(ctx, "upsert."+e.Operation, trace.WithSpanKind(trace.SpanKindInternal),
			trace.WithAttributes(attrs...))
	}
	t.mu.Lock()
	t.runs[rs] = struct{}{}
	t.mu.Unlock()
	return context.WithValue(ctx, runKey{t}, rs)
}

// commonAttrs are the attributes of every span and of the duration
// histogram: the system, the operation, the namespace and the server.
func (t *Telemetry) commonAttrs(operation, namespace string) []attribute.KeyValue {
	attrs := make([]attribute.KeyValue, 0, 8)
	attrs = append(attrs, semconv.DBSystemNameKey.String(SystemName))
	attrs = append(attrs, namespaceAttrs(operation, namespace)...)
	return append(attrs, t.server...)
}

// operationOf returns the db.operation.name of the run ctx belongs to.
func (t *Telemetry) operationOf(ctx context.Context) string {
	if rs := t.runOf(ctx); rs != nil {
		return rs.operation
	}
	return "upsert"
}

// startRequest starts the request's span, a client span named as the
// database conventions say: "{db.operation.name} {db.namespace}".
func (t *Telemetry) startRequest(ctx context.Context, e upsert.RequestEvent) context.Context {
	op := t.operationOf(ctx)
	name := op
	if e.Namespace != "" {
		name += " " + e.Namespace
	}
	attrs := append(t.commonAttrs(op, e.Namespace),
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
		attrs = append(attrs, semconv.DBNamespace(e.Namespace))
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
