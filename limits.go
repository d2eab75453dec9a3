package upsert

import "math"

// IndexLimits are the write limits an index is known to have per
// namespace, which the [Limiter] starts from instead of finding them by
// 429s. They are a prior, not a ceiling: a lane starts a tenth above
// them (to take in the burst the index's buckets allow) and, when a limit
// holds requests back with no 429, probes above it as it does above any
// level it measured, so that an index whose limits were raised, or that
// has none, still reaches its capacity. A zero field means no known limit:
// it is found by 429s, like a limit of records per second always is.
type IndexLimits struct {
	// RequestsPerSecond is the most upsert requests a second per
	// namespace.
	RequestsPerSecond float64
	// BytesPerSecond is the most bytes of upsert requests a second per
	// namespace (as encoded on the wire).
	BytesPerSecond float64
}

// ServerlessLimits are the limits of every Pinecone serverless index, per
// namespace (docs.pinecone.io, "Database limits"): 100 upsert requests and
// 50 MB of upserts a second. The documentation gives no unit beyond "MB";
// it is read as 10^6 bytes, the lower reading. They are the default of a
// run given [WithIndex].
var ServerlessLimits = IndexLimits{RequestsPerSecond: 100, BytesPerSecond: 50e6}

// WithIndexLimits sets the limits the Limiter starts from, for the
// namespaces it has not seen yet (a Limiter shared between calls keeps
// what its lanes learned). The default is [ServerlessLimits] with
// [WithIndex], and no known limits with [WithUpsertFunc] or
// [WithRecordsFunc]; IndexLimits{} (the zero value) means none are known,
// as for a pod-based index. A limit under the least rate the Limiter ever
// sets (1 request, 10 kB a second) starts at that rate. A negative, NaN or
// infinite field is an error ([ErrBadOption]).
func WithIndexLimits(l IndexLimits) Option {
	return func(c *config) {
		for _, v := range []float64{l.RequestsPerSecond, l.BytesPerSecond} {
			if v < 0 || math.IsNaN(v) || math.IsInf(v, 0) {
				c.bad("WithIndexLimits(%+v): each limit must be a finite number, 0 or more", l)
				return
			}
		}
		c.limits = &l
	}
}

// indexLimits returns the limits a run's lanes start from.
func (c *config) indexLimits() IndexLimits {
	switch {
	case c.limits != nil:
		return *c.limits
	case c.index != nil:
		return ServerlessLimits
	default:
		return IndexLimits{}
	}
}
