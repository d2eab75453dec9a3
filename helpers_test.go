package upsert

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/pinecone-io/go-pinecone/v5/pinecone"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/known/structpb"
)

// fakeClock is virtual time: Sleep returns at once and moves the clock.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	sleeps []time.Duration
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Sleep records d and, unless ctx has ended, moves the clock by d.
func (c *fakeClock) Sleep(ctx context.Context, d time.Duration) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sleeps = append(c.sleeps, d)
	if err := ctx.Err(); err != nil {
		return err
	}
	if d > 0 {
		c.now = c.now.Add(d)
	}
	return nil
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func (c *fakeClock) Sleeps() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.sleeps)
}

// condClock is the shared part of the test clocks whose Sleeps block on
// a condition: virtual time guarded by mu, and cond to wake the sleepers.
type condClock struct {
	mu    sync.Mutex
	cond  *sync.Cond
	start time.Time
	now   time.Time
}

func (c *condClock) init() {
	c.start = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	c.now = c.start
	c.cond = sync.NewCond(&c.mu)
}

func (c *condClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// wakeOnDone wakes the sleepers when ctx ends, until the returned stop.
func (c *condClock) wakeOnDone(ctx context.Context) (stop func() bool) {
	return context.AfterFunc(ctx, func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.cond.Broadcast()
	})
}

// gateClock is virtual time that moves only when the test moves it: a
// Sleep blocks until the clock reaches its end or its context ends.
type gateClock struct {
	condClock
	sleepers int
}

func newGateClock() *gateClock {
	c := &gateClock{}
	c.init()
	return c
}

func (c *gateClock) Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	defer c.wakeOnDone(ctx)()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sleepers++
	defer func() { c.sleepers-- }()
	for until := c.now.Add(d); c.now.Before(until); c.cond.Wait() {
		if err := ctx.Err(); err != nil {
			return err
		}
	}
	return nil
}

// Advance moves the clock by d, ending the sleeps it passes.
func (c *gateClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	c.cond.Broadcast()
}

// Sleepers is how many Sleeps are under way.
func (c *gateClock) Sleepers() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sleepers
}

// Moved is how far the clock moved since it was made.
func (c *gateClock) Moved() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now.Sub(c.start)
}

// withClock and withRand inject time and randomness so that no test sleeps.
func withClock(c clock) Option { return func(cfg *config) { cfg.clock = c } }

// withSaveEvery sets how often a stream saves its checkpoint.
func withSaveEvery(d time.Duration) Option { return func(cfg *config) { cfg.saveEvery = d } }

func withRand(f func(int64) int64) Option { return func(cfg *config) { cfg.rand = f } }

// maxRand always draws the top of the range: backoffs are their ceilings.
func maxRand(n int64) int64 { return n - 1 }

// testOpts are the options every pipeline test starts from: virtual time
// and deterministic backoff.
func testOpts(fi *fakeIndex, more ...Option) []Option {
	return append([]Option{WithUpsertFunc(fi.Upsert), withClock(newFakeClock()), withRand(maxRand)}, more...)
}

// fakeIndex is an UpsertFunc that stores what it accepts and answers
// according to a script.
type fakeIndex struct {
	mu     sync.Mutex
	stored map[string]*pinecone.Vector
	calls  [][]string // ids of each request, in order of arrival
	// script decides the answer to request number call (from 0); nil
	// accepts everything.
	script func(call int, ids []string) error
}

func newFakeIndex(script func(call int, ids []string) error) *fakeIndex {
	return &fakeIndex{stored: make(map[string]*pinecone.Vector), script: script}
}

func (f *fakeIndex) Upsert(ctx context.Context, _ string, batch []*pinecone.Vector) error {
	ids := make([]string, len(batch))
	for i, v := range batch {
		ids[i] = v.Id
	}
	f.mu.Lock()
	call := len(f.calls)
	f.calls = append(f.calls, ids)
	f.mu.Unlock()
	if f.script != nil {
		if err := f.script(call, ids); err != nil {
			return err
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, v := range batch {
		f.stored[v.Id] = v
	}
	return nil
}

func (f *fakeIndex) Calls() [][]string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.calls)
}

func (f *fakeIndex) Stored() map[string]*pinecone.Vector {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make(map[string]*pinecone.Vector, len(f.stored))
	for k, v := range f.stored {
		out[k] = v
	}
	return out
}

// vectors makes n distinct dense records of dimension dim, ids "v0".. .
func vectors(n, dim int) []*pinecone.Vector {
	vs := make([]*pinecone.Vector, n)
	for i := range vs {
		vals := make([]float32, dim)
		for j := range vals {
			vals[j] = float32(i*dim+j) / 7
		}
		vs[i] = &pinecone.Vector{Id: fmt.Sprintf("v%d", i), Values: &vals}
	}
	return vs
}

func withMetadata(v *pinecone.Vector, fields map[string]any) *pinecone.Vector {
	md, err := structpb.NewStruct(fields)
	if err != nil {
		panic(err)
	}
	v.Metadata = md
	return v
}

// failedIDs returns the ids in res.Failed, by class.
func failedIDs(res Result) map[Class][]string {
	out := make(map[Class][]string)
	for _, f := range res.Failed {
		out[f.Class] = append(out[f.Class], f.ID)
	}
	return out
}

// contains reports whether any id of ids is in set.
func containsAny(ids []string, set map[string]bool) bool {
	for _, id := range ids {
		if set[id] {
			return true
		}
	}
	return false
}

// encodedRequestSize is the size of the real UpsertRequest the SDK would
// send for batch, built from the message types the SDK registers.
func encodedRequestSize(t testing.TB, batch []*pinecone.Vector, namespace string) int {
	t.Helper()
	req := newUpsertRequest(t, batch, namespace)
	return proto.Size(req)
}

func newUpsertRequest(t testing.TB, batch []*pinecone.Vector, namespace string) proto.Message {
	t.Helper()
	reqType, err := protoregistry.GlobalTypes.FindMessageByName("UpsertRequest")
	if err != nil {
		t.Fatalf("the SDK did not register UpsertRequest: %v", err)
	}
	req := reqType.New()
	fields := req.Descriptor().Fields()
	list := req.Mutable(fields.ByName("vectors")).List()
	for _, v := range batch {
		el := list.NewElement().Message()
		vf := el.Descriptor().Fields()
		if v.Id != "" {
			el.Set(vf.ByName("id"), protoreflect.ValueOfString(v.Id))
		}
		if v.Values != nil {
			vals := el.Mutable(vf.ByName("values")).List()
			for _, x := range *v.Values {
				vals.Append(protoreflect.ValueOfFloat32(x))
			}
		}
		if v.Metadata != nil {
			el.Set(vf.ByName("metadata"), protoreflect.ValueOfMessage(v.Metadata.ProtoReflect()))
		}
		if s := v.SparseValues; s != nil {
			sm := el.Mutable(vf.ByName("sparse_values")).Message()
			sf := sm.Descriptor().Fields()
			idx := sm.Mutable(sf.ByName("indices")).List()
			for _, i := range s.Indices {
				idx.Append(protoreflect.ValueOfUint32(i))
			}
			vals := sm.Mutable(sf.ByName("values")).List()
			for _, x := range s.Values {
				vals.Append(protoreflect.ValueOfFloat32(x))
			}
		}
		list.Append(protoreflect.ValueOfMessage(el))
	}
	if namespace != "" {
		req.Set(fields.ByName("namespace"), protoreflect.ValueOfString(namespace))
	}
	return req.Interface()
}
