package upserttest

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"time"
)

// This file holds the capacity changes of a Server (WithCapacityChange).
// The admission buckets run on a clock of their own that passes factor
// times faster than the server's after a change: a bucket then refills at
// factor times its rate, keeping the tokens it holds at the change.

// A CapacityChange sets, from At after [NewServer] on, the rates of the
// admission buckets to Factor times the configured ones (see
// [WithCapacityChange]).
type CapacityChange struct {
	// At is the time of the change, counted from NewServer on the
	// server's clock, like [Request.Elapsed].
	At time.Duration
	// Factor multiplies the configured rates; it is positive.
	Factor float64
}

// WithCapacityChange changes the index's capacity at the time at after
// NewServer (on the server's clock, [WithClock], as [Request.Elapsed]
// counts it; Restart and Reset do not move it): from then on, until a
// later change, every admission bucket that measures the index refills at
// factor times its configured rate. These are the vectors, bytes and
// requests per second of each namespace ([WithRate], [WithByteRate],
// [WithRequestRate], [Serverless]) and the write units per second of the
// index ([WithWriteUnitRate]); not the embedding tokens per minute
// ([WithEmbedTokensPerMinute]), which are the project's, nor the slots or
// the latency. factor is relative to the configured rates, not to an
// earlier change: WithCapacityChange(2*time.Second, 0.25) followed by
// WithCapacityChange(5*time.Second, 1) is a drop to a quarter from 2 s to
// 5 s.
//
// The bursts do not change, and a bucket keeps the tokens it holds at the
// change: after a drop, the tokens saved up still pass at once, and
// then the bucket refills at the lower rate.
//
// Several changes may be given, in any order; of two at the same time,
// the last given wins. WithCapacityChange panics if at is negative or
// factor is not a positive finite number (a factor of 0 would be an
// outage: see [Outage]).
func WithCapacityChange(at time.Duration, factor float64) Option {
	if at < 0 || !(factor > 0) || math.IsInf(factor, 0) {
		panic(fmt.Sprintf("upserttest: WithCapacityChange(%v, %v): need at ≥ 0 and a positive finite factor", at, factor))
	}
	return func(c *config) {
		c.changes = slices.DeleteFunc(c.changes, func(ch CapacityChange) bool { return ch.At == at })
		i, _ := slices.BinarySearchFunc(c.changes, at, func(ch CapacityChange, at time.Duration) int {
			return cmp.Compare(ch.At, at)
		})
		c.changes = slices.Insert(c.changes, i, CapacityChange{At: at, Factor: factor})
	}
}

// bucketTime is the time, on the clock of the admission buckets that
// capacity changes scale, of the server's time now: the server's time
// until the first change, then passing at each change's factor from its
// time on. start is the server's start.
func (c *config) bucketTime(start, now time.Time) time.Time {
	elapsed := now.Sub(start)
	if len(c.changes) == 0 || elapsed <= c.changes[0].At {
		return now
	}
	var virtual float64 // nanoseconds of bucket time since start
	from, factor := time.Duration(0), 1.0
	for _, ch := range c.changes {
		if elapsed <= ch.At {
			break
		}
		virtual += float64(ch.At-from) * factor
		from, factor = ch.At, ch.Factor
	}
	virtual += float64(elapsed-from) * factor
	return start.Add(time.Duration(virtual))
}

// factorAt is the factor of the capacity change in force at elapsed, 1
// before the first.
func (c *config) factorAt(elapsed time.Duration) float64 {
	f := 1.0
	for _, ch := range c.changes {
		if elapsed < ch.At {
			break
		}
		f = ch.Factor
	}
	return f
}
