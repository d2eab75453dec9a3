package main

import (
	"bufio"
	"encoding/json"
	"os"
	"time"

	"github.com/upsertlib/upsert/upserttest"
)

// This file holds -family-out: one JSON object per index and strategy.

// familyLine is one line of -family-out: every drawn parameter (Index)
// and every measured figure of one run, a field each, for analysis
// elsewhere (hence more than 20 fields). Durations in Index are in
// nanoseconds (Go's encoding of time.Duration); the others say their unit.
type familyLine struct {
	Seed        uint64           `json:"seed"`
	Strategy    string           `json:"strategy"`
	Description string           `json:"description"`
	Index       upserttest.Index `json:"index"`
	Scale       float64          `json:"scale"`
	// StartPerSecond and StartBatch are the index's capacity at the start
	// (Index.Throughput) and its batch size.
	StartPerSecond float64 `json:"start_records_per_second"`
	StartBatch     int     `json:"start_batch"`
	Records        int     `json:"records"`
	IdealSeconds   float64 `json:"ideal_seconds"`
	StopSeconds    float64 `json:"stop_seconds"`

	Efficiency       float64 `json:"efficiency"`
	ElapsedSeconds   float64 `json:"elapsed_seconds"`
	Stopped          bool    `json:"stopped"`
	Landed           int     `json:"landed"`
	Reported         int     `json:"reported_failed"`
	Lost             int     `json:"lost"`
	Requests         int     `json:"requests"`
	RateLimited      int     `json:"rate_limited"`
	RateLimitedShare float64 `json:"rate_limited_share"`
	ClientRequests   int     `json:"client_requests"`
	P50Millis        float64 `json:"p50_ms"`
	P99Millis        float64 `json:"p99_ms"`
}

// familyOut writes -family-out; a nil *familyOut writes nothing.
type familyOut struct {
	f   *os.File
	buf *bufio.Writer
	enc *json.Encoder
}

// openFamilyOut creates the file at path, or returns nil for "".
func openFamilyOut(path string) (*familyOut, error) {
	if path == "" {
		return nil, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	buf := bufio.NewWriter(f)
	return &familyOut{f: f, buf: buf, enc: json.NewEncoder(buf)}, nil
}

// write writes the line of run r on fi, and flushes it, so that an
// interrupted benchmark keeps what it measured.
func (o *familyOut) write(fi *familyIndex, r result, scale float64) error {
	if o == nil {
		return nil
	}
	err := o.enc.Encode(familyLine{
		Seed: fi.ix.Seed, Strategy: r.strategy, Description: fi.ix.String(), Index: fi.ix, Scale: scale,
		StartPerSecond: fi.start, StartBatch: fi.batch, Records: fi.records,
		IdealSeconds: fi.ideal.Seconds(), StopSeconds: fi.deadline.Seconds(),
		Efficiency: r.efficiency, ElapsedSeconds: r.elapsed.Seconds(), Stopped: r.stopped,
		Landed: r.landed, Reported: r.reported, Lost: r.lost,
		Requests: r.requests, RateLimited: r.rateLimited, RateLimitedShare: r.rateLimitedShare(),
		ClientRequests: r.calls.requests, P50Millis: millis(r.calls.p50), P99Millis: millis(r.calls.p99),
	})
	if err != nil {
		return err
	}
	return o.buf.Flush()
}

// close closes the file.
func (o *familyOut) close() error {
	if o == nil {
		return nil
	}
	if err := o.buf.Flush(); err != nil {
		o.f.Close()
		return err
	}
	return o.f.Close()
}

// millis writes d in milliseconds.
func millis(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
