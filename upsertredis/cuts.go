package upsertredis

import (
	"context"
	"reflect"
	"sync"

	"github.com/redis/go-redis/v9"
)

// hubs holds the subscriptions to the lanes' channels of cuts, one per
// Redis client for all the Stores made with it: go-redis gives each PubSub
// a connection of its own, so a subscription per lane, or per Store
// (Shared makes one per call), would cost Redis a connection per namespace
// or per call of every process. A Ring's shards do not pass each other's
// messages on: its hubs are one per channel, on the shard the channel's
// hash tag picks, as the lane's keys and scripts are. mu guards every hub.
var hubs = struct {
	mu sync.Mutex
	of map[hubKey]*cutsHub
}{of: make(map[hubKey]*cutsHub)}

type hubKey struct {
	rdb   redis.UniversalClient // nil for a client that cannot be a map key
	store *Store                // the Store, for such a client
	shard string                // the channel, for a Ring
}

// cutsHub is one subscription, from its first lane's join to its last
// one's leave, which removes it from hubs.
type cutsHub struct {
	rdb        redis.UniversalClient
	key        hubKey
	members    map[string]map[chan struct{}]struct{} // channel → its members' pokes
	subscribed map[string]bool                       // channels asked of Redis
	kick, stop chan struct{}
}

// listen pokes poke at each cut announced on channel until forget, through
// the hub of s's client, which it returns. It does not wait for Redis: the
// subscription is made in the background.
func listen(s *Store, channel string, poke chan struct{}) *cutsHub {
	hubs.mu.Lock()
	defer hubs.mu.Unlock()
	k := hubKeyOf(s, channel)
	h := hubs.of[k]
	if h == nil {
		h = &cutsHub{
			rdb: s.rdb, key: k,
			members:    make(map[string]map[chan struct{}]struct{}),
			subscribed: make(map[string]bool),
			kick:       make(chan struct{}, 1),
			stop:       make(chan struct{}),
		}
		hubs.of[k] = h
		go h.subscribe()
	}
	if h.members[channel] == nil {
		h.members[channel] = make(map[chan struct{}]struct{})
	}
	h.members[channel][poke] = struct{}{}
	h.changed()
	return h
}

func hubKeyOf(s *Store, channel string) hubKey {
	var k hubKey
	if reflect.TypeOf(s.rdb).Comparable() {
		k.rdb = s.rdb
	} else {
		k.store = s
	}
	if _, ring := s.rdb.(*redis.Ring); ring {
		k.shard = channel
	}
	return k
}

// forget stops poking poke; the hub's last member's forget closes it.
func (h *cutsHub) forget(channel string, poke chan struct{}) {
	hubs.mu.Lock()
	defer hubs.mu.Unlock()
	delete(h.members[channel], poke)
	if len(h.members[channel]) == 0 {
		delete(h.members, channel)
	}
	if len(h.members) > 0 {
		h.changed()
		return
	}
	if hubs.of[h.key] == h {
		delete(hubs.of, h.key)
		close(h.stop)
	}
}

func (h *cutsHub) changed() { nudge(h.kick) }

// nudge signals c, a channel of one slot, unless a signal already waits.
func nudge(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// subscribe brings the subscription's channels to the members' at each
// change, in one goroutine so that changes apply in order, until stop.
// The subscription is opened with its first channels (a Ring refuses one
// without), and its messages dispatched from then on. No one waits for
// this goroutine: while Redis hangs, Subscribe and Close wait for the
// client's own timeouts (seconds), not the store's.
func (h *cutsHub) subscribe() {
	var ps *redis.PubSub
	defer func() {
		if ps != nil {
			_ = ps.Close()
		}
	}()
	for {
		select {
		case <-h.stop:
			return
		case <-h.kick:
		}
		on, off := h.changes()
		// On failure go-redis keeps the channels and subscribes to them
		// again as it reconnects.
		switch {
		case ps == nil && len(on) > 0:
			ps = h.rdb.Subscribe(context.Background(), on...)
			go h.dispatch(ps.Channel())
		case len(on) > 0:
			_ = ps.Subscribe(context.Background(), on...)
		}
		if ps != nil && len(off) > 0 {
			_ = ps.Unsubscribe(context.Background(), off...)
		}
	}
}

// changes returns the channels to subscribe to and those to leave, and
// counts them as done.
func (h *cutsHub) changes() (on, off []string) {
	hubs.mu.Lock()
	defer hubs.mu.Unlock()
	for ch := range h.members {
		if !h.subscribed[ch] {
			h.subscribed[ch] = true
			on = append(on, ch)
		}
	}
	for ch := range h.subscribed {
		if _, ok := h.members[ch]; !ok {
			delete(h.subscribed, ch)
			off = append(off, ch)
		}
	}
	return on, off
}

// dispatch pokes the members of each message's channel until the
// subscription closes.
func (h *cutsHub) dispatch(msgs <-chan *redis.Message) {
	for msg := range msgs {
		hubs.mu.Lock()
		for poke := range h.members[msg.Channel] {
			nudge(poke)
		}
		hubs.mu.Unlock()
	}
}
