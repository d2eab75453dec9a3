package upsert

import (
	"math"
	"time"
)

// maxWave is the largest starting concurrency whose first wave is judged.
const maxWave = 8

// firstWave is what the lane's first requests tell of the index: the
// tuning.startConcurrency requests admitted first, all sent before any was
// answered. An index that serves one request at a time answers them in the
// order sent, each a service time after the one before, so the last takes
// as many times the first's latency as there were requests; an index that
// serves them in parallel answers them within its jitter of each other, in
// any order. It is a pure record: no lock, no clock.
type firstWave struct {
	latency  [maxWave]time.Duration // by admission number, the first at 0
	answered int
	over     bool // judged, or broken by an answer that cannot be compared
}

// add takes an answer and returns the slots the wave shows once its last
// request is answered, or 0: the wave is still out, was broken, or was not
// served one at a time. A failure, a partial batch, or an answer that came
// before every request of the wave was sent breaks it.
func (w *firstWave) add(s concSample, t *tuning) int {
	c := t.startConcurrency
	switch {
	case w.over || s.seq == 0 || s.seq > uint64(c):
		return 0
	case c < 2 || c > maxWave || s.class != 0 || !s.full || s.issued < uint64(c):
		w.over = true
		return 0
	}
	w.latency[s.seq-1] = s.latency
	if w.answered++; w.answered < c {
		return 0
	}
	w.over = true
	return w.serial(c, t)
}

// serial returns the slots of an index that answered the wave one after
// another in the order sent, each at least tuning.serialGap of the first's
// latency after the one before: the wave's size times the first's latency
// over the last's (one for a single slot). It returns 0 otherwise.
func (w *firstWave) serial(c int, t *tuning) int {
	l := w.latency[:c]
	for i := 1; i < c; i++ {
		if float64(l[i]-l[i-1]) < t.serialGap*float64(l[0]) {
			return 0
		}
	}
	return max(1, int(math.Round(float64(c)*float64(l[0])/float64(l[c-1]))))
}
