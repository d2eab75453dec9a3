package upsert

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pinecone-io/go-pinecone/v5/pinecone"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/upsertlib/upsert/upserttest"
	"google.golang.org/grpc/codes"
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
// another's 401 stopped the run, which the index then answered with a 503,
// or a 401 of its own (or whose send function panicked), fails with the
// stop's error but logs and counts its own answer: once it logged nothing,
// neither a refusal of its own nor the line of its failure, and a 401 of
// its own given as the stop's *Error value counted as canceled.
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
		// The same *Error value as the stop's (a send function's sentinel
		// for every 401): its own answer, not the stop's cutting it off.
		{"its own 401, the stop's *Error value", func() error { return fmt.Errorf("upsert ns: %w", unauthorized) }},
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

func cutOffServer(t *testing.T) *upserttest.Server {
	t.Helper()
	second := make(chan struct{})
	var once sync.Once
	faults := func(r upserttest.Request) upserttest.Fault {
		if r.Seq == 1 {
			select {
			case <-second:
			case <-time.After(5 * time.Second):
				t.Error("the second request never came")
			}
			return upserttest.Fault{Code: codes.Unauthenticated}
		}
		once.Do(func() { close(second) })
		return upserttest.Fault{Delay: 10 * time.Second} // cut short by Close
	}
	srv := upserttest.NewServer(upserttest.WithFaults(faults))
	t.Cleanup(srv.Close)
	return srv
}

// A request cut off by another request's 401 counts as canceled over REST
// as over gRPC: in Stats, in RequestDone (so upsertprom and upsertotel),
// and it logs no refusal of its own. Since Go 1.23 net/http returns
// context.Cause(ctx) as a canceled request's error, here the very *Error
// of the other request's 401, which was read as a second 401 (and logged
// a second "index refused the caller" line).
func TestARequestCutOffByAStopCountsAsCanceledOverRESTToo(t *testing.T) {
	for _, api := range []string{"gRPC", "REST"} {
		t.Run(api, func(t *testing.T) {
			srv := cutOffServer(t)
			pc, err := NewClient(pinecone.NewClientParams{ApiKey: "test-key", RestClient: srv.Client()})
			require.NoError(t, err)
			idx, err := pc.Index(pinecone.NewIndexConnParams{Host: srv.Host(), Namespace: "docs"})
			require.NoError(t, err)
			defer idx.Close()

			var mu sync.Mutex
			var answers []string
			obs := Observer{RequestDone: func(e RequestEvent) {
				mu.Lock()
				defer mu.Unlock()
				if e.Err != nil {
					answers = append(answers, e.Err.Class.String()+"/"+e.Err.Code())
				}
			}}
			h := &lineCounts{byMsg: map[string]int{}}
			opts := []Option{WithIndex(idx), WithBatchSize(1), WithConcurrency(2), WithObserver(obs),
				WithLogger(slog.New(h)), WithRequestTimeout(30 * time.Second)}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			var res Result
			if api == "REST" {
				res, err = Records(ctx, slices.Values(textRecords(2)), opts...)
			} else {
				res, err = All(ctx, vectors(2, 2), opts...)
			}
			require.ErrorIs(t, err, ClassDenied.Err())
			require.Equal(t, 2, res.Stats.Requests, "both requests were sent")

			slices.Sort(answers)
			code401 := "Unauthenticated"
			if api == "REST" {
				code401 = "401"
			}
			assert.Equal(t, []string{"canceled/canceled", "denied/" + code401}, answers,
				"RequestDone: the 401, and the request it cut off as canceled")
			assert.Equal(t, map[Class]int{ClassDenied: 1, ClassCanceled: 1}, res.Stats.ErrorsByClass)
			assert.Equal(t, map[string]int{code401: 1, "canceled": 1}, res.Stats.ErrorsByCode)
			h.mu.Lock()
			defer h.mu.Unlock()
			assert.Equal(t, 1, h.byMsg["ERROR index refused the caller; stopping"],
				"one refusal logged, not one per request it cut off: %q", h.lines)
		})
	}
}
