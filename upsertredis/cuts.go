package upsertredis

import (
	"context"
	"sync"

	"github.com/redis/go-redis/v9"
)

// cutsHub is a Store's one subscription to its lanes' channels of cuts:
// go-redis gives each PubSub a connection of its own, so a subscription per
// lane would cost Redis a connection per namespace of every process. The
// hub subscribes while a lane of the Store listens, and closes its
// subscription when the last one leaves.
type cutsHub struct {
	rdb redis.UniversalClient

	mu      sync.Mutex
	live    *hubSub                               // nil while no lane listens
	members map[string]map[chan struct{}]struct{} // channel → its members' pokes
}

// hubSub is one subscription of the hub, from the first lane's join to the
// last one's leave.
type hubSub struct {
	ps         *redis.PubSub
	kick, stop chan struct{}
	subscribed map[string]bool // channels asked of Redis; guarded by the hub's mu
}

// listen pokes poke at each cut announced on channel until forget.
// It does not wait for Redis: the subscription is made in the background.
func (h *cutsHub) listen(channel string, poke chan struct{}) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.members == nil {
		h.members = make(map[string]map[chan struct{}]struct{})
	}
	if h.members[channel] == nil {
		h.members[channel] = make(map[chan struct{}]struct{})
	}
	h.members[channel][poke] = struct{}{}
	if h.live == nil {
		h.live = h.start()
	}
	h.live.changed()
}

// forget stops poking poke; the last lane's forget closes the subscription.
func (h *cutsHub) forget(channel string, poke chan struct{}) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.members[channel], poke)
	if len(h.members[channel]) == 0 {
		delete(h.members, channel)
	}
	if h.live == nil {
		return
	}
	if len(h.members) == 0 {
		close(h.live.stop)
		h.live = nil
		return
	}
	h.live.changed()
}

// start opens a subscription with no channel yet (no round trip) and the
// two goroutines that serve it. h.mu is held.
func (h *cutsHub) start() *hubSub {
	s := &hubSub{
		ps:         h.rdb.Subscribe(context.Background()),
		kick:       make(chan struct{}, 1),
		stop:       make(chan struct{}),
		subscribed: make(map[string]bool),
	}
	go h.dispatch(s.ps.Channel())
	go h.subscribe(s)
	return s
}

func (s *hubSub) changed() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// dispatch pokes the members of each message's channel until the
// subscription closes.
func (h *cutsHub) dispatch(msgs <-chan *redis.Message) {
	for msg := range msgs {
		h.mu.Lock()
		for poke := range h.members[msg.Channel] {
			select {
			case poke <- struct{}{}:
			default:
			}
		}
		h.mu.Unlock()
	}
}

// subscribe brings s's channels to its members' at each change, in one
// goroutine so that changes apply in order, and closes s at its stop.
// Closing is not waited for by anyone: while Redis hangs, Close and
// Subscribe wait for the client's own timeouts (seconds), not the store's.
func (h *cutsHub) subscribe(s *hubSub) {
	defer func() { _ = s.ps.Close() }()
	for {
		select {
		case <-s.stop:
			return
		case <-s.kick:
		}
		on, off := h.changes(s)
		// On failure go-redis keeps the channels and subscribes to them
		// again as it reconnects.
		if len(on) > 0 {
			_ = s.ps.Subscribe(context.Background(), on...)
		}
		if len(off) > 0 {
			_ = s.ps.Unsubscribe(context.Background(), off...)
		}
	}
}

// changes returns the channels s must subscribe to and those it must
// leave, and counts them as done.
func (h *cutsHub) changes(s *hubSub) (on, off []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for ch := range h.members {
		if !s.subscribed[ch] {
			s.subscribed[ch] = true
			on = append(on, ch)
		}
	}
	for ch := range s.subscribed {
		if _, ok := h.members[ch]; !ok {
			delete(s.subscribed, ch)
			off = append(off, ch)
		}
	}
	return on, off
}
