package upsert

import (
	"context"
	"encoding/json"
	"slices"
	"sync"
	"time"
)

// Integrated-embedding records are also limited per minute: embedding
// tokens per minute and inference requests per minute, per project and
// model rather than per namespace (docs.pinecone.io, "Database limits").
// A window of a minute outlasts the few seconds in which the Limiter
// recovers from a 429, which then meets the limit again and again; the
// minute gate paces records under what a minute admits instead.
//
// The policy, nextMinuteLimit, is a pure function of what the gate saw;
// the mechanism, minuteGate, is a sliding window of the requests admitted
// over the last minute, consulted before each records request is sent
// (run.attempt). Nothing is known, and nothing held back, until an answer
// names one of the limits (Error.Limit).

// minuteWindow is the span of Pinecone's per-minute limits.
const minuteWindow = time.Minute

// How a learned limit grows while the gate holds requests back and the
// index refuses none. A limit learned from a refusal may be far under the
// index's, since a neighbour, or an earlier run, may have spent the rest of
// the minute: it grows each minute it holds (minuteSearchAfter), by a step
// that starts at minuteSearchStep of it and grows minuteStepGrowth-fold,
// so that a limit learned right costs one probe and one learned a hundred
// times too low is out of it in six minutes. A refused probe bounds the
// index's limit from above; the gate bisects up to that ceiling a minute
// at a time until within a first step of it (closer is worth less than a
// refused probe a minute), and from then probes
// by minuteGrowth every minuteGrowAfter (a probe every few minutes keeps
// the 429s few), which a limit raised, or a neighbour gone, answers by
// starting a search again.
const (
	minuteSearchAfter = minuteWindow
	minuteSearchStep  = 0.25
	minuteStepGrowth  = 4
	minuteGrowth      = 0.1
	minuteGrowAfter   = 3 * minuteWindow
)

// minuteRequestShare bounds a request's tokens at this share of a tokens
// limit found: the window admits whole requests, so requests of a share of
// the limit may leave that share of each minute unused.
const minuteRequestShare = 1.0 / 8

// minuteLimit is what the gate knows of one per-minute dimension (tokens
// or requests).
type minuteLimit struct {
	limit   int       // the limit the gate keeps to; 0: none known
	proven  int       // the last limit the index took without a refusal, which a probe above it falls back to
	step    int       // the next growth while searching (ceiling 0)
	ceiling int       // the last probe the index refused; 0: searching
	since   time.Time // when limit last changed
	// before is what the gate knew until a refusal when the index had
	// accepted none of the run's requests in the minute before (blind):
	// others spent the minute, which says nothing of the limit's size, so
	// the gate sends one request at a time until one is accepted, and
	// then knows that again.
	before *minuteLimit
	// refusal is the refusal that made m blind: replayed on before when a
	// request sent before its own is accepted (the run's own wave,
	// answered out of order: the refusal was the run's, not others').
	refusal minuteObservation
}

// minuteObservation is what the gate saw of one per-minute dimension
// when it reconsiders its limit.
type minuteObservation struct {
	now time.Time
	// refused: the index refused a request naming this limit.
	refused bool
	// inWindow is what the window holds besides the refused request:
	// what the index took (or is taking) over the last minute.
	inWindow int
	// request is the refused request's size.
	request int
	// held: the gate held a request back since the limit last changed.
	held bool
	// admittedUnder is the limit the refused request was let in under
	// (0: none known then).
	admittedUnder int
	// accepted: the index accepted a request.
	accepted bool
	// order is the answered request's place in the order the run's
	// requests went out (minuteGate.sending).
	order uint64
	// othersOnly: the index accepted none of the run's requests in the
	// minute before the refusal (blind: others spent it).
	othersOnly bool
}

// nextMinuteLimit returns what the gate knows of one per-minute dimension
// after an observation. A refusal of a probe (the limit above the proven
// one) falls back to the proven limit, under a ceiling of the refused one.
// Any other refusal caps the limit at what the window held when the index
// refused, at least one request's worth: a window of a minute refuses when
// that much was taken, a bucket that refills over a minute when that much
// or more was (up to twice as much, when it started full), so the least
// seen is the safest; a limit so learned, or lowered, is searched up from.
// A refusal when the index had accepted none of the run's requests in the
// minute before says only that others spent it (another job of the
// project; the run's own requests in flight may be refused too): the
// gate keeps to one request until the index accepts one, then goes back
// to what it knew, or, when the request accepted went out before the
// refused one (the run's own wave answered out of order: a 429 comes back
// at once, an accepted request is embedded first), takes the refusal as
// the run's own after all (blindRefusal; learned as a limit, a
// neighbour's spell of a few minutes left a limit of one request to search
// up from, at 0.2% of the index's for minutes after it). A limit held
// without a refusal is proven and grows (minuteGrowth and the constants
// above say how fast). The estimate of a request's size may
// be off by any factor; the limit is in the same unit, so the error
// cancels.
func nextMinuteLimit(m minuteLimit, o minuteObservation) minuteLimit {
	heldFor := o.now.Sub(m.since)
	near := m.ceiling > 0 && m.ceiling-m.limit <= max(1, int(float64(m.limit)*minuteSearchStep))
	switch {
	case o.accepted && m.blind() && o.order < m.refusal.order:
		back := nextMinuteLimit(*m.before, m.refusal) // the refusal was the run's own: heard before its wave's acceptance
		back.since = o.now
		return back
	case o.accepted && m.blind():
		back := *m.before
		back.since = o.now
		return back
	case o.accepted:
		return m
	case o.refused && o.admittedUnder > m.limit && o.inWindow+o.request > m.limit:
		return m // let in under a limit lowered since, which would have held it back
	case o.refused && (o.othersOnly || m.blind()):
		return blindRefusal(m, o)
	case m.blind():
		return m // one request at a time until the index accepts one
	case o.refused && m.proven > 0 && m.limit > m.proven:
		return minuteLimit{limit: m.proven, proven: m.proven, ceiling: m.limit, since: o.now}
	case o.refused:
		next := max(o.inWindow, o.request, 1)
		if m.limit > 0 && next >= m.limit {
			m.since = o.now // a bucket that started full: the index took more than the limit
			return m
		}
		if next < m.proven {
			m.proven = 0
		}
		return minuteLimit{limit: next, proven: m.proven, step: max(1, int(float64(next)*minuteSearchStep)), since: o.now}
	case !o.held || m.limit == 0:
		return m
	case m.ceiling == 0 && heldFor >= minuteSearchAfter:
		return minuteLimit{limit: m.limit + m.step, proven: m.limit, step: minuteStepGrowth * m.step, since: o.now}
	case m.ceiling > 0 && !near && heldFor >= minuteSearchAfter:
		return minuteLimit{limit: (m.limit + m.ceiling) / 2, proven: m.limit, ceiling: m.ceiling, since: o.now}
	case near && heldFor >= minuteGrowAfter:
		step := minuteStep(m.limit)
		return minuteLimit{limit: m.limit + step, proven: m.limit, step: minuteStepGrowth * step, since: o.now}
	default:
		return m
	}
}

// blindRefusal is nextMinuteLimit's answer to a refusal when the index had
// accepted none of the run's requests in the minute before, or while it
// keeps to one request after such a refusal: the refused request's worth
// (fits cuts a batch that carries it in two: the run's share of the
// minute may be less than a batch), until one is accepted.
func blindRefusal(m minuteLimit, o minuteObservation) minuteLimit {
	before, refusal := m.before, m.refusal
	if before == nil {
		before = &m
		refusal = o
		refusal.othersOnly = false
	}
	return minuteLimit{limit: max(o.request, 1), since: o.now, before: before, refusal: refusal}
}

// blind reports whether m keeps to one request after a blind refusal.
func (m minuteLimit) blind() bool { return m.before != nil }

// minuteStep is minuteGrowth of a limit, at least 1.
func minuteStep(limit int) int { return max(1, int(float64(limit)*minuteGrowth)) }

// minuteUse is the size of a request, or of the window, in the two
// dimensions the gate paces.
type minuteUse struct{ tokens, requests int }

// minutePass is a request the gate admitted.
type minutePass struct {
	at       time.Time // admitted, then sent: the window stays in order
	sentAt   time.Time // zero until sent
	size     minuteUse // zero once refused or withdrawn
	counted  bool      // in the window's sums: not yet a minute old, nor refused
	accepted bool      // the index accepted it
	order    uint64    // its place in the order the requests went out; 0 until sent
	under    minuteUse // the limits it was admitted under
}

// minuteGate is the mechanism: a sliding window over the requests admitted
// in the last minute, and the limits learned. A nil *minuteGate admits
// everything at once.
type minuteGate struct {
	clock clock
	turn  chan struct{} // held by the one request waiting, so that waits do not overlap

	mu sync.Mutex
	// window holds the requests admitted in the last two minutes, oldest
	// first: those of the last minute count in used; the older ones tell
	// what the index had taken in the minute before a refused request
	// was sent, when its answer comes late.
	window   []*minutePass
	used     minuteUse   // the sums of the last minute
	tokens   minuteLimit // learned limits
	requests minuteLimit
	heldAt   time.Time // when a request last waited
	sent     uint64    // requests sent so far (minutePass.order)
}

func newMinuteGate(c clock) *minuteGate {
	return &minuteGate{clock: c, turn: make(chan struct{}, 1)}
}

// wait returns when a request of tokens embedding tokens fits in the
// window, or with ctx's error. The request counts in the window from now:
// done or withdraw must follow.
func (g *minuteGate) wait(ctx context.Context, tokens int) (*minutePass, error) {
	if g == nil {
		return nil, nil
	}
	select {
	case g.turn <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-g.turn }()
	size := minuteUse{tokens: tokens, requests: 1}
	for {
		g.mu.Lock()
		now := g.clock.Now()
		g.advance(now)
		d := g.delay(now, size)
		if d <= 0 {
			p := &minutePass{at: now, size: size, counted: true, under: minuteUse{g.tokens.limit, g.requests.limit}}
			g.window = append(g.window, p)
			g.used.tokens += size.tokens
			g.used.requests++
			g.mu.Unlock()
			return p, nil
		}
		g.heldAt = now
		g.mu.Unlock()
		// Re-checked after the sleep: a refusal meanwhile may have
		// lowered the limit.
		if err := g.clock.Sleep(ctx, d); err != nil {
			return nil, err
		}
	}
}

// done tells the gate how the index answered p; e is nil for a success.
// A refusal takes p out of the window (nothing was embedded) and, when it
// names a per-minute limit, sets that limit.
func (g *minuteGate) done(p *minutePass, e *Error) {
	if g == nil || p == nil {
		return
	}
	if e == nil {
		g.mu.Lock()
		defer g.mu.Unlock()
		p.accepted = true
		now := g.clock.Now()
		g.tokens = nextMinuteLimit(g.tokens, minuteObservation{now: now, accepted: true, order: p.order})
		g.requests = nextMinuteLimit(g.requests, minuteObservation{now: now, accepted: true, order: p.order})
		return
	}
	if e.Class != ClassRateLimited {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	size := p.size
	g.remove(p)
	taken := g.takenBefore(p.sentAt)
	now := g.clock.Now()
	othersOnly := !g.acceptedSince(p.sentAt)
	switch e.Limit {
	case LimitEmbedTokens:
		g.tokens = nextMinuteLimit(g.tokens, minuteObservation{now: now, refused: true, inWindow: taken.tokens, request: size.tokens,
			admittedUnder: p.under.tokens, othersOnly: othersOnly, order: p.order})
	case LimitInferenceRequests:
		if e.Err != nil && perSecond(e.Err.Error()) {
			break // the lane's request rate answers it, not a minute's count
		}
		g.requests = nextMinuteLimit(g.requests, minuteObservation{now: now, refused: true, inWindow: taken.requests, request: 1,
			admittedUnder: p.under.requests, othersOnly: othersOnly, order: p.order})
	}
}

// sending stamps p with the time its request goes out, which may be well
// after the gate admitted it (the lane's own wait): the index counts it
// from then.
func (g *minuteGate) sending(p *minutePass) {
	if g == nil || p == nil {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	p.sentAt = g.clock.Now()
	g.sent++
	p.order = g.sent // not at admission: a request admitted first may wait for its lane, and go long after
	g.restamp(p, p.sentAt)
}

// restamp moves p to the end of the window, at t, counted again if it had
// left the last minute (a request can wait for the lane that long); g.mu
// is held.
func (g *minuteGate) restamp(p *minutePass, t time.Time) {
	if p.size == (minuteUse{}) {
		return
	}
	// p is near the end: admitted a moment ago.
	for i := len(g.window) - 1; i >= 0; i-- {
		if g.window[i] == p {
			g.window = slices.Delete(g.window, i, i+1)
			break
		}
	}
	g.window = append(g.window, p)
	p.at = t
	if !p.counted {
		g.used.tokens += p.size.tokens
		g.used.requests += p.size.requests
		p.counted = true
	}
}

// withdraw takes back a pass whose request was not sent.
func (g *minuteGate) withdraw(p *minutePass) {
	if g == nil || p == nil {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.remove(p)
}

// remove takes p out of the window: refused or not sent; g.mu is held.
func (g *minuteGate) remove(p *minutePass) {
	g.uncount(p)
	p.size = minuteUse{}
}

// uncount takes p's size out of the sums of the last minute, once: a
// request may be answered after it left that minute; g.mu is held.
func (g *minuteGate) uncount(p *minutePass) {
	if p.counted {
		g.used.tokens -= p.size.tokens
		g.used.requests -= p.size.requests
		p.counted = false
	}
}

// takenBefore returns what the requests sent in the minute before t, and
// not refused, carried: what the index had taken when it judged a request
// sent at t (those admitted but still waiting for the lane are not
// there); g.mu is held.
func (g *minuteGate) takenBefore(t time.Time) minuteUse {
	var u minuteUse
	for _, p := range g.window {
		if !p.sentAt.IsZero() && !p.sentAt.After(t) && t.Sub(p.sentAt) < minuteWindow {
			u.tokens += p.size.tokens
			u.requests += p.size.requests
		}
	}
	return u
}

// acceptedSince reports whether the index accepted a request of the run
// sent in the minute before t, or after it; g.mu is held.
func (g *minuteGate) acceptedSince(t time.Time) bool {
	for _, p := range g.window {
		if p.accepted && t.Sub(p.sentAt) <= minuteWindow {
			return true
		}
	}
	return false
}

// advance drops what left the window and lets the limits grow when they
// held requests back long enough without a refusal; g.mu is held.
func (g *minuteGate) advance(now time.Time) {
	for i := 0; i < len(g.window) && now.Sub(g.window[i].at) >= minuteWindow; i++ {
		g.uncount(g.window[i])
	}
	old := 0
	for old < len(g.window) && now.Sub(g.window[old].at) >= 2*minuteWindow {
		old++
	}
	g.window = g.window[old:]
	grow := func(m minuteLimit) minuteLimit {
		return nextMinuteLimit(m, minuteObservation{now: now, held: !g.heldAt.IsZero() && !g.heldAt.Before(m.since)})
	}
	g.tokens, g.requests = grow(g.tokens), grow(g.requests)
}

// delay returns how long until a request of size fits in the window: 0
// when it fits now. A window with nothing in it takes any request, so
// that one larger than a limit still goes; g.mu is held.
func (g *minuteGate) delay(now time.Time, size minuteUse) time.Duration {
	fits := func(u minuteUse) bool {
		return u.requests == 0 ||
			(g.tokens.limit == 0 || u.tokens+size.tokens <= g.tokens.limit) &&
				(g.requests.limit == 0 || u.requests+size.requests <= g.requests.limit)
	}
	u := g.used
	if fits(u) {
		return 0
	}
	for _, p := range g.window {
		if !p.counted {
			continue
		}
		u.tokens -= p.size.tokens
		u.requests -= p.size.requests
		if fits(u) {
			return max(p.at.Add(minuteWindow).Sub(now), time.Millisecond)
		}
	}
	return minuteWindow
}

// fits returns how many of items, from the first, the next request
// carries under the tokens limit learned: minuteRequestShare of one found
// (proven, or under a refused probe's ceiling), the whole of one learned
// from a refusal and searched up from. Items over it go in the fewest
// requests that carry them under it, as even as their records allow (the
// first carries a k-th of their tokens, one record at least, or more
// where the rest would not fit in k-1; the rest is cut again), not as
// full as possible with a small one left over. All of
// them when no limit is known, or for a nil gate. Items that a refusal
// naming the tokens limit answered, and that carry the limit learned or
// more, go in two: the limit may have been learned from them alone (a
// window that held less), and they may be over it alone.
func (g *minuteGate) fits(items []item, refused bool) int {
	if g == nil {
		return len(items)
	}
	g.mu.Lock()
	m := g.tokens
	g.mu.Unlock()
	if m.limit == 0 {
		return len(items)
	}
	most := m.limit // one that waits for a whole minute's tokens waits for ever
	if m.proven > 0 || m.ceiling > 0 {
		most = max(1, int(float64(m.limit)*minuteRequestShare))
	}
	tokens := make([]int, len(items))
	total := 0
	for i := range items {
		tokens[i] = estimateTokens(items[i : i+1])
		total += tokens[i]
	}
	if refused && total >= m.limit {
		most = min(most, max(1, total/2))
	}
	if total <= most {
		return len(items)
	}
	return firstPiece(tokens, total, most)
}

// firstPiece returns how many of the records of tokens, total in all, the
// first of the fewest requests of at most most tokens each carries: as
// near a k-th of the total as the records allow, and enough that the rest
// fits in k-1 requests. A record over most goes alone.
func firstPiece(tokens []int, total, most int) int {
	k := piecesFilled(tokens, most)
	share := total / k
	least := len(tokens) - suffixFilled(tokens, most, k-1)
	n, sum := 1, tokens[0]
	for n < len(tokens) {
		t := tokens[n]
		if sum+t > most || (sum+t > share && n >= least) {
			break
		}
		sum += t
		n++
	}
	return n
}

// piecesFilled returns how many requests of at most most tokens carry
// tokens in order, each filled before the next: the fewest that do.
func piecesFilled(tokens []int, most int) int {
	k, sum := 0, 0
	for i, t := range tokens {
		if i == 0 || sum+t > most {
			k, sum = k+1, 0
		}
		sum += t
	}
	return k
}

// suffixFilled returns how many records at the end of tokens pieces
// requests of at most most tokens carry, filled from the last record back:
// the most that any pieces requests do.
func suffixFilled(tokens []int, most, pieces int) int {
	n, sum, used := 0, 0, 0
	for i := len(tokens) - 1; i >= 0; i-- {
		if used == 0 || sum+tokens[i] > most {
			if used == pieces {
				break
			}
			used, sum = used+1, 0
		}
		sum += tokens[i]
		n++
	}
	return n
}

// overLimit reports whether items, more than one record, carry more tokens
// than the limit learned now: a limit that fell while they waited for
// their turn (a refusal of the request ahead of them) would refuse them
// too. False for a nil gate. The cap under a found limit (fits) is not
// held against them: recutting for it cost more requests and refusals
// than it saved (BENCHMARKS.md).
func (g *minuteGate) overLimit(items []item) bool {
	if g == nil || len(items) < 2 {
		return false
	}
	g.mu.Lock()
	limit := g.tokens.limit
	g.mu.Unlock()
	return limit > 0 && estimateTokens(items) > limit
}

// estimateTokens estimates the embedding tokens of integrated records: a
// token per 4 bytes of their string fields other than the id, rounded up,
// at least 1 a record. Which field the index embeds is not known here;
// the limit is learned in the same unit, so only the estimate's spread
// from record to record matters, not its scale.
func estimateTokens(items []item) int {
	n := 0
	for _, it := range items {
		bytes := 0
		if it.rec != nil {
			for k, v := range *it.rec {
				if k != "_id" && k != "id" {
					bytes += textBytes(v)
				}
			}
		}
		n += max(1, (bytes+3)/4)
	}
	return n
}

// textBytes is the length of v if it is text: a string (cloneRecord holds
// a named string type or a *string as one), or JSON holding one (a
// json.RawMessage, or a value of another type kept as the JSON it encodes
// to).
func textBytes(v any) int {
	switch x := v.(type) {
	case string:
		return len(x)
	case json.RawMessage:
		var s string
		if json.Unmarshal(x, &s) == nil {
			return len(s)
		}
	}
	return 0
}
