package upsert

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/upsertlib/upsert/internal/share"
)

// A run given a share.Store (through upsertredis.Shared, the only way in:
// the option is registered with internal/share instead of exported, so
// that the core package's API names no store) shares each lane of its
// Limiter with the writers of the same index host and namespace in other
// processes. lane_share.go holds the mechanism.
func init() {
	share.RegisterOption(func(s share.Store) any {
		return Option(func(c *config) {
			if s == nil {
				c.bad("upsertredis: nil store")
				return
			}
			c.store = s
		})
	})
}

// shareCounters count a Limiter's lanes going on alone because the shared
// state stopped answering, and coming back. Runs report the difference
// over their span in Stats.
type shareCounters struct {
	fallbacks, rejoins atomic.Int64
}

// runShares is a run's memberships of shared lanes: one per lane its
// routes send through, ended when the route is dropped as idle
// (leaveDropped) or, for those still held, when the run ends
// (leaveShares). A stream over ever new namespaces thus holds as many as
// it holds routes, not one per namespace it ever wrote: each is a watcher
// goroutine and an exchange with the store every interval.
type runShares struct {
	mu   sync.Mutex
	host string // the index's host; "" when the run has none to share
	// held is the run's membership of each lane, by lane: a run joins a
	// lane once, and a route made again for a lane whose membership is
	// still held takes it back.
	held map[*lane]*membership
	// left is closed when the background leaves of the memberships
	// dropped last, and of all dropped before (each waits for the one
	// before), are done; nil before the first.
	left chan struct{}
	// fallbacks and rejoins of the Limiter's lanes when the run started.
	fallbacks, rejoins int64
}

// membership is a run's membership of one lane.
type membership struct {
	leave   func() // lane.joinShare's: it may be called more than once
	dropped bool   // its route was dropped: to be left, unless a route takes it back first
}

// start notes the run's index host and the Limiter's counts at its start.
func (s *runShares) start(cfg *config) {
	if cfg.store == nil {
		return
	}
	s.host = cfg.shareHost // only tests share lanes without an index
	if cfg.index != nil {
		s.host = indexHost(cfg.index)
	}
	c := &cfg.limiter.shareStats
	s.fallbacks, s.rejoins = c.fallbacks.Load(), c.rejoins.Load()
}

// joinShare makes ln, the lane of a route the run just made, a member of
// its shared lane, if the run shares, unless the run's membership of ln
// is still held (its route was dropped and its leave has not come yet):
// the route takes that one back. key is the lane's key in the Limiter (a
// kind's prefix and the namespace, "" for the default one), so that ""
// and "__default__" are one lane. Called under the producers' turn, as
// routes are made.
func (r *run) joinShare(ln *lane, key string) {
	s := &r.shares
	if r.cfg.store == nil || s.host == "" {
		return
	}
	s.mu.Lock()
	if m, ok := s.held[ln]; ok {
		m.dropped = false
		s.mu.Unlock()
		return
	}
	s.mu.Unlock()
	// Not the run's context: a run canceled while joining would count a
	// fallback; the join is bounded by the store's timeout anyway.
	leave := ln.joinShare(context.WithoutCancel(r.ctx), r.cfg.store, share.Lane{Host: s.host, Namespace: key}, &r.cfg.limiter.shareStats)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.held == nil {
		s.held = make(map[*lane]*membership)
	}
	s.held[ln] = &membership{leave: leave}
}

// leaveDropped ends the run's memberships of lanes, whose routes dropIdle
// just forgot, in a goroutine: a leave waits for the lane's watcher and
// makes a round trip to the store, and the producer that drops a thousand
// routes at once must not wait for a thousand. A route made again for one
// of them before its turn comes takes it back (joinShare). Called under
// the producers' turn; leaveShares waits for these leaves.
func (r *run) leaveDropped(lanes []*lane) {
	s := &r.shares
	s.mu.Lock()
	defer s.mu.Unlock()
	var dropped []*lane
	for _, ln := range lanes {
		if m, ok := s.held[ln]; ok {
			m.dropped = true
			dropped = append(dropped, ln)
		}
	}
	if len(dropped) == 0 {
		return
	}
	prev, done := s.left, make(chan struct{})
	s.left = done
	go func() {
		defer close(done)
		if prev != nil {
			<-prev // one at a time, so that left covers every earlier one
		}
		for _, ln := range dropped {
			s.leaveIfDropped(ln)
		}
		// The Limiter kept these lanes while they were shared: it may
		// forget them now, rather than once it holds twice as many.
		r.cfg.limiter.sweepSoon()
	}()
}

// leaveIfDropped ends the membership of ln if it is still held and its
// route dropped.
func (s *runShares) leaveIfDropped(ln *lane) {
	s.mu.Lock()
	m, ok := s.held[ln]
	if !ok || !m.dropped {
		s.mu.Unlock()
		return
	}
	delete(s.held, ln)
	s.mu.Unlock()
	m.leave()
}

// leaveShares ends the run's memberships still held, and waits for those
// being left in the background (leaveDropped), so that none outlives the
// run; it may be called more than once, and ends at each call what the
// run joined since the last.
func (r *run) leaveShares() {
	s := &r.shares
	s.mu.Lock()
	held, left := s.held, s.left
	s.held = nil // the background leaves find nothing more to leave
	s.mu.Unlock()
	if left != nil {
		<-left
	}
	for _, m := range held {
		m.leave()
	}
}

// shareStats fills st's counts of fallbacks and rejoins since the run
// started.
func (r *run) shareStats(st *Stats) {
	if r.cfg.store == nil {
		return
	}
	c := &r.cfg.limiter.shareStats
	st.SharedFallbacks = int(c.fallbacks.Load() - r.shares.fallbacks)
	st.SharedRejoins = int(c.rejoins.Load() - r.shares.rejoins)
}
