package upsert

import (
	"slices"
	"time"

	"github.com/pinecone-io/go-pinecone/v5/pinecone"
)

// Stale is a record that landed while a request carrying an earlier record
// of its id, in its namespace, had ended without an answer (a timeout, a
// server error): the index may still apply that request after this record
// and keep the earlier one. No wait makes that impossible (nothing bounds
// how late an index applies a request whose client gave up), so the run
// reports it instead of resending: upsert the record again, or check what
// the index holds, once the index is quiet. Only [Stream], [Records] and
// [Writer] send several records of one id; [All] sends the last one only.
//
// A run remembers a request without an answer for 10 to 20 minutes: a
// request the index has not applied that long after its client gave up is
// taken as dropped (gRPC servers drop requests past their deadline), so a
// later record of its id, in a long-lived Writer, lands as a plain success.
//
// Only the run's own requests count: one that an earlier run or another
// process left without an answer (a consumer that crashed, restarted and
// reads its records again) can also be applied after this run's record of
// its id, and no run sees it. A consumer that restarts within a request's
// life on the index rechecks the ids it reads again.
type Stale struct {
	// Index is the record's position in the input.
	Index int
	// ID is the record's id.
	ID string
	// Namespace is the record's namespace, as routed (see
	// [WithNamespaceOf]), "" for the default one ("__default__"): where
	// to upsert it again.
	Namespace string
	// Record is the record as taken (a copy), to upsert again; Integrated
	// for [Records].
	Record     *pinecone.Vector
	Integrated *pinecone.IntegratedRecord
	// Earlier is the position of the earlier record whose request ended
	// without an answer.
	Earlier int
}

// staleWindow is how long a run remembers the ids of records whose request
// ended without an answer: a request the index has not applied ten minutes
// after its client gave up is taken as dropped (gRPC servers drop requests
// past their deadline), which bounds what a long-lived Writer keeps.
const staleWindow = 10 * time.Minute

// ambiguousIDs remembers, by hash of namespace and id, the position of the
// last record that settled after a request that ended without an answer,
// for between one and two windows: two generations of maps, the older
// dropped when the newer is a window old.
type ambiguousIDs struct {
	cur, prev map[uint64]int
	since     time.Time // when cur started
}

// rotate brings the generations to now. Each generation spans one window
// from its start, and the next one starts where it ends, however late the
// rotating call comes: an entry added in cur is dropped at most two windows
// after it was added, also in a Writer quiet for a while.
func (a *ambiguousIDs) rotate(now time.Time) {
	if a.cur != nil {
		switch age := now.Sub(a.since); {
		case age >= 2*staleWindow:
			a.prev, a.cur = nil, nil // both generations are past their window
		case age >= staleWindow:
			a.prev, a.cur = a.cur, make(map[uint64]int)
			a.since = a.since.Add(staleWindow) // where the old window ended
		}
	}
	if a.cur == nil {
		a.cur, a.since = make(map[uint64]int), now
	}
}

// add remembers that the record at pos, of hash h, settled after a request
// that ended without an answer.
func (a *ambiguousIDs) add(now time.Time, h uint64, pos int) {
	a.rotate(now)
	a.cur[h] = pos
}

// lookup returns the position of the last such record of hash h.
func (a *ambiguousIDs) lookup(now time.Time, h uint64) (pos int, ok bool) {
	if a.cur == nil {
		return 0, false
	}
	a.rotate(now)
	if pos, ok = a.cur[h]; ok {
		return pos, true
	}
	pos, ok = a.prev[h]
	return pos, ok
}

// reportStale records records that landed while an earlier record of
// their id may still be applied after them.
func (r *run) reportStale(stale []Stale) {
	if len(stale) == 0 {
		return
	}
	r.stats.mayBeStale.Add(int64(len(stale)))
	for _, s := range stale {
		r.cfg.observers.stale(s)
	}
	res := &r.results
	res.mu.Lock()
	defer res.mu.Unlock()
	if res.keepFailed >= 0 {
		stale = stale[:max(0, min(len(stale), res.keepFailed-len(res.stale)))]
	}
	res.stale = append(res.stale, stale...)
}

// sortedStale returns the stale records in input order.
func (r *run) sortedStale() []Stale {
	slices.SortFunc(r.results.stale, func(a, b Stale) int { return a.Index - b.Index })
	return r.results.stale
}
