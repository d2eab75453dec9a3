package upsertredis

import (
	"github.com/redis/go-redis/v9"

	"github.com/upsertlib/upsert"
	"github.com/upsertlib/upsert/internal/share"
)

// Shared returns an option that makes a call share what its Limiter
// learns with every call given such an option, in any process, that
// writes to the same index host and namespace: it is Option of a Store
// made by New(rdb, opts...). It applies to calls through
// [upsert.WithIndex] (the host names the index); a call through
// [upsert.WithUpsertFunc] or [upsert.WithRecordsFunc] runs as without it.
//
// Each call given Shared makes a Store of its own (the Stores of one
// client share one subscription, so this costs Redis no more connections);
// a service making many calls can make one Store and pass its
// [Store.Option] to each, which shares one set of [Store.Stats].
func Shared(rdb redis.UniversalClient, opts ...Option) upsert.Option {
	return New(rdb, opts...).Option()
}

// Option returns the option that makes a call share its Limiter's lanes
// through s (see [Shared]). Each lane of a Limiter joins its shared lane
// once, when a call first writes to that namespace, making one round trip
// bounded by the store's timeout (100 ms by default; a Redis that does not
// answer then leaves the lane alone until it does), and leaves it when the
// last call using it ends, making another. While s presumes Redis down (a
// round trip went unanswered within the last 1.1 s by default, and none
// was answered since; only through a single node or a failover client:
// see the package doc), joins go alone and leaves do not wait, with no
// round trip on the call's path: an outage costs a call about one timeout
// whatever the number of its namespaces. Requests make no round trip to
// Redis.
func (s *Store) Option() upsert.Option {
	return share.Option(s).(upsert.Option)
}
