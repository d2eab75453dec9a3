// Package upsertredis shares what the upsert library learns about an index
// between writers in separate processes, through Redis.
//
// # When to use it
//
// Writers of one process that write into one index at the same time
// already share what they learn (one Limiter per index). Writers in
// separate processes — pods of a deployment, consumers of a topic, shards
// of a backfill — each learn alone from their own 429s, and at a low 429
// rate they cannot agree on their shares: BENCHMARKS.md measures four such
// writers at 92% of the index in total with their throughputs 1.1 to 1.6
// times apart, eight at 88.6% with 10.8% of requests refused. A Store gives
// them the signal in common that Pinecone's answers do not carry: through
// one, four processes took 95.4–99.5% of the same index in 59 runs of 60
// with 1.2–2.3% of requests refused and their throughputs 1.02–1.08
// apart, eight 93.3–98.4% in 31 runs of 32 with 1.1–2.4% and 1.07–1.19
// (BENCHMARKS.md, issue 21, phase 5). Use it when
// several processes write into the same namespace of an index at the same
// time; one process gains nothing from it.
//
// Pass [Shared] (or a Store's [Store.Option]) to each call, with
// [upsert.WithIndex]:
//
//	rdb := redis.NewClient(&redis.Options{Addr: "redis:6379"})
//	store := upsertredis.New(rdb) // once per process
//	res, err := upsert.All(ctx, vectors, upsert.WithIndex(idx), store.Option())
//
// Every call given it, in any process, that writes to the same index host
// and namespace shares that lane. The calls of one process already share
// one Limiter per index; the Store adds the other processes.
//
// # What is shared
//
// Per lane (an index host and a namespace), in two Redis keys:
//
//   - the admitted rate of the whole lane, as the anchors of its curve:
//     the rate the last 429 episode set (in the unit its 429 named:
//     requests, upsert bytes or records), the level it climbs back to, when
//     the cut was made and how long the climb takes. Every writer computes
//     the lane's rate from them and enforces its own part locally, so that
//     no request waits for Redis. Pinecone's per-namespace caps
//     (upsert.WithIndexLimits) are split by the same part, and batches are
//     sized by the lane's rates, so that N writers send no more requests
//     than one would;
//   - the 429 episodes, counted once for all writers: the lane's 429s are
//     counted together, and the writer whose 429 makes an episode (by the
//     test a single writer of the whole lane would run) proposes the cut; a
//     429 of a request sent before the writer knew of the last cut, or
//     within a round trip of it, belongs to that episode and cuts nothing;
//   - a Retry-After, which pauses every writer of the lane;
//   - the circuit breaker's outage: when the first writer's breaker opened,
//     and whether the index ever answered anyone. The outage ends when a
//     writer's breaker closes (the index answered it), or when every
//     writer in it (whose breaker opened, or whose own request failed in
//     it) has left, died, or reported no failure in it for two minutes
//     (it sat idle): nobody then still sees it, the index may have been
//     back for minutes, and a writer that joins later counts a new
//     outage from its own breaker, not from that one's start; a writer
//     whose breaker only that outage opened, with no failure of its own
//     in it, closes it then too. A writer reports itself in each outage
//     of the lane it fails in (one closed and another opened between two
//     of its exchanges included), and again at a failure 30 s after its
//     last report, which renews it (an outage that ended under it is
//     not opened again by its word alone). An outage whose writers are
//     not known (the state rebuilt after Redis lost it, or an outage
//     opened by a version that did not mark them) lasts until a breaker
//     closes;
//   - the live writers and what each could send (its demand): each
//     writer's part of the rate is a max-min fair split, so a writer that
//     joins gets its part at once and the others take up the part of one
//     that leaves, or dies (its heartbeat expires).
//
// Each writer exchanges with Redis every [DefaultInterval] (one script call,
// off the hot path), at once when another writer's cut is announced on the
// lane's channel (a Store holds one subscription for all its lanes), and
// once per 429 that it proposes or counts towards an episode; nothing is
// written per record or per successful request. Keys carry a TTL, are renewed by live
// writers, hold nothing that grows with the records written, and share a
// Redis Cluster hash tag per lane.
//
// # When Redis fails
//
// Redis is a helper, never a dependency of correctness: no record is lost
// or failed because of it, and no request waits for it (a request makes no
// round trip to Redis; the exchanges run beside the requests). Each call is
// bounded by [DefaultTimeout] whatever the client's own timeouts; a lane's
// join, when a call first writes to a namespace, waits for one, and its
// leave, when the last call using it ends, for another. When a call fails
// or times out, the writer goes on alone from what it learned
// (its last view of the lane), as a Limiter without Redis does: it keeps
// its part of the lane's rate (the other writers most likely still run)
// and probes above it fast enough to reach the whole lane's rate within
// a few seconds, since it no longer hears of the others leaving; the
// index's 429s split the lane again. It says so once through
// [WithLogger]; [Store.Stats] and the run's upsert.Stats (SharedFallbacks,
// SharedRejoins) count it. (go-redis itself logs every failed dial of its
// pool through its own package logger, many lines a second while Redis is
// down; the Store leaves that process-wide setting to the caller:
// redis.SetLogger quiets it.)
// While alone it tries Redis again once a second (every half heartbeat
// if that is shorter, whatever the interval; a writer that joined alone,
// that long after its join), and rejoins when it answers: a cut it made
// alone, below its part of the lane's rate, is proposed to the others
// then. When Redis lost the lane's state (flushed, restarted,
// evicted), the first writer to exchange rebuilds it from its last view, so
// the lane carries on where it was. A writer that cannot reach Redis at
// start starts alone.
//
// A Store also remembers that Redis failed, for all its lanes: from a
// round trip of any of its writers (a join's, a leave's, any exchange)
// that Redis did not answer (no answer within the timeout, a connection
// refused or lost) until one is answered, if only with an error reply
// such as WRONGTYPE, or for a second and a timeout after the last
// failure (1.1 s by default; half the heartbeat and a timeout if that is
// shorter), since its writers alone try Redis once a second and their
// failures keep the presumption up while one runs. A round trip whose
// caller gave up (its context ended) tells nothing, and is not counted.
// Meanwhile a lane's join goes alone at once, with no round trip
// (counted as a fallback, and logged with the last failure's error and
// no cause), and a leave does not wait: its exchange, which takes the
// writer off the others' split and drops the lane's keys with its last
// writer, runs in the background within the timeout, and counts in
// [Store.Stats] as any other (if Redis does not answer, the writer's
// heartbeat and the keys' TTL expire instead). An outage thus costs a
// call about one timeout, however many namespaces it writes to, rather
// than two per namespace one after the other, and a Writer's Adds to new
// namespaces do not each wait. Only a Store through a single node or a
// failover client presumes Redis down, because a Ring's shards and a
// Cluster's nodes fail one by one, and a lane on a live one must not go
// alone for a dead one: through those, each lane's join and leave waits
// for its own round trip, as before. (A Ring all of whose shards are
// down refuses a lane's subscription to its channel of cuts; the Store
// tries it again once a second.)
//
// The line logged when a writer goes on alone carries the exchange's
// error ("error") and, when that error hides what went wrong, its cause
// ("cause"), found with one more round trip bounded by the timeout, made
// only then and only with a logger (a healthy exchange costs nothing
// more; the line comes within that timeout). Two cases hide it:
//
//   - Redis down, the connection refused: go-redis retries a refused dial
//     (DialerRetries: 5, 100 ms apart, then MaxRetries: 3 more commands)
//     past the store's 100 ms, so the exchange fails with "context
//     deadline exceeded". The Store then dials once with the client's own
//     dialer (TLS included) and logs its error, such as "dial tcp
//     10.0.0.5:6379: connect: connection refused"; or that Redis accepted
//     the connection (it is up, but answered nothing within the timeout);
//     or that no connection opened within it either (a host that drops
//     packets). This needs a client whose Options are redis.Options (a
//     single node or a failover client); a cluster client's line carries
//     the timeout alone.
//   - The password missing: Redis refuses, before AUTH, a command of more
//     than 10 arguments (the scripts have more) with "ERR Protocol error:
//     unauthenticated multibulk length", and closes the connection. The
//     Store then sends a PING, whose "NOAUTH Authentication required."
//     is logged as the cause. A wrong password fails as "WRONGPASS ..."
//     itself.
//
// The client is the caller's and the Store does not change its settings.
// For every failed exchange to say itself why, within the timeout, give
// the Store a client of its own with DialerRetries: 1 and MaxRetries: 1:
// the Store needs no more retries than that, since a writer alone tries
// Redis again within a second. Passwords are never logged.
//
// # What it costs Redis
//
// A process holds one connection per Redis client while any lane shares
// through it: the subscription to the lanes' channels of cuts (go-redis
// gives each subscription a connection, outside the pool; the lanes of
// every Store made with one client share one, so a Store per call, as
// [Shared] makes, costs no more; a Ring holds one per lane, on its shard).
// Each lane of a process's Limiter (one namespace of one
// index) that shares through a Store sends, from its join until the last
// call using it ends:
//
//   - one exchange every [DefaultInterval] ([WithInterval]): 10 script
//     calls (EVALSHA) a second, each reading and writing the lane's two
//     keys; while its writer is quiet (it sent nothing for 2 s, as a
//     Writer waiting for input), one every quarter [WithHeartbeat] (500 ms
//     by default) or every interval if that is longer, which keeps it
//     among the lane's writers; plus
//     one per 429 it proposes or counts; while Redis fails, one try a
//     second.
//
// The exchanges of all of a process's lanes go through the client's pool,
// which keeps at most its PoolSize connections (go-redis's default: 10
// per GOMAXPROCS), idle ones included until their ConnMaxIdleTime (30
// minutes by default). A process writing into any number of namespaces
// through one client thus holds one connection plus at most PoolSize (a
// Ring: one per lane plus its shards' pools); P such processes,
// P × (1 + PoolSize) of Redis's maxclients (10000 by default), and they
// send 10 × P × L exchanges a second for L busy namespaces each, 2 for
// each quiet one. Measured with one process at the default interval: 1,
// 8 and 32 lanes held 2, 5 and 5 connections with a PoolSize of 4
// (TestTheRedisCostOfALane), 100 lanes 21 with the default pool of 20 (2
// CPUs); each lane made 10 exchanges a second. A longer interval lowers
// the exchanges.
//
// The Store is given any [github.com/redis/go-redis/v9.UniversalClient]:
// a single node, a cluster, a failover client or a ring (whose lanes each
// subscribe on their own shard), with the password, TLS and pool settings
// the caller chose.
package upsertredis
