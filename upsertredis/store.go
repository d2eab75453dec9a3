package upsertredis

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"math"
	"os"
	"reflect"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/upsertlib/upsert/internal/share"
)

// Defaults of a [Store]'s options.
const (
	// DefaultPrefix starts every key the store writes.
	DefaultPrefix = "upsert:"
	// DefaultTimeout bounds each round trip to Redis. A slower answer
	// counts as a failure: the writer goes on alone, and for a while the
	// Store's joins skip their round trip and its leaves do not wait for
	// theirs (through a single node or a failover client; see the
	// package doc).
	DefaultTimeout = 100 * time.Millisecond
	// DefaultInterval is how often each writer exchanges with Redis:
	// what it accepted and wants, against the lane's state and writers.
	// Another writer's cut reaches it at once (it is announced on the
	// lane's channel); the rest within that.
	DefaultInterval = 100 * time.Millisecond
	// DefaultHeartbeat is how long a writer that stopped exchanging (its
	// process died) still counts among the lane's writers: long enough
	// that a writer held up for a second by its own machine is not
	// dropped, short enough that the others take up its part within a
	// few seconds.
	DefaultHeartbeat = 2 * time.Second
	// DefaultTTL is how long a lane's keys outlive its last exchange,
	// when its writers died without leaving.
	DefaultTTL = time.Minute
)

// Store keeps in Redis what the writers of each lane (one namespace of one
// index) share, for writers in any number of processes. It implements the
// library's shared-state interface; a Store is safe for concurrent use and
// is meant to be made once per process and Redis deployment.
type Store struct {
	rdb   redis.UniversalClient
	opts  options
	stats counters
	// presumes is whether a failure makes the Store presume Redis down
	// (see presumes); lastFailure is Redis's last failure, nil once an
	// exchange was answered since (see down).
	presumes    bool
	lastFailure atomic.Pointer[failure]
}

type options struct {
	prefix                            string
	timeout, interval, heartbeat, ttl time.Duration
	logger                            *slog.Logger
	// lapse is how long a writer's latest report keeps it in the lane's
	// outage (share.OutageLapse; the tests shorten it, Redis's clock
	// being real).
	lapse time.Duration
}

// Option configures a [Store].
type Option func(*options)

// WithPrefix sets the prefix of every key (default [DefaultPrefix]), to
// keep writers of separate deployments apart on one Redis.
func WithPrefix(p string) Option { return func(o *options) { o.prefix = p } }

// WithTimeout bounds each round trip to Redis (default [DefaultTimeout]).
// Values ≤ 0 keep the default.
func WithTimeout(d time.Duration) Option {
	return func(o *options) { o.timeout = positive(d, o.timeout) }
}

// WithInterval sets how often each writer exchanges with Redis (default
// [DefaultInterval]). Values ≤ 0 keep the default.
func WithInterval(d time.Duration) Option {
	return func(o *options) { o.interval = positive(d, o.interval) }
}

// WithHeartbeat sets how long a writer that stopped exchanging still counts
// among the lane's writers (default [DefaultHeartbeat]). Values ≤ 0 keep the
// default.
func WithHeartbeat(d time.Duration) Option {
	return func(o *options) { o.heartbeat = positive(d, o.heartbeat) }
}

// WithTTL sets how long a lane's keys outlive its last exchange (default
// [DefaultTTL]); it is raised to the heartbeat if below. Values ≤ 0 keep the
// default.
func WithTTL(d time.Duration) Option { return func(o *options) { o.ttl = positive(d, o.ttl) } }

// WithLogger logs, once per event, a writer going on alone because Redis
// failed (with the cause when the error hides it: see the package doc),
// its return, and a lane's state found missing and rebuilt. Silent by
// default.
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.logger = l } }

func positive(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

// New returns a Store that keeps shared state through rdb: a client, a
// cluster client, a failover client or a ring, with whatever password, TLS
// and pool the caller configured. The Store does not close rdb. The Stores
// made with one client share its subscription to their lanes' channels of
// cuts, one connection (package state keyed by the client, dropped when
// the last of their lanes leaves; see the package doc's costs). New panics
// when rdb is nil (a nil interface or a nil client pointer): a programming
// error, found where it is made rather than on a goroutine of the call.
func New(rdb redis.UniversalClient, opts ...Option) *Store {
	if v := reflect.ValueOf(rdb); !v.IsValid() || v.Kind() == reflect.Pointer && v.IsNil() {
		panic("upsertredis: nil Redis client")
	}
	o := options{
		prefix:    DefaultPrefix,
		timeout:   DefaultTimeout,
		interval:  DefaultInterval,
		heartbeat: DefaultHeartbeat,
		ttl:       DefaultTTL,
		lapse:     share.OutageLapse,
	}
	for _, opt := range opts {
		if opt != nil { // as the core's options: a nil one does nothing
			opt(&o)
		}
	}
	o.ttl = max(o.ttl, o.heartbeat)
	return &Store{rdb: rdb, opts: o, presumes: presumes(rdb)}
}

// Join registers a writer of lane and keeps its view fresh, exchanging with
// Redis every interval, until Leave. See [share.Store]. It makes one
// exchange, bounded by the timeout (and ctx), unless the Store presumes
// Redis down (see the package doc: a round trip of any of the Store's
// writers went unanswered within a second and a timeout, by default, and
// none was answered since; never through a Ring or a Cluster): the writer
// then starts alone at once, without a round trip, and tries Redis again
// a second later (half the heartbeat if shorter), so that an outage costs
// a run one timeout however many lanes it joins.
func (s *Store) Join(ctx context.Context, lane share.Lane) share.Member {
	state, writers := laneKeys(s.opts.prefix, lane.Host, lane.Namespace)
	m := &member{
		store:   s,
		lane:    lane,
		id:      writerID(),
		keys:    []string{state, writers},
		seed:    newSeed(),
		life:    memberLife{stop: make(chan struct{}), done: make(chan struct{})},
		changed: make(chan struct{}),
		poke:    make(chan struct{}, 1),
	}
	m.demand.Store(math.Float64bits(math.Inf(1)))
	m.view.Store(&share.View{Rate: math.Inf(1), Writers: 1})
	var retry <-chan time.Time // the loop's first try, for a member that starts alone
	if f := s.down(); f != nil {
		m.startAlone(f)
		retry = time.After(s.opts.retryEvery())
	} else {
		_ = m.sync(ctx) // on failure the member starts alone
	}
	m.hub = listen(s, m.channel(), m.poke)
	go m.loop(retry)
	return m
}

// writerID names a writer: its host and process, for whoever reads the
// keys, and a random part, since a process may hold several members.
func writerID() string {
	host, _ := os.Hostname()
	var b [6]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%.64s/%d/%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}

// Stats counts what a Store's members did since it was made.
type Stats struct {
	// Exchanges are the round trips Redis answered; Failures those that
	// failed (an error reply, or no answer within the timeout). Both count
	// every round trip: a join's, the periodic ones, a cut's or a breaker's
	// and a leave's, also one made in the background; not one whose
	// caller gave up (its ctx ended) first.
	Exchanges, Failures int64
	// Fallbacks counts the times a writer went on alone because Redis
	// failed (a writer that joined while Redis was presumed down counts
	// one, and no failure: it made no round trip), Rejoins the times it
	// came back.
	Fallbacks, Rejoins int64
	// Resets counts the times a lane's state was missing while its writers
	// ran (Redis flushed, restarted or evicted it) and was rebuilt from a
	// writer's last view.
	Resets int64
	// Cuts counts the writers' proposals for a 429 episode that were
	// applied, SameEpisode those dropped as belonging to an episode
	// already cut, Counted the refusals counted towards an episode (see
	// share.Cut.Refusals) that did not complete it.
	Cuts, SameEpisode, Counted int64
	// MostWriters is the most writers that a member of the store counted
	// in its lane (itself included) at an exchange.
	MostWriters int64
}

type counters struct {
	exchanges, failures, fallbacks, rejoins, resets, cuts, sameEpisode, counted atomic.Int64
	mostWriters                                                                 atomic.Int64
}

// sawWriters raises mostWriters to n.
func (c *counters) sawWriters(n int64) {
	for {
		old := c.mostWriters.Load()
		if n <= old || c.mostWriters.CompareAndSwap(old, n) {
			return
		}
	}
}

// Stats returns the counts so far.
func (s *Store) Stats() Stats {
	c := &s.stats
	return Stats{
		Exchanges: c.exchanges.Load(), Failures: c.failures.Load(),
		Fallbacks: c.fallbacks.Load(), Rejoins: c.rejoins.Load(), Resets: c.resets.Load(),
		Cuts: c.cuts.Load(), SameEpisode: c.sameEpisode.Load(), Counted: c.counted.Load(), MostWriters: c.mostWriters.Load(),
	}
}

func (s *Store) log(level slog.Level, msg string, lane share.Lane, id string, attrs ...slog.Attr) {
	if s.opts.logger == nil {
		return
	}
	attrs = append(attrs, slog.String("host", lane.Host), slog.String("namespace", lane.Namespace), slog.String("writer", id))
	s.opts.logger.LogAttrs(context.Background(), level, msg, attrs...)
}

// call runs f within the store's timeout, whatever the client's own
// settings: a go-redis client ignores a context's deadline on the socket
// unless it was made with ContextTimeoutEnabled, and would wait for its
// ReadTimeout (3 s by default). On timeout f is left to finish in the
// background, bounded by the client's timeouts, and its answer is dropped.
func (s *Store) call(ctx context.Context, f func(context.Context) ([]string, error)) ([]string, error) {
	return within(ctx, s.opts.timeout, f)
}

var _ share.Store = (*Store)(nil)
