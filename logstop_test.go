package upsert

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pinecone-io/go-pinecone/v5/pinecone"
)

// lineCounts counts log lines by level and message.
type lineCounts struct {
	mu    sync.Mutex
	byMsg map[string]int
	lines []string
}

func (h *lineCounts) Enabled(context.Context, slog.Level) bool { return true }
func (h *lineCounts) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.byMsg[r.Level.String()+" "+r.Message]++
	line := r.Level.String() + " " + r.Message
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "class" || a.Key == "error" {
			line += " " + a.Key + "=" + a.Value.String()
		}
		return true
	})
	h.lines = append(h.lines, line)
	return nil
}
func (h *lineCounts) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *lineCounts) WithGroup(string) slog.Handler      { return h }

// requestLines is the number of per-request lines (the summary excluded).
func (h *lineCounts) requestLines() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for msg, c := range h.byMsg {
		if msg != "INFO upsert finished" && msg != "WARN upsert finished" && msg != "ERROR upsert finished" {
			n += c
		}
	}
	return n
}

// WithLogger logs one line per failed request. A request in flight when
// another's 401 stopped the run, which the index then answered with a 503
// (or whose send function panicked), fails with the stop's error but logs
// its own answer: once it logged nothing, neither a refusal of its own nor
// the line of its failure.
func TestARequestAnsweredAfterAnotherStoppedTheRunStillLogsALine(t *testing.T) {
	unauthorized := &Error{Class: ClassDenied, StatusCode: 401, Err: errors.New("Unauthorized")}
	for _, tt := range []struct {
		name string
		late func() error // what the second request ends with once the run stopped
	}{
		{"a 503", func() error {
			return &Error{Class: ClassServer, StatusCode: 503, Err: errors.New("Service Unavailable")}
		}},
		{"a panicking send function", func() error { panic("send function bug") }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			secondSent := make(chan struct{})
			var calls atomic.Int64
			send := func(ctx context.Context, _ string, _ []*pinecone.Vector) error {
				if calls.Add(1) == 1 {
					select {
					case <-secondSent:
					case <-time.After(5 * time.Second):
						t.Error("the second request never went out")
					}
					return unauthorized
				}
				close(secondSent)
				<-ctx.Done() // in flight until the run stops
				return tt.late()
			}
			h := &lineCounts{byMsg: map[string]int{}}
			res, err := All(context.Background(), vectors(2, 2), WithUpsertFunc(send),
				WithBatchSize(1), WithConcurrency(2), WithLogger(slog.New(h)))
			if !errors.Is(err, ClassDenied.Err()) {
				t.Fatalf("err %v, want the 401's", err)
			}
			if res.Stats.Requests != 2 || len(res.Failed) != 2 {
				t.Fatalf("requests %d, failed %d; want 2 and 2", res.Stats.Requests, len(res.Failed))
			}
			if n := res.Stats.ErrorsByClass[ClassCanceled]; n != 0 {
				t.Fatalf("the second request counted as canceled (%v): not the case under test", res.Stats.ErrorsByClass)
			}
			if got := h.requestLines(); got != 2 {
				t.Errorf("%d per-request log lines for 2 failed requests, want 2 (one per failed request): %q", got, h.lines)
			}
		})
	}
}
