package upsert

import "sync"

// maxRefusals is how many refused namespaces a run remembers: as many as
// the routes a stream keeps without looking for idle ones, since a
// namespace forgotten costs one more refused request when it comes back,
// and a Writer that lives for days may meet any number of them.
const maxRefusals = minRoutes

// refusals remembers the index's refusals to create namespaces
// (stopsOneNamespace), by namespaceKey, for routes made again after a
// stream dropped the first; the workers store, the producer loads. It
// forgets the oldest beyond maxRefusals. The zero value is ready.
type refusals struct {
	mu    sync.Mutex
	byKey map[string]*Error
	order []string // byKey's keys, oldest first
}

// store remembers that the index refused the namespace of key with e.
func (f *refusals) store(key string, e *Error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.byKey[key]; ok {
		return
	}
	if f.byKey == nil {
		f.byKey = make(map[string]*Error)
	}
	f.byKey[key], f.order = e, append(f.order, key)
	if len(f.order) > maxRefusals {
		delete(f.byKey, f.order[0])
		f.order = f.order[1:]
	}
}

// load returns the refusal of key's namespace, if remembered.
func (f *refusals) load(key string) (*Error, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	e, ok := f.byKey[key]
	return e, ok
}

// size returns how many refusals f remembers.
func (f *refusals) size() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.byKey)
}
