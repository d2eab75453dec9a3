package upsertredis

import (
	"context"
	"reflect"
	"sync"
	"time"

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
// without), and its messages dispatched from then on; one that could not
// be opened is tried again resubscribeEvery later. No one waits for this
// goroutine: while Redis hangs, Subscribe and Close wait for the client's
// own timeouts (seconds), not the store's.
func (h *cutsHub) subscribe() {
	var ps *redis.PubSub
	var on *redis.Client // the Ring's shard ps is on
	defer func() {
		if ps != nil {
			safely(func() { _ = ps.Close() })
		}
	}()
	var retry <-chan time.Time
	for {
		select {
		case <-h.stop:
			return
		case <-h.kick:
		case <-retry:
		}
		// A Ring hub follows its channel's shard, checked at each retry:
		// the cut script PUBLISHes there, and a shard hears its own only.
		if now := h.shard(); ps != nil && on != nil && now != nil && now != on {
			safely(func() { _ = ps.Close() })
			ps = nil
			h.unsubscribed([]string{h.key.shard})
		}
		add, off := h.changes()
		switch {
		case ps == nil && len(add) > 0:
			if ps, on = h.open(add); ps == nil {
				h.unsubscribed(add)
				retry = time.After(resubscribeEvery)
				continue
			}
			retry = nil
			go h.dispatch(ps.Channel())
		case len(add) > 0:
			// On failure go-redis keeps the channels and subscribes to
			// them again as it reconnects.
			safely(func() { _ = ps.Subscribe(context.Background(), add...) })
		}
		if ps != nil && len(off) > 0 {
			safely(func() { _ = ps.Unsubscribe(context.Background(), off...) })
		}
		if on != nil {
			retry = time.After(resubscribeEvery)
		}
	}
}

// resubscribeEvery is how long a hub waits to open its subscription
// again after it could not: as long as a member alone waits to try Redis
// again by default.
const resubscribeEvery = time.Second

// open opens a subscription to channels, or returns nil if the client
// could not (a Ring all of whose shards are down, or closed); for a Ring,
// it is opened on the channel's shard, which it returns.
func (h *cutsHub) open(channels []string) (ps *redis.PubSub, shard *redis.Client) {
	if h.key.shard == "" {
		safely(func() { ps = h.rdb.Subscribe(context.Background(), channels...) })
		return ps, nil
	}
	if shard = h.shard(); shard == nil {
		return nil, nil
	}
	safely(func() { ps = shard.Subscribe(context.Background(), channels...) })
	if ps == nil {
		return nil, nil
	}
	return ps, shard
}

// shard returns the client of the shard a Ring routes the hub's channel
// to, or nil if none (all down, closed) or the hub is not a Ring's.
func (h *cutsHub) shard() *redis.Client {
	ring, ok := h.rdb.(*redis.Ring)
	if !ok || h.key.shard == "" {
		return nil
	}
	var c *redis.Client
	safely(func() { c, _ = ring.GetShardClientForKey(h.key.shard) })
	return c
}

// safely runs f, a call of go-redis, and recovers its panic: go-redis
// panics where it should fail (a Ring's Subscribe, with all its shards
// down or the Ring closed), and Redis must never crash the process.
func safely(f func()) {
	defer func() { _ = recover() }()
	f()
}

// unsubscribed counts channels as not subscribed to, so that the next
// change subscribes to those that still have members.
func (h *cutsHub) unsubscribed(channels []string) {
	hubs.mu.Lock()
	defer hubs.mu.Unlock()
	for _, ch := range channels {
		delete(h.subscribed, ch)
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
