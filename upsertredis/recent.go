package upsertredis

import "time"

// recentSpan is the span over which a member measures what the lane's
// writers got accepted lately (share.View.Recent): ten of its exchanges,
// so that the others' lag (up to one interval at each end) moves the
// count by a tenth at most.
const recentSpan = time.Second

// recentSamples bounds the samples kept: a few seconds of exchanges.
const recentSamples = 32

// recent keeps the lane's count of records accepted, as the member's
// exchanges saw it, to measure it over the last recentSpan.
type recent struct {
	at    [recentSamples]time.Time
	total [recentSamples]int64
	n     int // samples kept
	next  int // where the next goes
}

// add records the lane's count total (the state's "accepted") at at.
func (r *recent) add(at time.Time, total int64) {
	r.at[r.next], r.total[r.next] = at, total
	r.next = (r.next + 1) % recentSamples
	r.n = min(r.n+1, recentSamples)
}

// last returns the latest sample's count, and false before any.
func (r *recent) last() (int64, bool) {
	if r.n == 0 {
		return 0, false
	}
	return r.total[(r.next-1+recentSamples)%recentSamples], true
}

// restart moves the samples' counts to end at base, where the count
// started again (the state was created anew): they still measure what they
// saw, and the next counts add to it. What the writers reported between
// the latest sample and the restart was lost with the old count, so the
// measure comes out low rather than high (or negative) for a second.
func (r *recent) restart(base int64) {
	last, ok := r.last()
	if !ok {
		return
	}
	for i := range r.n {
		r.total[i] += base - last
	}
}

// over returns what was counted between the latest sample and the latest
// one at least span before it (the oldest, when none is), and the time
// between them; zero before two samples.
func (r *recent) over(span time.Duration) (int64, time.Duration) {
	if r.n < 2 {
		return 0, 0
	}
	last := (r.next - 1 + recentSamples) % recentSamples
	from := last
	for k := 1; k < r.n; k++ {
		from = (last - k + recentSamples) % recentSamples
		if r.at[last].Sub(r.at[from]) >= span {
			break
		}
	}
	return r.total[last] - r.total[from], r.at[last].Sub(r.at[from])
}
