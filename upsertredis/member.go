package upsertredis

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/upsertlib/upsert/internal/share"
)

// member is one writer's membership of a lane (see [share.Member]). Its
// view is replaced whole at each answer from Redis, so that View is an
// atomic load; the rest of its state is guarded by mu.
type member struct {
	store *Store
	lane  share.Lane
	id    string
	keys  []string // state, writers

	view     atomic.Pointer[share.View]
	accepted atomic.Int64  // records accepted since the last exchange
	demand   atomic.Uint64 // float64 bits

	mu      sync.Mutex
	seed    []string  // the lane's state as Redis last gave it: the first seedFields of stateFields
	others  []float64 // the other live writers' demands, at the last sync
	version int64     // the state's version in the view
	joined  bool      // Redis answered once
	alone   bool      // the last exchange failed: deciding alone
	recent  recent    // the lane's count of records accepted at each answer
	counted string    // the state's counted_from at the last answer adopted
	changed chan struct{}
	// signalled is the view when changed was last closed: the writers'
	// demands are compared with it, so that a slow drift fires too.
	signalled share.View

	life memberLife
	// poke is poked at each cut announced on the lane's channel of cuts:
	// a writer's applied cut makes the others exchange at once rather
	// than at their next interval, since until they do they send at the
	// rate the index just refused.
	poke chan struct{}
	hub  *cutsHub // the subscription that pokes it
}

// memberLife ends a member's exchanges with Redis (member.run): once, by
// closing stop; done is closed when the loop has returned.
type memberLife struct {
	leave      sync.Once
	stop, done chan struct{}
}

// channel is the lane's channel of cuts, under the lane's hash tag.
func (m *member) channel() string { return strings.TrimSuffix(m.keys[0], ":state") + ":cuts" }

// newSeed is the state of a lane that nothing was learned about.
func newSeed() []string {
	s := make([]string, seedFields)
	for i := range s {
		s[i] = "0"
	}
	return s
}

func (m *member) View() share.View { return *m.view.Load() }

func (m *member) Changed() <-chan struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.changed
}

func (m *member) Accepted(n int) { m.accepted.Add(int64(n)) }

// Demand sets the demand the next exchange reports. A writer that asked
// for nothing and asks again exchanges at once, not at a quiet lane's
// pace (see quiet).
func (m *member) Demand(perSecond float64) {
	old := math.Float64frombits(m.demand.Swap(math.Float64bits(perSecond)))
	if old == 0 && perSecond > 0 {
		nudge(m.poke)
	}
}

// quiet reports whether the writer asks for nothing and had nothing
// accepted since its last exchange (a Writer waiting for input): its
// exchanges then only keep it among the lane's writers, and go every
// quietEvery rather than every interval.
func (m *member) quiet() bool {
	return m.demand.Load() == 0 && m.accepted.Load() == 0 // float64 bits of +0
}

func (m *member) Cut(ctx context.Context, c share.Cut) (share.View, bool, error) {
	ago := time.Duration(0)
	if !c.Sent.IsZero() {
		ago = max(0, time.Since(c.Sent))
	}
	reply, err := m.exchange(ctx, cutScript, m.keys[:1],
		c.Seen, ago.Milliseconds(), c.MinGap.Milliseconds(), formatFloat(c.Rate), formatFloat(c.Level),
		c.Recovery.Milliseconds(), max(0, c.RetryAfter).Milliseconds(), int(c.Unit), max(1, c.Refusals), c.Window.Milliseconds(),
		m.channel())
	if err != nil {
		return m.View(), false, err
	}
	applied := reply.extra[0] == "1"
	switch {
	case applied:
		m.store.stats.cuts.Add(1)
	case reply.extra[0] == "2":
		m.store.stats.counted.Add(1)
	default:
		m.store.stats.sameEpisode.Add(1)
	}
	return m.View(), applied, nil
}

func (m *member) Breaker(ctx context.Context, open bool) (share.View, error) {
	flag := "0"
	if open {
		flag = "1"
	}
	_, err := m.exchange(ctx, breakerScript, m.keys[:1], flag, m.id)
	return m.View(), err
}

func (m *member) InOutage(ctx context.Context, since time.Time) (share.View, error) {
	m.mu.Lock()
	v, openSince := m.View(), m.seed[openSinceField]
	m.mu.Unlock()
	if since.IsZero() || !v.OpenSince.Equal(since) {
		return v, nil // the member's last view holds another outage, or none: none to mark this writer in
	}
	_, err := m.exchange(ctx, breakerScript, m.keys[:1], "2", m.id, openSince)
	return m.View(), err
}

// Leave stops the member's exchanges and takes the writer off the lane
// (leaveScript: the other writers' split no longer counts it, and the
// lane's keys go with its last writer), within the store's timeout. While
// Redis is presumed down (see Store.down), Leave does not wait: its loop's
// last try and that exchange finish in the background, each bounded by
// the timeout and counted in Stats, and it returns an error matching
// [share.ErrUnavailable] at once. When the exchange fails, the writer's
// heartbeat expires instead (2 s by default), and the keys' TTL. A member
// alone while Redis is not presumed down (an exchange was answered since,
// or the Store never presumes: see presumes) leaves as any other: one
// round trip.
func (m *member) Leave(ctx context.Context) error {
	var err error
	m.life.leave.Do(func() {
		close(m.life.stop)
		if m.store.down() != nil {
			go func() {
				<-m.life.done
				_ = m.leaveLane(context.Background())
			}()
			err = fmt.Errorf("%w: Redis failed moments ago; the writer leaves the lane in the background", share.ErrUnavailable)
			return
		}
		<-m.life.done
		err = m.leaveLane(ctx)
	})
	return err
}

// leaveLane runs leaveScript within the store's timeout, and counts its
// round trip as an exchange or a failure, which tells the Store whether
// Redis is up (see Store.heard), unless ctx ended first.
func (m *member) leaveLane(ctx context.Context) error {
	_, err := m.store.call(ctx, func(ctx context.Context) ([]string, error) {
		return nil, leaveScript.Run(ctx, m.store.rdb, m.keys, m.id, m.store.opts.lapse.Milliseconds()).Err()
	})
	if !m.store.heard(ctx, err) {
		return err
	}
	if err != nil {
		m.store.stats.failures.Add(1)
	} else {
		m.store.stats.exchanges.Add(1)
	}
	return err
}

// loop exchanges with Redis every interval until Leave. While the member
// is alone, retry fires when to try Redis again, and ticks and pokes wait
// for it; a member that starts alone (see Store.Join) passes its first.
func (m *member) loop(retry <-chan time.Time) {
	defer close(m.life.done)
	defer m.hub.forget(m.channel(), m.poke)
	tick := time.NewTicker(m.store.opts.interval)
	defer tick.Stop()
	var last time.Time // when the last try began
	try := func() {
		last = time.Now()
		retry = m.try()
	}
	for {
		select {
		case <-m.life.stop:
			return
		case <-m.poke:
			if retry == nil {
				try()
			}
		case <-tick.C:
			// Half an interval of slack: a tick handled sooner after it
			// fired than the last one must not wait for the next.
			if retry == nil && (!m.quiet() || time.Since(last) >= m.store.opts.quietEvery()-m.store.opts.interval/2) {
				try()
			}
		case <-retry:
			try()
		}
	}
}

// try syncs, and returns nil, or when Redis failed, a channel that fires
// when to try it again (retryEvery after this try began).
func (m *member) try() <-chan time.Time {
	start := time.Now()
	if m.sync(context.Background()) == nil {
		return nil
	}
	return time.After(m.store.opts.retryEvery() - time.Since(start))
}

// retryEvery is how long a member that Redis failed waits between tries:
// a second, so that a Redis down or hung gets one try a second from each
// writer, not one an interval; and at most half the heartbeat, so that
// one failed exchange (a timeout) does not keep a writer alone until the
// others drop it from the split while it still sends its part.
func (o options) retryEvery() time.Duration { return min(time.Second, o.heartbeat/2) }

// quietEvery is how often a quiet member exchanges (see member.quiet): a
// quarter of the heartbeat, so that a late exchange or two does not drop
// it from the lane's writers, and never more often than the interval.
func (o options) quietEvery() time.Duration { return max(o.interval, o.heartbeat/4) }

// sync is the periodic exchange: the records accepted since the last one
// and the writer's demand go out, the lane's state and the other writers'
// demands come back. Records reported in an exchange that failed are not
// counted again (Redis may have applied it before the answer was lost):
// the lane's measure of what the index accepted then misses an interval's
// worth, which lowers a level rather than raising it.
func (m *member) sync(ctx context.Context) error {
	n := m.accepted.Swap(0)
	o := m.store.opts
	_, err := m.exchange(ctx, syncScript, m.keys, m.id, o.heartbeat.Milliseconds(), n,
		formatFloat(math.Float64frombits(m.demand.Load())), o.lapse.Milliseconds())
	return err
}

// reply is a script's answer (see prelude).
type reply struct {
	now     int64    // Redis's clock, ms
	created bool     // the state was rebuilt from the seed (see prelude)
	fields  []string // stateFields
	extra   []string // what the script adds after them
}

// exchange runs script with the seed and args, within the store's timeout,
// and adopts its answer. While the member is alone, only the periodic sync
// tries Redis: a writer's cut or breaker call fails at once, without a
// round trip, rather than wait out a timeout on every 429 of an outage.
// An exchange whose ctx ended before Redis answered (the caller gave up)
// fails and changes nothing: the member does not go alone for it.
func (m *member) exchange(ctx context.Context, script *redis.Script, keys []string, args ...any) (reply, error) {
	m.mu.Lock()
	alone, seed := m.alone, m.seed
	m.mu.Unlock()
	if alone && script != syncScript {
		return reply{}, share.ErrUnavailable
	}
	all := make([]any, 0, seedArgs+len(args))
	all = append(all, m.store.opts.ttl.Milliseconds())
	for _, s := range seed {
		all = append(all, s)
	}
	all = append(all, args...)

	start := time.Now()
	out, err := m.store.call(ctx, func(ctx context.Context) ([]string, error) {
		return script.Run(ctx, m.store.rdb, keys, all...).StringSlice()
	})
	end := time.Now()
	if !m.store.heard(ctx, err) {
		return reply{}, fmt.Errorf("%w: %w", share.ErrUnavailable, err)
	}
	var r reply
	if err == nil {
		r, err = parseReply(out)
	}
	if err != nil {
		m.failed(err)
		return reply{}, fmt.Errorf("%w: %w", share.ErrUnavailable, err)
	}
	m.adopt(r, start.Add(end.Sub(start)/2), script == syncScript)
	return r, nil
}

func parseReply(out []string) (reply, error) {
	n := len(stateFields)
	if len(out) < 2+n {
		return reply{}, fmt.Errorf("upsertredis: a script replied with %d values, want at least %d", len(out), 2+n)
	}
	now, err := strconv.ParseInt(out[0], 10, 64)
	if err != nil {
		return reply{}, fmt.Errorf("upsertredis: a script replied with the time %q", out[0])
	}
	return reply{now: now, created: out[1] == "1", fields: out[2 : 2+n], extra: out[2+n:]}, nil
}

// failed counts a failed exchange, and makes the member decide alone,
// saying so once.
func (m *member) failed(err error) {
	m.store.stats.failures.Add(1)
	if m.goAlone() && m.store.opts.logger != nil {
		go m.store.logFallback(m.lane, m.id, err)
	}
}

// startAlone makes a member that joins while Redis is presumed down (f is
// its last failure; see Store.down) decide alone from the start, as if
// its join's exchange had failed, and says so without looking for the
// cause: no round trip.
func (m *member) startAlone(f *failure) {
	m.goAlone()
	m.store.log(slog.LevelWarn, "upsertredis: Redis failed moments ago; the writer starts alone without trying it",
		m.lane, m.id, slog.String("error", f.err.Error()))
}

// goAlone makes the member decide alone, and reports whether it did not
// already: a fallback.
func (m *member) goAlone() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.alone {
		return false
	}
	m.alone = true
	m.store.stats.fallbacks.Add(1)
	v := m.View()
	v.Shared = false
	m.view.Store(&v)
	m.signal()
	return true
}

// adopt makes r the member's view; mid is the local time of the middle of
// the round trip, taken as the moment of Redis's clock r.now. A sync's
// reply also names the other writers' demands. An answer older than the
// view (its state's version is lower: a sync that Redis ran before a cut
// whose answer came first) is dropped, or it would take the view back to
// the episode before.
func (m *member) adopt(r reply, mid time.Time, fromSync bool) {
	m.store.stats.exchanges.Add(1)
	m.mu.Lock()
	defer m.mu.Unlock()
	version, _ := strconv.ParseInt(r.fields[0], 10, 64)
	if version < m.version {
		return
	}
	m.version = version
	old := m.View()
	if fromSync {
		m.others = parseDemands(r.extra)
	}
	v := viewOf(r, mid).WithDemands(math.Float64frombits(m.demand.Load()), m.others)
	if r.fields[openSinceField] == m.seed[openSinceField] && !old.OpenSince.IsZero() {
		// The same outage: the same moment, not one mapped anew through
		// this round trip's middle (a writer tells an outage that replaced
		// the one it reported itself in by its OpenSince).
		v.OpenSince = old.OpenSince
	}
	total, _ := strconv.ParseInt(r.fields[acceptedField], 10, 64)
	if m.recounted(r.fields, total) {
		m.recent.restart(0) // a state created anew counts from 0
	}
	m.counted = r.fields[countedFromField]
	m.recent.add(mid, total)
	v.Recent, v.RecentSpan = m.recent.over(recentSpan)
	if r.created && m.joined {
		m.store.stats.resets.Add(1)
		m.store.log(slog.LevelWarn, "upsertredis: the lane's state was missing (Redis flushed or restarted); rebuilt from this writer's view", m.lane, m.id)
	}
	if m.alone {
		m.alone = false
		m.store.stats.rejoins.Add(1)
		m.store.log(slog.LevelInfo, "upsertredis: Redis answers again; the writer shares the lane's state", m.lane, m.id)
	}
	m.joined = true
	moved := !old.Shared || differs(m.seed, r.fields) || v.DemandsMoved(m.signalled, demandTolerance)
	m.seed = r.fields[:seedFields]
	m.view.Store(&v)
	m.store.stats.sawWriters(int64(v.Writers))
	if moved {
		m.signal()
	}
}

// demandTolerance is the change of a writer's demand, as a fraction of
// it, below which Changed does not fire: a demand (twice what a writer
// sends) moves a little at every exchange, and a tenth of a demand moves
// any writer's part by at most a tenth of that demand.
const demandTolerance = 0.1

// recounted reports whether the lane's count of records accepted (total,
// in the state fields) started again since the member's last sample: the
// state was created anew, by this writer's exchange or another's. The
// count then went down, or counted_from moved to a count below the last
// sample; a cut, or a rebuild over a state that exists, moves
// counted_from too but the count goes on, and its samples still measure
// the moments after the cut.
func (m *member) recounted(fields []string, total int64) bool {
	last, ok := m.recent.last()
	if !ok {
		return false
	}
	from, _ := strconv.ParseInt(fields[acceptedAtCutField], 10, 64)
	return total < last || (fields[countedFromField] != m.counted && from < last)
}

// differs reports whether the fields that a writer acts on at once (a
// cut, a Retry-After, the breaker) changed.
func differs(old, fields []string) bool {
	for _, i := range []int{1, 6, 7} { // epoch, paused_until, open_since
		if old[i] != fields[i] {
			return true
		}
	}
	return false
}

func (m *member) signal() {
	m.signalled = m.View()
	close(m.changed)
	m.changed = make(chan struct{})
}

// viewOf turns a reply into a view, mapping Redis's clock to the local one.
func viewOf(r reply, mid time.Time) share.View {
	f := make(map[string]string, len(stateFields))
	for i, name := range stateFields {
		f[name] = r.fields[i]
	}
	at := func(name string) time.Time {
		ms, _ := strconv.ParseInt(f[name], 10, 64)
		if ms <= 0 {
			return time.Time{}
		}
		return mid.Add(time.Duration(ms-r.now) * time.Millisecond)
	}
	num := func(name string) float64 {
		x, _ := strconv.ParseFloat(f[name], 64)
		return x
	}
	epoch, _ := strconv.ParseUint(f["epoch"], 10, 64)
	unit, _ := strconv.Atoi(f["unit"])
	v := share.View{
		Shared:        true,
		Epoch:         epoch,
		Unit:          share.Unit(unit),
		Rate:          num("rate"),
		Level:         num("level"),
		Recovery:      time.Duration(num("recovery")) * time.Millisecond,
		CutAt:         at("cut_at"),
		PausedUntil:   at("paused_until"),
		Accepted:      int64(num("accepted") - num("accepted_at_cut")),
		AcceptedSince: at("counted_from"),
		OpenSince:     at("open_since"),
		Answered:      f["answered"] == "1",
	}
	if v.Epoch == 0 || v.Rate <= 0 {
		v.Rate = math.Inf(1)
	}
	if !v.PausedUntil.After(mid) {
		v.PausedUntil = time.Time{}
	}
	return v
}

func parseDemands(s []string) []float64 {
	out := make([]float64, 0, len(s))
	for _, d := range s {
		x, err := strconv.ParseFloat(d, 64)
		if err != nil {
			x = math.Inf(1)
		}
		out = append(out, x)
	}
	return out
}

func formatFloat(x float64) string { return strconv.FormatFloat(x, 'g', -1, 64) }

var _ share.Member = (*member)(nil)
