package upsertredis

import (
	"context"
	"time"
)

// failure is an exchange that Redis failed: when it ended, and its error.
type failure struct {
	at  time.Time
	err error
}

// markDown records that Redis failed an exchange with err, made with ctx:
// the Store presumes it down (see down). A ctx that ended (the caller
// gave up) says nothing of Redis, and is not recorded.
func (s *Store) markDown(ctx context.Context, err error) {
	if ctx.Err() == nil {
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
// otherwise: from a failed exchange of any of the Store's members until
// one is answered, or until downFor has passed since the last failure.
// Meanwhile a Join goes alone without a round trip, and Leave does not
// wait for Redis.
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
