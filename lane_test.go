package upsert

import (
	"context"
	"time"
)

// capAt puts ln in the state of a lane that measured the index at r
// records/s at clk's time, out of slow start.
func capAt(ln *lane, clk *fakeClock, r float64) {
	ln.mu.Lock()
	defer ln.mu.Unlock()
	now := clk.Now()
	c := &ln.dims[dimRecords].ctl
	c.level, c.limit, c.depth = r, r, 0
	c.cutAt, c.followed, c.origin = now, now, now
	ln.dims[dimRecords].apply(now, ln.tuning)
	ln.conc.slowStart, ln.batch.slowStart = false, false
}

// cutTo cuts ln's record rate to r at now, as an episode would.
func (ln *lane) cutTo(now time.Time, r float64) {
	c := &ln.dims[dimRecords].ctl
	c.level, c.limit, c.depth = r, r, 0
	c.cutAt, c.followed, c.origin, c.cutSeq = now, now, now, ln.issued
	ln.cuts++
	ln.signals.rates.fire()
	ln.dims[dimRecords].apply(now, ln.tuning)
}

// cuttingClock halves the lane's rate during the first sleep, as a 429
// would while a goroutine waits on its reservation.
type cuttingClock struct {
	*fakeClock
	ln  *lane
	cut bool
}

func (c *cuttingClock) Sleep(ctx context.Context, d time.Duration) error {
	if !c.cut {
		c.cut = true
		c.ln.mu.Lock()
		c.ln.cutTo(c.fakeClock.Now(), c.ln.dims[dimRecords].ctl.limit/2)
		c.ln.mu.Unlock()
		// The cut closed the head's wake channel; let its watcher cancel
		// the sleep's context before sleeping.
		<-ctx.Done()
	}
	return c.fakeClock.Sleep(ctx, d)
}
