package upsertprom_test

import (
	"context"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/pinecone-io/go-pinecone/v5/pinecone"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"

	"github.com/upsertlib/upsert"
	"github.com/upsertlib/upsert/upsertprom"
	"github.com/upsertlib/upsert/upserttest"
)

// gatherAll gathers every sample as "name{l=v,...}" -> value (histograms: _count).
func gatherAll(t *testing.T, reg prometheus.Gatherer) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var ls []string
			for _, lp := range m.GetLabel() {
				ls = append(ls, lp.GetName()+"="+lp.GetValue())
			}
			sort.Strings(ls)
			key := mf.GetName() + "{" + strings.Join(ls, ",") + "}"
			if h := m.GetHistogram(); h != nil {
				out[key+"_count"] = float64(h.GetSampleCount())
			} else {
				out[key] = m.GetCounter().GetValue()
			}
		}
	}
	return out
}

// sumOf sums the samples of name whose labels contain every of want ("k=v").
func sumOf(all map[string]float64, name string, want ...string) float64 {
	var s float64
	for k, v := range all {
		if !strings.HasPrefix(k, name+"{") {
			continue
		}
		ok := true
		for _, w := range want {
			if !strings.Contains(k, w) {
				ok = false
			}
		}
		if ok {
			s += v
		}
	}
	return s
}

func checkAgainstStats(t *testing.T, reg prometheus.Gatherer, s upsert.Stats, byClassFailed map[upsert.Class]int) {
	t.Helper()
	all := gatherAll(t, reg)
	check := func(what string, got float64, want int) {
		t.Helper()
		if int(got) != want {
			t.Errorf("%s: metric %v, Stats %d", what, got, want)
		}
	}
	check("requests", sumOf(all, "upsert_requests_total"), s.Requests)
	errs := 0
	for _, c := range upsert.Classes() {
		check("requests class "+c.String(), sumOf(all, "upsert_requests_total", "class="+c.String()+","), s.ErrorsByClass[c])
		check("retries backoff "+c.String(), sumOf(all, "upsert_retries_total", "class="+c.String()+",", "kind=backoff"), s.RetriesByClass[c])
		check("failed "+c.String(), sumOf(all, "upsert_records_failed_total", "class="+c.String()+","), byClassFailed[c])
		errs += s.ErrorsByClass[c]
	}
	for code, n := range s.ErrorsByCode {
		check("requests code "+code, sumOf(all, "upsert_requests_total", "code="+code+","), n)
	}
	check("requests ok", sumOf(all, "upsert_requests_total", "class=ok"), s.Requests-errs)
	check("retries backoff", sumOf(all, "upsert_retries_total", "kind=backoff"), s.Retries)
	check("splits", sumOf(all, "upsert_retries_total", "kind=split"), s.Splits)
	check("upserted", sumOf(all, "upsert_records_upserted_total"), s.Upserted)
	check("failed", sumOf(all, "upsert_records_failed_total"), s.Failed)
	check("duration count", sumOf(all, "upsert_request_duration_seconds"), s.Requests)
	if s.Requests > 0 {
		check("sent", sumOf(all, "upsert_records_sent_total"), int(s.BatchSizes.Mean*float64(s.Requests)+0.5))
	}
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

func plainRecords(n int) []*pinecone.Vector {
	recs := records(n, 4)
	for i := 0; i < n; i += 37 {
		*recs[i].Values = (*recs[i].Values)[:3] // wrong dimension
	}
	return recs
}

func resultFailedByClass(res upsert.Result) map[upsert.Class]int {
	m := map[upsert.Class]int{}
	for _, f := range res.Failed {
		m[f.Class]++
	}
	return m
}

// Every counter agrees with the run's Stats, by class and code, for All,
// Stream and a Writer against an index answering 429s, 503s and timeouts
// that split batches, with records refused before sending.
func TestEveryCounterAgreesWithTheRunsStatsUnderFaults(t *testing.T) {
	for _, op := range []string{"All", "Stream", "Writer"} {
		t.Run(op, func(t *testing.T) {
			srv := upserttest.NewServer(upserttest.WithDimension(4), upserttest.WithFaults(mixedFaults))
			defer srv.Close()
			pc, err := pinecone.NewClient(pinecone.NewClientParams{ApiKey: "test"})
			require.NoError(t, err)
			idx, err := pc.Index(pinecone.NewIndexConnParams{Host: srv.Host(), Namespace: "ns"})
			require.NoError(t, err)
			defer idx.Close()
			reg := prometheus.NewRegistry()
			c, err := upsertprom.New(reg)
			require.NoError(t, err)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			recs := plainRecords(600)
			opts := []upsert.Option{upsert.WithIndex(idx), upsert.WithObserver(c.Observer()), upsert.WithBatchSize(20),
				upsert.WithRequestTimeout(100 * time.Millisecond), upsert.WithBackoff(time.Millisecond, 5*time.Millisecond)}
			var res upsert.Result
			switch op {
			case "All":
				res, _ = upsert.All(ctx, recs, opts...)
			case "Stream":
				res, _ = upsert.Stream(ctx, func(yield func(*pinecone.Vector) bool) {
					for _, v := range recs {
						if !yield(v) {
							return
						}
					}
				}, opts...)
			case "Writer":
				w, err := upsert.NewWriter(ctx, opts...)
				require.NoError(t, err)
				for _, v := range recs {
					_ = w.Add(ctx, v)
				}
				res, _ = w.Close(ctx)
			}
			s := res.Stats
			t.Logf("stats: req %d up %d failed %d retries %d %v splits %d errs %v codes %v", s.Requests, s.Upserted, s.Failed, s.Retries, s.RetriesByClass, s.Splits, s.ErrorsByClass, s.ErrorsByCode)
			checkAgainstStats(t, reg, s, resultFailedByClass(res))
		})
	}
}
