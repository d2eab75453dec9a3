package upserttest

import (
	"fmt"
	"math"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
)

// This file holds Index, one simulated index with a run of records to
// write into it, as DrawIndex draws them (familydraw.go): what it is, its
// server's options and its description.

// An Index describes a simulated index, a server's capacity model and
// faults, and a run: how many records to write into it, of which
// dimension. [DrawIndex] draws one from a seed; an Index can also be
// written by hand. Its server is NewServer(ix.Options()...), and
// [Index.IdealTime] says how long a client that knew it would need for the
// run, so that ideal ÷ actual time means the same on every index.
//
// The zero values mean "none": no vector rate, no per-record latency, no
// slots limit, and so on.
type Index struct {
	// Seed is the seed DrawIndex drew the index from; it also seeds the
	// jitter and the random 429s.
	Seed uint64
	// Records is the number of records of the run, each with an id of 8
	// characters and Dimension dense values (see [Index.RecordBytes]),
	// written into Namespace ("" is the SDK's default namespace).
	Records, Dimension int
	Namespace          string
	// VectorRate, in records per second, and VectorBurst, in records, are
	// the namespace's vector bucket ([WithRate]); 0: none.
	VectorRate  float64
	VectorBurst int
	// Latency + PerRecord × n + PerMiB × MiB is the mean write latency of
	// a request of n records ([WithLatency], [WithByteLatency]), times
	// SlowFactor above SlowAbove records ([WithSlowAbove]; SlowAbove 0:
	// never), times a lognormal jitter of σ = Jitter and mean 1
	// ([WithLatencyJitter]).
	Latency, PerRecord, PerMiB time.Duration
	SlowAbove                  int
	SlowFactor                 float64
	Jitter                     float64
	// Slots is the namespace's write slots ([WithSlots]); 0: unlimited.
	Slots int
	// Changes are the capacity changes of the run ([WithCapacityChange]),
	// by time.
	Changes []CapacityChange
	// OutageLength of every OutageEvery is answered codes.Unavailable
	// ([Outage]); 0: no outages.
	OutageEvery, OutageLength time.Duration
	// RandomRateLimited is the share of requests answered 429, with the
	// message of the upsert size per second, whatever the load
	// ([ErrorRate]).
	RandomRateLimited float64
	// PineconeLimits multiplies the per-namespace limits of [Serverless]
	// (100 requests and 50 MB per second): 1 for a serverless index, more
	// where they were raised, 0 for none (a pod-based index).
	PineconeLimits float64
}

// Options returns the options of a server that simulates ix: the
// dimension, the latency and its jitter, the vector rate, the Pinecone
// limits, the slots, the capacity changes, and a fault script for the
// outages and the random 429s.
func (ix Index) Options() []Option {
	opts := []Option{WithDimension(ix.Dimension), WithLatency(ix.Latency, ix.PerRecord)}
	if ix.PerMiB > 0 {
		opts = append(opts, WithByteLatency(ix.PerMiB))
	}
	if ix.SlowAbove > 0 {
		opts = append(opts, WithSlowAbove(ix.SlowAbove, ix.SlowFactor))
	}
	if ix.Jitter > 0 {
		opts = append(opts, WithLatencyJitter(ix.Jitter, int64(ix.Seed)))
	}
	if ix.VectorRate > 0 {
		opts = append(opts, WithRate(ix.VectorRate, ix.VectorBurst))
	}
	if f := ix.PineconeLimits; f > 0 {
		opts = append(opts, WithByteRate(50e6*f, 0), WithRequestRate(100*f, 0))
	}
	if ix.Slots > 0 {
		opts = append(opts, WithSlots(ix.Slots))
	}
	for _, ch := range ix.Changes {
		opts = append(opts, WithCapacityChange(ch.At, ch.Factor))
	}
	var faults []FaultFunc
	if ix.OutageEvery > 0 && ix.OutageLength > 0 {
		faults = append(faults, Outage(ix.OutageEvery, ix.OutageLength, codes.Unavailable))
		opts = append(opts, withStall(ix.OutageEvery, ix.OutageLength))
	}
	if ix.RandomRateLimited > 0 {
		faults = append(faults, ErrorRate(codes.ResourceExhausted, ix.RandomRateLimited, int64(ix.Seed)))
	}
	if len(faults) > 0 {
		opts = append(opts, WithFaults(Chain(faults...)))
	}
	return opts
}

// String describes ix on one line, every drawn parameter but the seed,
// such as
//
//	120k records of 384 dims; 8.20k/s burst 4.10k; 12ms+3µs/rec+20ms/MiB σ0.40; ×5.0 above 200;
//	16 slots; capacity ×0.50 at 3.2s; outage 0.8s every 6s; 2.1% random 429s; serverless limits
func (ix Index) String() string {
	parts := []string{fmt.Sprintf("%s records of %d dims", si(float64(ix.Records)), ix.Dimension)}
	if ix.VectorRate > 0 {
		parts = append(parts, fmt.Sprintf("%s/s burst %s", si(ix.VectorRate), si(float64(ix.VectorBurst))))
	} else {
		parts = append(parts, "no vector rate")
	}
	latency := ix.Latency.String()
	if ix.PerRecord > 0 {
		latency += "+" + ix.PerRecord.String() + "/rec"
	}
	if ix.PerMiB > 0 {
		latency += "+" + ix.PerMiB.Round(time.Microsecond).String() + "/MiB"
	}
	parts = append(parts, fmt.Sprintf("%s σ%.2f", latency, ix.Jitter))
	if ix.SlowAbove > 0 {
		parts = append(parts, fmt.Sprintf("×%.1f above %d", ix.SlowFactor, ix.SlowAbove))
	}
	if ix.Slots > 0 {
		parts = append(parts, plural(ix.Slots, "slot"))
	} else {
		parts = append(parts, "unlimited slots")
	}
	for _, ch := range ix.Changes {
		parts = append(parts, fmt.Sprintf("capacity ×%.2f at %v", ch.Factor, ch.At.Round(100*time.Millisecond)))
	}
	if ix.OutageEvery > 0 && ix.OutageLength > 0 {
		parts = append(parts, fmt.Sprintf("outage %v every %v", ix.OutageLength.Round(10*time.Millisecond), ix.OutageEvery.Round(100*time.Millisecond)))
	}
	if ix.RandomRateLimited > 0 {
		parts = append(parts, fmt.Sprintf("%.1f%% random 429s", 100*ix.RandomRateLimited))
	}
	switch f := ix.PineconeLimits; {
	case f == 1:
		parts = append(parts, "serverless limits")
	case f > 0:
		parts = append(parts, fmt.Sprintf("serverless limits ×%.1f", f))
	default:
		parts = append(parts, "no Pinecone limits")
	}
	return strings.Join(parts, "; ")
}

// si writes x with three significant digits and a k or M suffix.
func si(x float64) string {
	switch {
	case x >= 1e6:
		return threeDigits(x/1e6) + "M"
	case x >= 1e3:
		return threeDigits(x/1e3) + "k"
	default:
		return threeDigits(x)
	}
}

func threeDigits(x float64) string {
	digits := max(0, 2-int(math.Floor(math.Log10(math.Max(x, 1)))))
	return fmt.Sprintf("%.*f", digits, x)
}

// plural writes n and the noun, with an s unless n is 1.
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
