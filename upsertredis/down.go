package upsertredis

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"
)

// failure is an exchange that Redis failed: when it ended, and its error.
type failure struct {
	at  time.Time
	err error
}

// presumes reports whether a Store through rdb presumes Redis down after
// a failure (see Store.down): only through a *redis.Client (a single node,
// or a failover client), because a Ring's shards or a Cluster's nodes fail
// one by one, and a lane on a live one must not go alone for a dead one.
func presumes(rdb redis.UniversalClient) bool {
	_, one := rdb.(*redis.Client)
	return one
}

// heard records what a round trip made with ctx, which ended with err,
// tells of Redis, and reports whether it tells anything. A round trip
// whose ctx ended first tells nothing (the caller gave up). One that Redis
// answered, with its reply or an error reply (such as WRONGTYPE, which
// came without waiting out a timeout), tells it is up; any other error
// (no answer within the timeout, a connection refused or lost) that it is
// down.
func (s *Store) heard(ctx context.Context, err error) bool {
	var answer redis.Error
	switch {
	case err != nil && ctx.Err() != nil:
		return false
	case err == nil || errors.As(err, &answer):
		s.markUp()
	default:
		s.markDown(err)
	}
	return true
}

// markDown records that Redis failed an exchange with err: a Store that
// presumes (see presumes) presumes it down (see down).
func (s *Store) markDown(err error) {
	if s.presumes {
		s.lastFailure.Store(&failure{at: time.Now(), err: err})
	}
}

// markUp records that Redis answered an exchange: it is up.
func (s *Store) markUp() {
	if s.lastFailure.Load() != nil {
		s.lastFailure.Store(nil)
	}
}

// down returns the last failure while Redis is presumed down, nil
// otherwise: from a failed exchange or leave of any of the Store's
// members until one is answered, or until downFor has passed since the
// last failure; never for a Store through a Ring or a Cluster (see
// presumes). Meanwhile a Join goes alone without a round trip, and Leave
// does not wait for Redis.
func (s *Store) down() *failure {
	f := s.lastFailure.Load()
	if f == nil || time.Since(f.at) >= s.opts.downFor() {
		return nil
	}
	return f
}

// downFor is how long Redis is presumed down after its last failure
// (1.1 s by default): a member alone tries Redis again retryEvery after
// its last try began and fails within the timeout, so while one runs its
// failures renew the presumption before it lapses; once none does, a Join
// tries Redis itself again.
func (o options) downFor() time.Duration { return o.retryEvery() + o.timeout }
