package upsert

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/upsertlib/upsert/internal/histogram"
)

// Stats are a run's figures: what happened to the records, and what it
// took in requests. [Result] holds the final ones, [Progress] live ones.
type Stats struct {
	// Records is how many records the run was given so far.
	Records int
	// Skipped is how many records at the start of a stream's input were
	// skipped because the checkpoint says an earlier run settled them.
	Skipped int
	// Upserted, Failed and Duplicates settle the records: Upserted were
	// confirmed by the index, Failed were reported failed, Duplicates were
	// skipped for a later record with the same id.
	Upserted, Failed, Duplicates int
	// MayBeStale counts records that landed while an earlier record of
	// their id may still be applied after them (see [Stale]).
	MayBeStale int

	// Requests is how many upsert requests were made, retries included,
	// those that could not reach the index too.
	Requests int
	// Retries is how many times a failed batch was resent after a backoff
	// (whole, or cut to what the lane or the per-minute limits let a
	// request carry, counted once); RetriesByClass splits it by the class
	// of the failure.
	Retries        int
	RetriesByClass map[Class]int
	// Splits is how many failed batches were split in halves (timeouts,
	// too large, invalid bisection).
	Splits int
	// ErrorsByClass counts failed requests by class, ErrorsByCode by the
	// code the index answered ("429", "ResourceExhausted", "Unavailable",
	// ...; the class name when there was no code).
	ErrorsByClass map[Class]int
	ErrorsByCode  map[string]int
	// RetriesPerBatch[k] is how many batches needed k retries in all,
	// their halves included: a batch is what the intake formed, however
	// many requests its halves, and its pieces cut to the lane's size,
	// took. A batch none of whose requests was sent (the run stopped, or
	// the circuit breaker failed it unsent) is not counted.
	RetriesPerBatch []int

	// Latency describes the round trips of the requests.
	Latency LatencyStats
	// BatchSizes describes the records per request.
	BatchSizes BatchSizeStats
	// SharedFallbacks counts the times, during the run, that a lane of its
	// Limiter shared across processes (upsertredis) went on alone because
	// the shared state stopped answering, and SharedRejoins the times it
	// shared again. A Limiter shared by calls running at the same time
	// counts for all of them. Both are 0 without shared state.
	SharedFallbacks, SharedRejoins int

	// Limiter is the controller's state for the run's namespace when the
	// figures were taken; with WithNamespaceOf, for the connection's
	// namespace, which the run may not write to (each namespace has its
	// own state: [Limiter.State]).
	Limiter LimiterState
	// FailureSamples holds the first few failures, for a report.
	FailureSamples []Failure

	// Elapsed is the wall time since the run started.
	Elapsed time.Duration
}

// LatencyStats summarises request round trips; the percentiles are within
// about 3%.
type LatencyStats struct {
	Mean, P50, P95, P99, Max time.Duration
}

// BatchSizeStats summarises the records per request.
type BatchSizeStats struct {
	Mean     float64
	Min, Max int
}

// maxFailureSamples bounds Stats.FailureSamples.
const maxFailureSamples = 5

// counters are a run's statistics while it runs; every field is safe for
// concurrent use.
type counters struct {
	records, upserted, failed, duplicates atomic.Int64
	skipped, mayBeStale                   atomic.Int64
	requests, retries, splits             atomic.Int64
	sentRecords                           atomic.Int64
	minBatch, maxBatch                    atomic.Int64
	byClass                               [numClasses]classCounts
	latency                               histogram.Histogram

	mu              sync.Mutex
	errorsByCode    map[string]int
	retriesPerBatch []int
	samples         []Failure
	firstFailure    [numClasses]error // of each class, for the run's error
}

// classCounts are a run's counts of one class of error.
type classCounts struct {
	retries, errors, failed atomic.Int64
}

// request counts one request of n records and its outcome.
func (c *counters) request(n int, latency time.Duration, e *Error) {
	c.requests.Add(1)
	c.sentRecords.Add(int64(n))
	c.latency.Record(latency)
	for {
		m := c.minBatch.Load()
		if (m != 0 && int64(n) >= m) || c.minBatch.CompareAndSwap(m, int64(n)) {
			break
		}
	}
	for {
		m := c.maxBatch.Load()
		if int64(n) <= m || c.maxBatch.CompareAndSwap(m, int64(n)) {
			break
		}
	}
	if e == nil {
		return
	}
	c.byClass[e.Class].errors.Add(1)
	c.mu.Lock()
	if c.errorsByCode == nil {
		c.errorsByCode = make(map[string]int)
	}
	c.errorsByCode[e.Code()]++
	c.mu.Unlock()
}

func (c *counters) retry(class Class) {
	c.retries.Add(1)
	c.byClass[class].retries.Add(1)
}

func (c *counters) batchDone(retries int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for len(c.retriesPerBatch) <= retries {
		c.retriesPerBatch = append(c.retriesPerBatch, 0)
	}
	c.retriesPerBatch[retries]++
}

func (c *counters) fail(fs []Failure) {
	c.failed.Add(int64(len(fs)))
	c.mu.Lock()
	defer c.mu.Unlock()
	if n := maxFailureSamples - len(c.samples); n > 0 {
		c.samples = append(c.samples, fs[:min(n, len(fs))]...)
	}
	for _, f := range fs {
		c.byClass[f.Class].failed.Add(1)
		if c.firstFailure[f.Class] == nil {
			c.firstFailure[f.Class] = f.Err
		}
	}
}

// failMore counts n more failures of e's class beyond those given to fail.
func (c *counters) failMore(e *Error, n int) {
	c.failed.Add(int64(n))
	c.byClass[e.Class].failed.Add(int64(n))
}

// runError is the error of a run of total records, from every failure
// counted: a Result may keep only the first of them (WithObserver's
// Failure on a Stream or a Writer).
func (c *counters) runError(total int) *RunError {
	e := &RunError{Failed: int(c.failed.Load()), Total: total, ByClass: make(map[Class]int)}
	c.mu.Lock()
	defer c.mu.Unlock()
	for class := range c.byClass {
		if n := c.byClass[class].failed.Load(); n > 0 {
			e.ByClass[Class(class)] = int(n)
		}
		if err := c.firstFailure[class]; err != nil {
			e.Errs = append(e.Errs, err)
		}
	}
	return e
}

func (c *counters) snapshot() Stats {
	s := Stats{
		Records:        int(c.records.Load()),
		Skipped:        int(c.skipped.Load()),
		Upserted:       int(c.upserted.Load()),
		Failed:         int(c.failed.Load()),
		Duplicates:     int(c.duplicates.Load()),
		MayBeStale:     int(c.mayBeStale.Load()),
		Requests:       int(c.requests.Load()),
		Retries:        int(c.retries.Load()),
		Splits:         int(c.splits.Load()),
		RetriesByClass: make(map[Class]int),
		ErrorsByClass:  make(map[Class]int),
		ErrorsByCode:   make(map[string]int),
		Latency: LatencyStats{
			Mean: c.latency.Mean(),
			P50:  c.latency.Quantile(0.50),
			P95:  c.latency.Quantile(0.95),
			P99:  c.latency.Quantile(0.99),
			Max:  c.latency.Max(),
		},
		BatchSizes: BatchSizeStats{Min: int(c.minBatch.Load()), Max: int(c.maxBatch.Load())},
	}
	if s.Requests > 0 {
		s.BatchSizes.Mean = float64(c.sentRecords.Load()) / float64(s.Requests)
	}
	for _, cl := range Classes() {
		if n := c.byClass[cl].retries.Load(); n > 0 {
			s.RetriesByClass[cl] = int(n)
		}
		if n := c.byClass[cl].errors.Load(); n > 0 {
			s.ErrorsByClass[cl] = int(n)
		}
	}
	c.mu.Lock()
	for k, v := range c.errorsByCode {
		s.ErrorsByCode[k] = v
	}
	s.RetriesPerBatch = slices.Clone(c.retriesPerBatch)
	s.FailureSamples = slices.Clone(c.samples)
	c.mu.Unlock()
	return s
}
