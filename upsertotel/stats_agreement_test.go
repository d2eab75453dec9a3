package upsertotel_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pinecone-io/go-pinecone/v5/pinecone"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/upsertlib/upsert"
	"github.com/upsertlib/upsert/upserttest"
)

func checkAgainstStats(t *testing.T, tel *telemetry, s upsert.Stats, failedByClass map[upsert.Class]int) {
	t.Helper()
	m := tel.metrics(t)
	check := func(what string, got, want int) {
		t.Helper()
		if got != want {
			t.Errorf("%s: metric %d, Stats %d", what, got, want)
		}
	}
	total := func(data metricdata.Aggregation) int {
		n := 0
		if data == nil {
			return 0
		}
		for _, v := range sums(t, data, "") {
			n += v
		}
		return n
	}
	hist, _ := m["db.client.operation.duration"].(metricdata.Histogram[float64])
	byClass := map[string]int{}
	for _, p := range hist.DataPoints {
		v, _ := p.Attributes.Value("error.type")
		byClass[v.AsString()] += int(p.Count)
	}
	reqs, errs := 0, 0
	for _, n := range byClass {
		reqs += n
	}
	check("requests", reqs, s.Requests)
	for _, c := range upsert.Classes() {
		check("requests "+c.String(), byClass[c.String()], s.ErrorsByClass[c])
		errs += s.ErrorsByClass[c]
	}
	check("requests ok", byClass[""], s.Requests-errs)
	check("upserted", total(m["upsert.records.upserted"]), s.Upserted)
	if m["upsert.records.failed"] != nil {
		fc := sums(t, m["upsert.records.failed"], "error.type")
		for _, c := range upsert.Classes() {
			check("failed "+c.String(), fc[c.String()], failedByClass[c])
		}
	}
	check("failed", total(m["upsert.records.failed"]), s.Failed)
	retries := map[string]int{}
	if r, ok := m["upsert.retries"].(metricdata.Sum[int64]); ok {
		for _, p := range r.DataPoints {
			class, _ := p.Attributes.Value("error.type")
			kind, _ := p.Attributes.Value("upsert.retry.kind")
			retries[class.AsString()+" "+kind.AsString()] += int(p.Value)
			retries[kind.AsString()] += int(p.Value)
		}
	}
	check("backoff", retries["backoff"], s.Retries)
	check("split", retries["split"], s.Splits)
	for _, c := range upsert.Classes() {
		check("backoff "+c.String(), retries[c.String()+" backoff"], s.RetriesByClass[c])
	}
}

func failedByClass(res upsert.Result) map[upsert.Class]int {
	m := map[upsert.Class]int{}
	for _, f := range res.Failed {
		m[f.Class]++
	}
	return m
}

func mixedFaults(r upserttest.Request) upserttest.Fault {
	switch r.Seq % 7 {
	case 1:
		return upserttest.Fault{Code: codes.ResourceExhausted}
	case 3:
		return upserttest.Fault{Code: codes.Unavailable}
	case 5:
		if r.Seq < 30 {
			return upserttest.Fault{Delay: 200 * time.Millisecond}
		}
	}
	return upserttest.Fault{}
}

// Every instrument agrees with the run's Stats, by class, for All, Stream,
// a Writer, runs canceled midway and integrated records over REST, against
// an index answering 429s, 503s and timeouts.
func TestEveryInstrumentAgreesWithTheRunsStatsUnderFaults(t *testing.T) {
	var n atomic.Int64
	for _, op := range []string{"All", "Stream", "Writer", "AllCancel", "WriterCancel", "Records"} {
		t.Run(op, func(t *testing.T) {
			srv := upserttest.NewServer(upserttest.WithDimension(4), upserttest.WithFaults(mixedFaults), upserttest.WithFieldMap("text"))
			defer srv.Close()
			idx := connectWithREST(t, srv)
			tel := newTelemetry(t)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			recs := records(600, 4)
			for i := 0; i < len(recs); i += 37 {
				*recs[i].Values = (*recs[i].Values)[:3]
			}
			n.Store(0)
			opts := []upsert.Option{upsert.WithIndex(idx), upsert.WithObserver(tel.Observer()), upsert.WithBatchSize(20),
				upsert.WithRequestTimeout(100 * time.Millisecond), upsert.WithBackoff(time.Millisecond, 5*time.Millisecond),
				upsert.WithObserver(upsert.Observer{RequestDone: func(upsert.RequestEvent) {
					if n.Add(1) == 8 && (op == "AllCancel" || op == "WriterCancel") {
						cancel()
					}
				}})}
			var res upsert.Result
			switch op {
			case "All", "AllCancel":
				res, _ = upsert.All(ctx, recs, opts...)
			case "Stream":
				res, _ = upsert.Stream(ctx, func(yield func(*pinecone.Vector) bool) {
					for _, v := range recs {
						if !yield(v) {
							return
						}
					}
				}, opts...)
			case "Records":
				res, _ = upsert.Records(ctx, func(yield func(*pinecone.IntegratedRecord) bool) {
					for i := range 300 {
						r := pinecone.IntegratedRecord{"_id": "r" + string(rune('a'+i%26)) + string(rune('a'+i/26)), "text": "hello"}
						if i%41 == 0 {
							delete(r, "text")
						}
						if !yield(&r) {
							return
						}
					}
				}, opts...)
			case "Writer", "WriterCancel":
				w, err := upsert.NewWriter(ctx, opts...)
				require.NoError(t, err)
				for _, v := range recs {
					if w.Add(context.Background(), v) != nil {
						break
					}
				}
				res, _ = w.Close(context.Background())
			}
			s := res.Stats
			t.Logf("stats: rec %d req %d up %d failed %d retries %d %v splits %d errs %v codes %v", s.Records, s.Requests, s.Upserted, s.Failed, s.Retries, s.RetriesByClass, s.Splits, s.ErrorsByClass, s.ErrorsByCode)
			checkAgainstStats(t, tel, s, failedByClass(res))
		})
	}
}

// upsert.request.bytes is the size of the request the server received,
// over gRPC with metadata and sparse values, and over REST as NDJSON.
func TestRequestBytesAreWhatTheServerReceived(t *testing.T) {
	for _, api := range []string{"grpc", "rest"} {
		t.Run(api, func(t *testing.T) {
			var serverBytes atomic.Int64
			srv := upserttest.NewServer(upserttest.WithDimension(4), upserttest.WithFieldMap("text"), upserttest.WithFaults(func(r upserttest.Request) upserttest.Fault {
				serverBytes.Add(int64(r.Bytes))
				return upserttest.Fault{}
			}))
			defer srv.Close()
			idx := connectWithREST(t, srv)
			tel := newTelemetry(t)
			opts := []upsert.Option{upsert.WithIndex(idx), upsert.WithObserver(tel.Observer()), upsert.WithBatchSize(7)}
			var res upsert.Result
			var err error
			if api == "grpc" {
				recs := records(100, 4)
				for i, v := range recs {
					if i%3 == 0 {
						md, _ := structpb.NewStruct(map[string]any{"a": "héllo", "n": float64(i), "l": []any{"x", "y"}})
						v.Metadata = md
					}
				}
				res, err = upsert.All(context.Background(), recs, opts...)
			} else {
				res, err = upsert.Records(context.Background(), func(yield func(*pinecone.IntegratedRecord) bool) {
					for i := range 100 {
						r := pinecone.IntegratedRecord{"_id": "r" + string(rune('a'+i%26)) + string(rune('a'+i/26)), "text": "héllo <wörld> & \"q\"", "n": i}
						if !yield(&r) {
							return
						}
					}
				}, opts...)
			}
			require.NoError(t, err)
			require.Equal(t, 100, res.Upserted)
			var spanBytes int64
			for _, sp := range tel.spans.GetSpans() {
				if v, ok := attrs(sp.Attributes)["upsert.request.bytes"]; ok {
					spanBytes += v.AsInt64()
				}
			}
			require.Equal(t, serverBytes.Load(), spanBytes, "RequestEvent.Bytes vs the server's request size")
		})
	}
}

// connectWithREST connects to srv over gRPC, and over REST for integrated
// records (upsert.NewClient), in namespace "ns".
func connectWithREST(t *testing.T, srv *upserttest.Server) *pinecone.IndexConnection {
	t.Helper()
	pc, err := upsert.NewClient(pinecone.NewClientParams{ApiKey: "test", RestClient: srv.Client()})
	require.NoError(t, err)
	idx, err := pc.Index(pinecone.NewIndexConnParams{Host: srv.Host(), Namespace: "ns"})
	require.NoError(t, err)
	t.Cleanup(func() { idx.Close() })
	return idx
}
