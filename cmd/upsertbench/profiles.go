package main

import (
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/pinecone-io/go-pinecone/v5/pinecone"
	"google.golang.org/grpc/codes"

	"github.com/upsertlib/upsert/upserttest"
)

// Every profile writes into this namespace of a fresh server.
const namespace = "bench"

// dimension is the number of dense values of every record, unless a
// profile says otherwise.
const dimension = 16

// A profile is one simulated index and the load a benchmark run sends to it.
type profile struct {
	name string
	// server describes the server options, for the header.
	server string
	// options configure the server; upserttest.Serverless() comes first.
	options []upserttest.Option
	// records is the number of records each client writes, at scale 1.
	records int
	// clients is the number of clients started together, each with its
	// own index connection and its own records (1 but for "shared" and "crowd").
	clients int
	// timeout is the client request timeout that every strategy uses, or
	// 0 to let each strategy use its own default.
	timeout time.Duration
	// capacity is C, what the index accepts in the long run, in vectors
	// per second, for all clients together.
	capacity float64
	// burst is B, the vectors admitted beyond the rate at the start.
	burst int
	// why explains C and B, for the header.
	why string
	// dimension is the number of dense values of each record; 0 means
	// the package's dimension.
	dimension int
	// index, for an index of the family (family.go), is the drawn index:
	// its options are the whole server, and its ideal time replaces
	// capacity and burst.
	index *upserttest.Index
}

// profiles returns every profile, in the order the benchmark runs them.
//
// The capacity C of each one follows from its server options, together with
// Serverless (100 requests/s and 50 MB/s per namespace, MB read as 10^6 bytes) and Pinecone's
// 1000 vectors per request:
//
//	C = min(vector rate, 100 req/s × 1000, slots × 1000 / write latency of 1000)
//
// The byte rate binds only in wide: a record of 16 dimensions encodes to
// about 80 bytes, so 50 MB/s is some 625k vectors/s; one of 1536 to 6160
// bytes, so it is 8117 vectors/s. B is the burst of the binding admission
// bucket, in vectors.
func profiles() []profile {
	fast := fastIndex()
	return []profile{{
		name:     "fast",
		server:   "latency 2ms+20µs/vector, rate 20000 vectors/s burst 5000",
		options:  fast,
		records:  600_000,
		clients:  1,
		capacity: 20000, // the vector rate
		burst:    5000,  // the vector bucket's burst
		why:      "C = vector rate; B = its burst",
	}, {
		name:   "slow",
		server: "latency 50ms+500µs/vector, 64 write slots, no vector rate",
		options: []upserttest.Option{
			upserttest.WithLatency(50*time.Millisecond, 500*time.Microsecond),
			upserttest.WithSlots(64),
		},
		records: 1_500_000,
		clients: 1,
		// min(100 req/s × 1000, 64 slots × 1000 / (50ms + 1000×0.5ms)) =
		// min(100000, 116364).
		capacity: 100000,
		// 0 rather than the request bucket's 100 requests × 1000: the
		// slots (116 req/s) absorb that burst only ~6 s into the run,
		// so counting it would make the ideal time unreachable at small
		// scales. At scale 1 the best possible efficiency is thus ~1.07.
		burst: 0,
		why:   "C = min(100 req/s × 1000, 64 × 1000 / 550ms) = 100000; B = 0 (see note)",
	}, {
		name:   "timeouts",
		server: "latency 20ms+100µs/vector ×20 above 300 vectors, rate 20000 burst 5000",
		options: []upserttest.Option{
			upserttest.WithLatency(20*time.Millisecond, 100*time.Microsecond),
			upserttest.WithSlowAbove(300, 20),
			upserttest.WithRate(20000, 5000),
		},
		records: 600_000,
		clients: 1,
		timeout: 2 * time.Second,
		// Batches of up to 300 take 50 ms, and 100 req/s × 300 = 30000
		// exceeds the vector rate.
		capacity: 20000,
		burst:    5000,
		why:      "C = vector rate (batches ≤ 300 suffice); B = its burst",
	}, {
		name:     "tight",
		server:   "latency 2ms+20µs/vector, rate 3000 vectors/s burst 750",
		options:  tightIndex(),
		records:  90_000,
		clients:  1,
		capacity: 3000,
		burst:    750,
		why:      "C = vector rate; B = its burst",
	}, {
		name:   "outage",
		server: "as fast, plus 1 s of Unavailable every 4 s (from 3 s to 4 s, 7 s to 8 s, …)",
		options: slices.Concat(fast, []upserttest.Option{
			upserttest.WithFaults(upserttest.Outage(4*time.Second, time.Second, codes.Unavailable)),
		}),
		records:  450_000,
		clients:  1,
		capacity: 20000 * 0.75, // the vector rate, 3 s out of 4
		burst:    5000,
		why:      "C = 20000 × 3/4 available; B = the vector burst",
	}, {
		// An index whose bucket holds little more than one batch of the
		// start size: where the start of a run shows most.
		name:     "tiny",
		server:   "latency 5ms+50µs/vector, rate 500 vectors/s burst 125",
		options:  []upserttest.Option{upserttest.WithLatency(5*time.Millisecond, 50*time.Microsecond), upserttest.WithRate(500, 125)},
		records:  15_000,
		clients:  1,
		capacity: 500,
		burst:    125,
		why:      "C = vector rate; B = its burst",
	}, {
		// Embeddings as most users write them (1536 dimensions, as
		// OpenAI's text-embedding-3-small), where Pinecone's 50 MB/s per
		// namespace is the only limit: 2 MB requests carry at most 340.
		name:      "wide",
		server:    "1536 dimensions, latency 5ms+20µs/vector, Serverless limits only",
		options:   []upserttest.Option{upserttest.WithLatency(5*time.Millisecond, 20*time.Microsecond)},
		records:   100_000,
		clients:   1,
		capacity:  wideCapacity,
		burst:     50_000_000 / 6160,
		why:       "C = 50 MB/s ÷ 6160 bytes a record; B = its burst (1 s)",
		dimension: 1536,
	}, {
		name:    "flaky",
		server:  "as fast, plus 3% of requests answered 429 whatever the rate",
		options: slices.Concat(fast, []upserttest.Option{upserttest.WithFaults(upserttest.ErrorRate(codes.ResourceExhausted, 0.03, 1))}),
		records: 600_000,
		clients: 1,
		// The refused requests are retried, so the vector rate is still
		// what the index accepts in the long run.
		capacity: 20000,
		burst:    5000,
		why:      "C = vector rate (random 429s are retried); B = its burst",
	}, {
		name:     "shared",
		server:   "as fast, one namespace shared by 4 clients started together",
		options:  fast,
		records:  150_000,
		clients:  4,
		capacity: 20000, // for all clients together
		burst:    5000,
		why:      "C = vector rate, for all 4 clients; B = its burst",
	}, {
		// More writers than the namespace's 100 requests/s allow at 20
		// requests/s each: they must learn to send fewer, larger ones.
		name:     "crowd",
		server:   "as fast, one namespace shared by 8 clients started together",
		options:  fast,
		records:  75_000,
		clients:  8,
		capacity: 20000, // for all clients together
		burst:    5000,
		why:      "C = vector rate, for all 8 clients; B = its burst",
	}}
}

// fastIndex is the server of the fast profile, which others build on:
// 2 ms + 20 µs a vector, 20k vectors/s with a burst of 5000.
func fastIndex() []upserttest.Option {
	return []upserttest.Option{
		upserttest.WithLatency(2*time.Millisecond, 20*time.Microsecond),
		upserttest.WithRate(20000, 5000),
	}
}

// tightIndex is the server of the tight profile: as fast, at 3k vectors/s
// with a burst of 750.
func tightIndex() []upserttest.Option {
	return []upserttest.Option{
		upserttest.WithLatency(2*time.Millisecond, 20*time.Microsecond),
		upserttest.WithRate(3000, 750),
	}
}

// extraProfiles returns profiles that run only when named with -profiles:
// indexes nobody tuned the library for, measured in BENCHMARKS.md.
func extraProfiles() []profile {
	return []profile{{
		name:     "hilat",
		server:   "latency 300ms, 64 write slots, rate 20000 vectors/s burst 20000",
		options:  []upserttest.Option{upserttest.WithLatency(300*time.Millisecond, 0), upserttest.WithSlots(64), upserttest.WithRate(20000, 20000)},
		records:  600_000,
		clients:  1,
		capacity: 20000,
		burst:    20000,
		why:      "C = vector rate; B = its burst",
	}, {
		name:     "slowtight",
		server:   "latency 100ms+100µs/vector, 16 write slots, rate 5000 vectors/s burst 1250",
		options:  []upserttest.Option{upserttest.WithLatency(100*time.Millisecond, 100*time.Microsecond), upserttest.WithSlots(16), upserttest.WithRate(5000, 1250)},
		records:  150_000,
		clients:  1,
		capacity: 5000,
		burst:    1250,
		why:      "C = vector rate; B = its burst",
	}, {
		name:     "mid",
		server:   "latency 10ms+10µs/vector, rate 8000 vectors/s burst 2000",
		options:  []upserttest.Option{upserttest.WithLatency(10*time.Millisecond, 10*time.Microsecond), upserttest.WithRate(8000, 2000)},
		records:  240_000,
		clients:  1,
		capacity: 8000,
		burst:    2000,
		why:      "C = vector rate; B = its burst",
	}, {
		name:     "big",
		server:   "latency 5ms+10µs/vector, rate 80000 vectors/s burst 20000",
		options:  []upserttest.Option{upserttest.WithLatency(5*time.Millisecond, 10*time.Microsecond), upserttest.WithRate(80000, 20000)},
		records:  2_400_000,
		clients:  1,
		capacity: 80000,
		burst:    20000,
		why:      "C = vector rate; B = its burst",
	}, {
		name:     "slowshared",
		server:   "latency 40ms+50µs/vector, rate 10000 vectors/s burst 2500, 2 clients",
		options:  []upserttest.Option{upserttest.WithLatency(40*time.Millisecond, 50*time.Microsecond), upserttest.WithRate(10000, 2500)},
		records:  150_000,
		clients:  2,
		capacity: 10000,
		burst:    2500,
		why:      "C = vector rate, for both clients; B = its burst",
	}, {
		name:     "tightshared",
		server:   "as tight, 2 clients",
		options:  tightIndex(),
		records:  45_000,
		clients:  2,
		capacity: 3000,
		burst:    750,
		why:      "C = vector rate, for both clients; B = its burst",
	}, {
		name:     "slotted",
		server:   "latency 20ms+100µs/vector, 8 write slots, rate 30000 vectors/s burst 7500",
		options:  []upserttest.Option{upserttest.WithLatency(20*time.Millisecond, 100*time.Microsecond), upserttest.WithSlots(8), upserttest.WithRate(30000, 7500)},
		records:  600_000,
		clients:  1,
		capacity: 30000,
		burst:    7500,
		why:      "C = vector rate (8 slots take 66k/s of 1000-vector batches); B = its burst",
	}, {
		name:      "widelow",
		server:    "1536 dimensions, latency 10ms+50µs/vector, rate 1000 vectors/s burst 1000",
		options:   []upserttest.Option{upserttest.WithLatency(10*time.Millisecond, 50*time.Microsecond), upserttest.WithRate(1000, 1000)},
		records:   30_000,
		clients:   1,
		capacity:  1000,
		burst:     1000,
		why:       "C = vector rate; B = its burst",
		dimension: 1536,
	}, {
		name:     "bigburst",
		server:   "latency 5ms+10µs/vector, rate 2000 vectors/s burst 30000",
		options:  []upserttest.Option{upserttest.WithLatency(5*time.Millisecond, 10*time.Microsecond), upserttest.WithRate(2000, 30000)},
		records:  90_000,
		clients:  1,
		capacity: 2000,
		burst:    30000,
		why:      "C = vector rate; B = its burst (15 s of it)",
	}, {
		name:   "longoutage",
		server: "as fast, plus 5 s of Unavailable every 15 s (from 10 s to 15 s, …)",
		options: slices.Concat(fastIndex(), []upserttest.Option{
			upserttest.WithFaults(upserttest.Outage(15*time.Second, 5*time.Second, codes.Unavailable)),
		}),
		records:  400_000,
		clients:  1,
		capacity: 20000 * 2 / 3.0,
		burst:    5000,
		why:      "C = 20000 × 2/3 available; B = the vector burst",
	}}
}

// serverOptions returns the options of a fresh server for p.
func (p profile) serverOptions() []upserttest.Option {
	if p.index != nil {
		return p.index.Options()
	}
	return append([]upserttest.Option{upserttest.Serverless()}, p.options...)
}

// recordsPerClient is the number of records each client writes at scale.
func (p profile) recordsPerClient(scale float64) int {
	return max(1, int(math.Round(float64(p.records)*scale)))
}

// idealTime is how long writing n records takes at best: the burst is
// admitted at once and the rest at the capacity; for an index of the
// family, its IdealTime.
func (p profile) idealTime(n int) time.Duration {
	if p.index != nil {
		return p.index.IdealTime(n, p.timeout)
	}
	return time.Duration(float64(max(0, n-p.burst)) / p.capacity * float64(time.Second))
}

// wideCapacity is the byte limit of Serverless in records of 1536
// dimensions with ids of 8 characters: 6160 bytes each in an
// UpsertRequest, under the 50,000,000 bytes a second that
// upserttest.Serverless() enforces.
const wideCapacity = 50e6 / 6160.0

// makeRecords returns n records of the given dimension without metadata,
// with ids "r0000001", "r0000002", … counted from first+1.
func makeRecords(first, n, dimension int) []*pinecone.Vector {
	values := make([]float32, n*dimension)
	slices := make([][]float32, n)
	vectors := make([]pinecone.Vector, n)
	records := make([]*pinecone.Vector, n)
	for i := range records {
		v := values[i*dimension : (i+1)*dimension : (i+1)*dimension]
		for j := range v {
			v[j] = float32((first+i)%1000)/1000 + float32(j)
		}
		slices[i] = v
		vectors[i] = pinecone.Vector{Id: fmt.Sprintf("r%07d", first+i+1), Values: &slices[i]}
		records[i] = &vectors[i]
	}
	return records
}
