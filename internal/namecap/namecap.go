// Package namecap bounds the label values that user data (Pinecone
// namespaces, one per tenant in a multitenant index) gives a metric: the
// first names seen keep their own value, every later one shares another.
package namecap

import (
	"strings"
	"sync"
)

// Cap labels the first Max names it is given as themselves and every
// later one Other. It is safe for concurrent use; its zero value labels
// every name Other.
type Cap struct {
	Max   int
	Other string

	mu    sync.Mutex
	seen  map[string]struct{}
	other bool // Other was given
}

// Of returns name's label and whether it is the label's first use (the
// first of a name within the cap, or the first of Other). A name that is
// not valid UTF-8 is spelt with U+FFFD for each run of invalid bytes:
// label values must be UTF-8 (Prometheus panics on others, OTLP fails the
// export).
func (c *Cap) Of(name string) (label string, first bool) {
	name = strings.ToValidUTF8(name, "\uFFFD")
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.seen[name]; ok {
		return name, false
	}
	if len(c.seen) >= c.Max {
		first, c.other = !c.other, true
		return c.Other, first
	}
	if c.seen == nil {
		c.seen = make(map[string]struct{})
	}
	c.seen[name] = struct{}{}
	return name, true
}
