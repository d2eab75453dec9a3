package upsert

import (
	"reflect"
	"strings"
	"sync"

	"github.com/pinecone-io/go-pinecone/v5/pinecone"
)

// Writers of one process that write into one index at the same time share
// a Limiter by default. With a Limiter each, they would learn their
// shares from their own 429s, which come to each with the same chance per
// request, and their shares would drift apart (four writers on one
// namespace, BENCHMARKS.md: the fastest gets 1.1 to 1.6 times the
// slowest, and the four together draw more 429s than one would). Sharing
// is only among calls that overlap: a call that starts when no other call
// writes to its index starts with nothing learned, as it would alone.
var shared struct {
	mu       sync.Mutex
	limiters map[any]*sharedLimiter // by indexKey
}

type sharedLimiter struct {
	limiter *Limiter
	users   int // calls running with it
}

// shareLimiter returns the Limiter of the calls that write through idx's
// index now, a new one when there are none, and the function that ends
// this call's use of it. The function may be called more than once.
func shareLimiter(idx *pinecone.IndexConnection) (*Limiter, func()) {
	key := indexKey(idx)
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.limiters == nil {
		shared.limiters = make(map[any]*sharedLimiter)
	}
	s, ok := shared.limiters[key]
	if !ok {
		s = &sharedLimiter{limiter: NewLimiter()}
		shared.limiters[key] = s
	}
	s.users++
	var once sync.Once
	return s.limiter, func() {
		once.Do(func() {
			shared.mu.Lock()
			defer shared.mu.Unlock()
			if s.users--; s.users == 0 {
				delete(shared.limiters, key)
			}
		})
	}
}

// indexKey identifies the index that idx writes to: its host, so that
// connections made separately to one index share. The SDK does not export
// the host; it keeps it as the target of the connection's gRPC client,
// which is read here with reflect (reading unexported fields that way is
// allowed; nothing is written). Should an SDK or gRPC version move it,
// each connection is its own key: writers share less, and nothing else
// changes. TestShareLimiter pins the field names.
func indexKey(idx *pinecone.IndexConnection) any {
	if host := indexHost(idx); host != "" {
		return host
	}
	return idx
}

// indexHost returns the host idx connects to ("name.svc.pinecone.io"),
// spelled as canonicalHost says, or "" when it cannot be read.
func indexHost(idx *pinecone.IndexConnection) string {
	return canonicalHost(indexTarget(idx))
}

// indexTarget returns the target idx's gRPC client dials, as the caller
// spelled it without its scheme ("name.svc.pinecone.io:443"), read as
// indexKey says, or "" when it cannot be read.
func indexTarget(idx *pinecone.IndexConnection) string {
	conn := reflect.ValueOf(idx).Elem().FieldByName("grpcConn")
	if conn.Kind() == reflect.Pointer && !conn.IsNil() && conn.Elem().Kind() == reflect.Struct {
		target := conn.Elem().FieldByName("target")
		if target.Kind() == reflect.String {
			return target.String()
		}
	}
	return ""
}

// canonicalHost spells one index's host one way, whichever way each
// writer was given it ("Name.svc.pinecone.io:443/" as "name.svc.pinecone.io"),
// so that they share its Limiter and its lanes in a Store: host names are
// not case-sensitive and gRPC dials port 443 when none is given.
func canonicalHost(target string) string {
	host := strings.ToLower(strings.TrimSuffix(target, "/"))
	return strings.TrimSuffix(host, ":443")
}
