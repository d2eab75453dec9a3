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

// runShares is a run's memberships of shared lanes, left when it ends.
type runShares struct {
	mu     sync.Mutex
	host   string // the index's host; "" when the run has none to share
	leaves []func()
	// fallbacks and rejoins of the Limiter's lanes when the run started.
	fallbacks, rejoins int64
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

// join makes ln a member of its shared lane, if the run shares; key is
// the lane's key in the Limiter (a kind's prefix and the namespace, ""
// for the default one), so that "" and "__default__" are one lane.
func (r *run) joinShare(ln *lane, key string) {
	s := &r.shares
	if r.cfg.store == nil || s.host == "" {
		return
	}
	// Not the run's context: a run canceled while joining would count a
	// fallback; the join is bounded by the store's timeout anyway.
	leave := ln.joinShare(context.WithoutCancel(r.ctx), r.cfg.store, share.Lane{Host: s.host, Namespace: key}, &r.cfg.limiter.shareStats)
	s.mu.Lock()
	s.leaves = append(s.leaves, leave)
	s.mu.Unlock()
}

// leaveShares ends the run's memberships; it may be called more than once.
func (r *run) leaveShares() {
	s := &r.shares
	s.mu.Lock()
	leaves := s.leaves
	s.leaves = nil
	s.mu.Unlock()
	for _, leave := range leaves {
		leave()
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
