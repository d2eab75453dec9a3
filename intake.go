package upsert

import (
	"context"
	"fmt"
	"hash/maphash"
	"math"
	"math/bits"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pinecone-io/go-pinecone/v5/pinecone"
)

// intake takes records into a run, in input order: it checks them, routes
// them to their namespace and puts them in batches. All checks a whole
// slice first and sends each id once; a stream can't look ahead, so it
// keeps ids in order instead: a record whose id is still in flight waits
// for the earlier one to settle, so that the last one wins.
//
// Producers take turns (see lock): Writer.Add may be called from many
// goroutines, and a background flush sends batches that waited too long.
type intake struct {
	r         *run
	turn      chan struct{} // holds a token while a producer has its turn
	closed    atomic.Bool   // Writer.Close began: no record is taken after its flush
	closing   chan struct{} // closed when closed is set, for the Adds waiting for room
	validator validator
	nsOf      func(it *item) string // nil: every record goes to cfg.namespace
	next      int                   // input position of the next record
	ordered   bool                  // keep ids in flight in order (streams)
	seed      maphash.Seed
	hold      holding // what waits before dispatch (holding.go)

	flightMu   sync.Mutex
	inFlight   map[uint64]int32 // records in the pipeline, by hash of namespace and id
	flightDone chan struct{}    // closed and replaced when one of them settles
	ambiguous  ambiguousIDs     // ids whose last record settled after a request without an answer
	exposed    map[int]int      // by position: a record taken after such a record of its id, and that one's position

	unsettled atomic.Int64 // records a stream or writer took in and that have not settled
	settled   *watermark   // input positions settled, for Writer.Flush; nil for All and Stream
	ckpt      checkpointKept
	acks      *acker // delivers the acks of WithAcks; nil without it
}

// checkpointKept is what an intake keeps of its checkpoint (checkpoint.go);
// its marks are nil when no checkpoint is kept.
type checkpointKept struct {
	marks     *watermark   // input positions settled for good
	loaded    int64        // the position the checkpoint held at the start
	saved     atomic.Int64 // the position the checkpoint holds, as last saved
	stopSaver func()       // stops the periodic saves
}

// intakeMode says what an intake keeps for its caller.
type intakeMode int

const (
	forAll    intakeMode = iota // a slice: ids sent once, nothing kept in order
	forStream                   // ids kept in order
	forWriter                   // ids in order, and settled positions for Flush
)

func newIntake(r *run, mode intakeMode) *intake {
	in := &intake{r: r, ordered: mode != forAll, seed: maphash.MakeSeed(), turn: make(chan struct{}, 1), closing: make(chan struct{}), validator: validator{index: r.shape}}
	if in.ordered {
		in.inFlight = make(map[uint64]int32)
		r.routes.forgetIdle = true
	}
	if mode == forWriter {
		in.settled = &watermark{}
	}
	if r.cfg.acks.f != nil && mode != forAll {
		in.acks = newAcker(r.cfg.acks, func(e *Error) { r.halt(e) }, r.unacked)
	}
	in.hold.maxRecords, in.hold.maxBytes, in.hold.maxRoutes = maxHeld(r.kind), maxHeldBytes(r.kind), math.MaxInt
	if r.routes.forgetIdle {
		in.hold.maxRoutes = maxHeldRoutes
	}
	if n := r.cfg.maxHeld; n > 0 {
		in.hold.maxRecords = n // a test's, to make the bounds bite
		in.hold.maxRoutes = min(in.hold.maxRoutes, max(2, n/2))
	}
	if f := r.cfg.namespaceOf; f != nil {
		in.nsOf = f
	}
	r.onSettle = in.settle
	return in
}

// lock waits for the producers' turn, or until ctx ends. A producer
// waits for room in a namespace without the turn (push, Writer.Flush and
// Close); it holds the turn while it waits only for a full window of acks,
// at the run's end (close) and in All, its only producer. The others wait
// no longer than their contexts allow.
func (in *intake) lock(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err // an ended context takes no turn: select picks a ready case at random
	}
	select {
	case in.turn <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (in *intake) unlock() { <-in.turn }

// namespace returns the namespace of it. A nil record, which fails as
// invalid, is not shown to the caller's namespace function: under it, its
// namespace is "" (documented at Failure.Namespace). An integrated
// record is shown as the caller gave it, before own copies it: the copy
// holds text as plain strings, so that a function reading a field of the
// caller's own type would find nothing there.
func (in *intake) namespace(it *item) string {
	switch {
	case in.nsOf == nil:
		return in.r.cfg.namespace
	case it.vec == nil && it.rec == nil:
		return ""
	}
	return in.nsOf(it)
}

// own replaces the integrated record of it, which [Records] passes on as
// the caller gave it, by the run's copy (cloneRecord), which is what is
// checked, sent and reported: the caller may change or reuse its record
// once it is taken. It is called as soon as the namespace is known, while
// the caller's iterator waits for the record to be taken.
func (in *intake) own(it *item) {
	if it.rec != nil {
		it.rec = cloneRecord(it.rec)
	}
}

// check validates it and fills in its id and size; it returns the rule it
// breaks, or nil.
func (in *intake) check(it *item, rt *route) error {
	it.ns = namespaceKey(rt.namespace)
	var err error
	if it.vec != nil || it.rec == nil && in.r.kind == vectorKind {
		it.size, err = in.validator.check(it.vec)
		if it.vec != nil {
			it.id = it.vec.Id
		}
	} else {
		it.id, it.size, err = checkRecord(it.rec)
	}
	if err == nil && rt.invalid != nil {
		err = rt.invalid
	}
	if err == nil && rt.overhead+it.size > in.r.kind.maxBytes {
		err = fmt.Errorf("encodes to %d bytes; a request may carry at most %d", it.size, in.r.kind.maxBytes-rt.overhead)
	}
	return err
}

// admitAll takes a whole slice in, for All, and sends it: it reports the
// invalid records and sends, of each id, only the last valid occurrence in
// its namespace, counting the others as duplicates.
//
// Sending starts at once rather than after every record was checked: a
// first pass only hashes the ids to find those that come again later
// (tens of milliseconds for a million records), and the checks run as the
// records are batched. An occurrence that a later one may replace is held
// back until the last occurrence of its id is checked.
//
// A panic of the caller's namespace function, in the first pass, fails
// every record with errCallerPanicked before it reaches the caller:
// nothing was taken yet.
func (in *intake) admitAll(records []*pinecone.Vector) {
	r := in.r
	r.stats.records.Store(int64(len(records)))
	passed := false
	defer func() {
		if !passed {
			in.abort(nil, func() { in.failUntaken(records, 0, nil) })
		}
	}()
	routeOf, flags := in.firstPass(records)
	passed = true
	var held map[string]item // the latest valid occurrence of an id that comes again
	var it item              // reused: in.check takes its address
	for i, v := range records {
		if i%64 == 0 && r.runCtx.Err() != nil {
			// Nothing more is looked at: the rest fails as it is.
			in.failUntaken(records, i, held)
			return
		}
		it = item{seq: i, vec: v}
		rt := routeOf(i)
		err := in.check(&it, rt)
		if err != nil {
			in.reject(&it, err)
		}
		if flags[i] == 0 {
			if err == nil {
				in.sendTaken(rt, it)
			}
			continue
		}
		held = in.takeRepeated(held, rt, it, flags[i], err)
	}
}

// firstPass finds the route of each record and flags the ids that occur
// more than once in a namespace (repeats).
func (in *intake) firstPass(records []*pinecone.Vector) (routeOf func(int) *route, flags []uint8) {
	r := in.r
	var one *route    // the route of every record, without WithNamespaceOf
	var many []*route // the route of each record, with it
	routeOf = func(i int) *route {
		if many != nil {
			return many[i]
		}
		return one
	}
	if in.nsOf != nil {
		many = make([]*route, len(records))
		var it item // reused: in.namespace takes its address
		for i, v := range records {
			it = item{seq: i, vec: v}
			many[i] = r.route(in.namespace(&it))
		}
	} else {
		one = r.route(r.cfg.namespace)
	}
	// Repeats are told apart by route and id (below): the hash only sorts
	// them, and one route needs no namespace in it (a hash a record less).
	hashes := make([]uint64, len(records))
	for i, v := range records {
		switch {
		case v == nil:
		case many != nil:
			hashes[i] = in.recordKey(many[i].namespace, v.Id)
		default:
			hashes[i] = maphash.String(in.seed, v.Id)
		}
	}
	flags = repeats(hashes, func(i, j int) bool {
		return records[i] != nil && records[j] != nil && records[i].Id == records[j].Id && routeOf(i) == routeOf(j)
	})
	return routeOf, flags
}

// recordKey hashes a record's namespace (by its key: "" and "__default__"
// are one) and id, the key of ids in flight and of ambiguous ids. The
// halves' hashes are combined unevenly: a symmetric combination such as
// XOR gives a pair and its swap one key, and an id equal to its namespace
// the key 0.
func (in *intake) recordKey(namespace, id string) uint64 {
	const odd = 0x9e3779b97f4a7c15 // 2^64 / φ: spreads the namespace's hash over every bit
	return maphash.String(in.seed, namespaceKey(namespace))*odd + maphash.String(in.seed, id)
}

// takeRepeated takes in an occurrence of an id that occurs more than once
// in its namespace (flag from repeats; err its check's verdict): the last
// occurrence is sent, or, when it is invalid, the latest valid one before
// it; an earlier valid one is held until then. It returns held, made when
// needed.
func (in *intake) takeRepeated(held map[string]item, rt *route, it item, flag uint8, err error) map[string]item {
	key := namespaceKey(rt.namespace) + "\x00" + it.vec.Id
	prev, hasPrev := held[key]
	if err == nil && hasPrev {
		in.r.stats.duplicates.Add(1)
	}
	switch {
	case flag&repeatedLater != 0 && err == nil:
		if held == nil {
			held = make(map[string]item)
		}
		held[key] = it
	case flag&repeatedLater == 0:
		delete(held, key)
		if err == nil {
			in.sendTaken(rt, it)
		} else if hasPrev {
			in.sendTaken(rt, prev)
		}
	}
	return held
}

// sendTaken batches a record All took in. With the run's context,
// makeRoom fails nothing; once the run stops, the batches that the record
// joins fail.
func (in *intake) sendTaken(rt *route, it item) {
	ctx := in.r.runCtx
	if in.makeRoom(it.size, rt) == errNoRoom {
		_ = in.waitRoom(ctx, nil, func() error { return in.makeRoom(it.size, rt) })
	}
	// All has no flusher: a ready batch goes before the next one fills
	// (makeRoom may have left one).
	ready := func() error { return in.dispatchReady(rt) }
	if len(rt.ready.items) > 0 {
		_ = in.waitRoom(ctx, nil, ready)
	}
	if in.enqueue(rt, it) {
		_ = in.waitRoom(ctx, nil, ready)
	}
}

// failUntaken fails, after the run stopped, the records of All from
// position from on, which were never looked at, and those held back for a
// later occurrence of their id. The records' failures are built only once
// the result is, in one piece and in order (see runResults.untaken): a canceled
// run over millions of records returns at once.
func (in *intake) failUntaken(records []*pinecone.Vector, from int, held map[string]item) {
	r := in.r
	e := r.stopError()
	waiting := make([]item, 0, len(held))
	for _, it := range held {
		waiting = append(waiting, it)
	}
	r.failAll(waiting, e, 0, false)
	r.results.untaken = untaken{records: records[from:], from: from, err: e}
	if in.nsOf == nil {
		r.results.untaken.namespace = namespaceKey(r.cfg.namespace)
	}
	n := len(records) - from
	var samples []Failure
	for i := range min(n, maxFailureSamples) {
		samples = append(samples, r.results.untaken.failure(i))
	}
	r.stats.fail(samples)
	r.stats.failMore(e, n-len(samples))
	if observersHaveFailure(r.cfg.observers) {
		for i := range n {
			r.cfg.observers.failure(r.results.untaken.failure(i))
		}
	}
}

// Flags of repeats.
const (
	repeatedLater   = 1 << iota // the id comes again later
	repeatedEarlier             // the id came before
)

// repeats flags the records whose id comes again later, or came before,
// given the hash of each record's namespace and id, and same, which tells
// whether two records of equal hashes have the same namespace and id.
//
// It is an open-addressing table of hashes, filled from the end: a map of
// a million entries costs ten times as much to fill, and All sends nothing
// until this is done. Records whose hashes collide take separate slots.
func repeats(hashes []uint64, same func(i, j int) bool) []uint8 {
	flags := make([]uint8, len(hashes))
	// A third of the slots stay empty, so that a search stops soon.
	size := uint64(len(hashes) + len(hashes)/2 + 1)
	keys := make([]uint64, size)
	slots := make([]int32, size) // index of the record + 1; 0 for an empty slot
	for i := len(hashes) - 1; i >= 0; i-- {
		h := hashes[i]
		start, _ := bits.Mul64(h, size) // h scaled to [0, size)
		for j := start; ; {
			k := slots[j]
			if k == 0 {
				keys[j], slots[j] = h, int32(i+1)
				break
			}
			if keys[j] == h && same(int(k-1), i) {
				flags[i] |= repeatedLater
				flags[k-1] |= repeatedEarlier
				// The slot keeps this earlier occurrence: the next
				// one found earlier still is flagged against it.
				slots[j] = int32(i + 1)
				break
			}
			if j++; j == size {
				j = 0
			}
		}
	}
	return flags
}

// push takes one record of a stream in, with the tag of its ack. It
// returns an error, with the record not taken, when ctx ends before it is
// the caller's turn, before there is room for the record (in the pipeline,
// in the window of acks) or before an earlier record of its id has
// settled; when the run has stopped; or [ErrClosed] after Writer.Close.
//
// It waits for room in the record's namespace, for room in what is held
// and for an earlier record of its id without holding the producers'
// turn, so that the records of other namespaces are taken meanwhile: each
// pass takes the turn and either takes the record or leaves nothing
// behind, and tells what to wait for before the next. The namespace
// function is called once, on the first pass.
func (in *intake) push(ctx context.Context, p *pushing) error {
	for {
		if in.closed.Load() { // at once, also while another call has the turn
			return ErrClosed
		}
		finished, settled, err := in.pushPass(ctx, p)
		if finished == nil {
			return err
		}
		select {
		case <-finished:
		case <-settled:
		case <-ctx.Done():
			return ctx.Err()
		case <-in.r.runCtx.Done(): // the next pass returns the stop error
		case <-in.closing: // the next pass returns ErrClosed
		}
	}
}

// pushing is a record that push is taking in, between its passes.
type pushing struct {
	it     item
	tag    any
	ns     string // its namespace, once routed
	routed bool
}

// pushPass is one pass of push, under the producers' turn. It returns the
// record's outcome, or, when the record must wait (errNoRoom from
// tryPush), the channels to wait on before the next pass: taken under the
// turn, before the last try, so that no wakeup is lost.
func (in *intake) pushPass(ctx context.Context, p *pushing) (finished, settled <-chan struct{}, err error) {
	if err := in.lock(ctx); err != nil {
		return nil, nil, err
	}
	defer in.unlock()
	finished, err = in.r.tryOrWatch(func() (err error) {
		settled, err = in.tryPush(ctx, p)
		return err
	}, func() *route { return in.r.route(p.ns) }) // routed by the first try that found no room
	if err != errNoRoom {
		return nil, nil, err
	}
	return finished, settled, nil
}

// tryPush takes p's record in if it can now. It returns errNoRoom, with
// nothing taken, when the record must wait for a batch to finish (room in
// its namespace, in what is held), or, with settled, for an earlier record
// of its id to settle.
func (in *intake) tryPush(ctx context.Context, p *pushing) (settled <-chan struct{}, err error) {
	if in.closed.Load() { // Close began while this call waited
		return nil, ErrClosed
	}
	r := in.r
	if err := r.runCtx.Err(); err != nil {
		return nil, r.stopError()
	}
	if in.acks != nil && in.acks.full(in.next) {
		if err := in.waitAckRoom(ctx); err != nil {
			return nil, err
		}
	}
	it := &p.it
	it.seq = in.next
	if !p.routed {
		p.ns = in.namespace(it)
		in.own(it)
		p.routed = true
	}
	rt := r.route(p.ns) // on every pass: an idle route may be forgotten while the record waits
	// A record that breaks a rule fails at once, whatever its namespace's
	// room; the others are taken only once their batch can move. Checked
	// on every pass: the index's shape may be learnt while it waits.
	if err := in.check(it, rt); err != nil {
		in.take(p.tag)
		in.reject(it, err)
		return nil, nil
	}
	if err := in.dispatchReady(rt); err != nil {
		return nil, err
	}
	if err := in.makeRoom(it.size, rt); err != nil {
		return nil, err
	}
	if len(rt.ready.items) > 0 { // makeRoom made rt's current batch ready
		if err := in.dispatchReady(rt); err != nil {
			return nil, err
		}
	}
	if in.ordered {
		// By the namespace's key: a route made again after its drop may
		// carry the namespace's other name ("" or "__default__").
		it.hash = in.recordKey(rt.namespace, it.id)
		if replaced := in.replacePending(rt, *it); replaced {
			in.take(p.tag)
			return nil, nil
		}
		if ch := in.inFlightOf(rt, it.hash); ch != nil {
			return ch, errNoRoom
		}
		in.markInFlight(it)
	}
	in.take(p.tag)
	in.enqueue(rt, *it)
	return nil, nil
}

// markInFlight counts it among the records of its id in flight, and marks
// it exposed to an earlier record of its id whose request may land late.
func (in *intake) markInFlight(it *item) {
	in.flightMu.Lock()
	defer in.flightMu.Unlock()
	in.inFlight[it.hash]++
	if pos, ok := in.ambiguous.lookup(in.r.cfg.clock.Now(), it.hash); ok {
		if in.exposed == nil {
			in.exposed = make(map[int]int)
		}
		in.exposed[it.seq] = pos
	}
}

// take counts a record as taken in, at the next input position, with the
// tag of its ack.
func (in *intake) take(tag any) {
	if in.acks != nil {
		in.acks.take(in.next, tag)
	}
	in.next++
	in.r.stats.records.Add(1)
	in.unsettled.Add(1)
}

// stopTaking marks that Writer.Close began: push returns [ErrClosed] from
// now on, also to the Adds waiting for room.
func (in *intake) stopTaking() {
	if !in.closed.Swap(true) {
		close(in.closing)
	}
}

// refuse reports a record that a stream pulled from its input but push
// could not take in, because err stopped it: it fails with that cause, in
// its namespace, as a record taken in would.
func (in *intake) refuse(p *pushing, err error) {
	_ = in.lock(context.Background())
	defer in.unlock()
	it := p.it
	it.seq = in.next
	if !p.routed { // before take: a panic of the caller's code leaves nothing taken
		p.ns = in.namespace(&it)
		in.own(&it)
	}
	it.ns = namespaceKey(p.ns)
	in.take(nil)
	switch {
	case it.vec != nil:
		it.id = it.vec.Id
	case it.rec != nil:
		it.id, _, _ = checkRecord(it.rec)
	}
	e := asError(err)
	if e == nil {
		e = &Error{Class: ClassCanceled, Err: err}
	}
	resend := !settlesForGood(e, 0)
	fs := []Failure{{Index: it.seq, ID: it.id, Namespace: it.ns, Record: it.vec, Integrated: it.rec, Class: e.Class, Err: e, Resend: resend}}
	in.r.report(fs)
	in.positionsSettled([]item{it}, false)
	in.ackSettled([]item{it}, fs, nil, ackFailed, resend)
}

// enqueue puts it in its route's batch and dispatches the batch when it is
// full; rt has no ready batch. A batch that cannot be dispatched now stays
// ready, stalled, for the next push, flush or the flusher, and enqueue
// returns true; the record is taken either way.
func (in *intake) enqueue(rt *route, it item) (stalled bool) {
	gen, held := rt.batcher.gen, holds(rt)
	full, ok := rt.batcher.add(it)
	in.hold.records++
	in.hold.bytes += it.size
	if rt.batcher.gen != gen && len(rt.batcher.cur.items) > 0 {
		in.hold.started(rt, in.r.cfg.clock.Now())
	}
	if !ok {
		in.hold.track(rt, held)
		return false
	}
	in.hold.trim()
	rt.ready = full
	in.hold.track(rt, held)
	return in.dispatchReady(rt) == errNoRoom
}

// replacePending replaces a record of the same id waiting in rt's current
// batch: the later one wins, and the earlier one is a duplicate.
func (in *intake) replacePending(rt *route, it item) bool {
	in.flightMu.Lock()
	n := in.inFlight[it.hash]
	in.flightMu.Unlock()
	if n == 0 {
		return false
	}
	items := rt.batcher.cur.items
	for i := range items {
		if items[i].hash == it.hash && items[i].id == it.id {
			old := items[i]
			fits := rt.batcher.bytes-old.size+it.size <= rt.batcher.maxBytes
			in.flightMu.Lock()
			if pos, ok := in.exposed[old.seq]; ok { // the replaced record's exposure is this one's now
				delete(in.exposed, old.seq)
				in.exposed[it.seq] = pos
			}
			if !fits {
				in.forgetInFlightLocked(old.hash)
			}
			in.flightMu.Unlock()
			in.r.stats.duplicates.Add(1)
			in.positionsSettled([]item{old}, true)
			in.ackSettled([]item{old}, nil, nil, ackReplaced, false)
			if !fits {
				// The earlier record leaves its batch, and this one is
				// taken as any other: in this batch it would pass the
				// request's size. (Alone, a record always fits.)
				rt.batcher.cur.items = slices.Delete(items, i, i+1)
				rt.batcher.bytes -= old.size
				in.hold.records--
				in.hold.bytes -= old.size
				in.hold.track(rt, true)
				return false
			}
			rt.batcher.bytes += it.size - old.size
			in.hold.bytes += it.size - old.size
			items[i] = it
			return true
		}
	}
	return false
}

// inFlightOf returns, when a record of hash h, whose route is rt, is in
// flight, a channel closed when one settles; nil when none is. The earlier
// record may wait in a batch not yet sent: it dispatches rt's batches as
// far as they can go now.
func (in *intake) inFlightOf(rt *route, h uint64) <-chan struct{} {
	in.flightMu.Lock()
	if in.inFlight[h] == 0 {
		in.flightMu.Unlock()
		return nil
	}
	if in.flightDone == nil {
		in.flightDone = make(chan struct{})
	}
	ch := in.flightDone
	in.flightMu.Unlock()
	_ = in.dispatchRoute(rt)
	return ch
}

// forgetInFlightLocked counts a record of hash h as no longer in flight,
// and wakes those waiting for one to settle; in.flightMu is held.
func (in *intake) forgetInFlightLocked(h uint64) {
	if n := in.inFlight[h] - 1; n > 0 {
		in.inFlight[h] = n
	} else {
		delete(in.inFlight, h)
	}
	if in.flightDone != nil {
		close(in.flightDone)
		in.flightDone = nil
	}
}

// settle is told by the run of records that landed or failed, and how.
// Records that did not settle for good (settlesForGood) are not passed by
// the checkpoint.
func (in *intake) settle(items []item, o outcome) {
	var stale []Stale
	if in.ordered {
		in.flightMu.Lock()
		if len(in.exposed) > 0 {
			stale = in.settleExposed(items, o.landed)
		}
		now := time.Time{}
		if o.ambiguous {
			now = in.r.cfg.clock.Now()
		}
		for _, it := range items {
			in.forgetInFlightLocked(it.hash)
			if o.ambiguous {
				in.ambiguous.add(now, it.hash, it.seq)
			}
		}
		in.flightMu.Unlock()
		in.r.reportStale(stale)
	}
	in.positionsSettled(items, o.final)
	state := ackLanded
	if !o.landed {
		state = ackFailed
	}
	in.ackSettled(items, o.failures, stale, state, !o.final)
}

// settleExposed forgets the exposure of items and returns, when they
// landed, those that may be stale. flightMu is held.
func (in *intake) settleExposed(items []item, landed bool) []Stale {
	var stale []Stale
	for _, it := range items {
		pos, ok := in.exposed[it.seq]
		if !ok {
			continue
		}
		delete(in.exposed, it.seq)
		if landed {
			stale = append(stale, Stale{Index: it.seq, ID: it.id, Namespace: it.ns, Record: it.vec, Integrated: it.rec, Earlier: pos})
		}
	}
	return stale
}

// positionsSettled marks the input positions of items as settled: for
// Flush, and, when final, for the checkpoint.
func (in *intake) positionsSettled(items []item, final bool) {
	if in.ckpt.marks != nil && final {
		in.ckpt.marks.done(items)
	}
	if in.settled != nil {
		in.settled.done(items)
	}
	in.unsettled.Add(-int64(len(items)))
}

// reject reports a record that broke a rule; it is never sent.
func (in *intake) reject(it *item, cause error) {
	err := &Error{Class: ClassInvalid, Err: fmt.Errorf("record %d (id %s): %w", it.seq, quoteID(it.id), cause)}
	fs := []Failure{{Index: it.seq, ID: it.id, Namespace: it.ns, Record: it.vec, Integrated: it.rec, Class: ClassInvalid, Err: err}}
	in.r.report(fs)
	in.positionsSettled([]item{*it}, true)
	in.ackSettled([]item{*it}, fs, nil, ackFailed, false)
}

// close sends whatever is left and waits for the run to end, and for the
// last ack to be delivered. end, when not nil, makes the call's error of
// the run's (see run.finish).
func (in *intake) close(end func(error) error) (Result, error) {
	_ = in.lock(context.Background())
	defer in.unlock()
	// Waits for room; what cannot be dispatched because the run stopped
	// fails.
	_ = in.flushAll(in.r.runCtx, nil)
	in.r.producerDone()
	if in.acks == nil {
		return in.r.finish(end)
	}
	in.r.pool.wg.Wait()
	_ = in.acks.wait(context.Background(), nil, nil, in.next, true)
	return in.r.finish(func(err error) error {
		err = in.acks.err(err)
		if end != nil {
			err = end(err)
		}
		return err
	})
}
