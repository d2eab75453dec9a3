package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/upsertlib/upsert/upserttest"
	"google.golang.org/grpc/codes"
)

// quotaAfter answers a spent monthly quota to every request after the
// first n.
func quotaAfter(n int) upserttest.FaultFunc {
	return func(r upserttest.Request) upserttest.Fault {
		if r.Seq <= n {
			return upserttest.Fault{}
		}
		return upserttest.Fault{Code: codes.ResourceExhausted, Message: "Request failed. You've reached your write unit limit for the current month (2000000). To continue writing data, upgrade your plan."}
	}
}

// A run stopped by a spent quota (in.halt) while its input is idle loses
// nothing it read: every record read landed or failed, with a letter
// (without --checkpoint) or left to the next run, which lands them all.
func TestAHaltLosesNothingRead(t *testing.T) {
	for _, ckpt := range []bool{false, true} {
		t.Run(fmt.Sprint("checkpoint=", ckpt), func(t *testing.T) {
			srv := upserttest.NewServer(upserttest.WithFaults(quotaAfter(3)))
			defer srv.Close()
			dir := t.TempDir()
			dl, cp := filepath.Join(dir, "dl"), filepath.Join(dir, "ckpt")
			pr, pw := io.Pipe()
			defer pw.Close()
			args := append(remote(t, srv), "--progress", "off", "--dead-letter", dl, "--json", "--batch-size", "20")
			if ckpt {
				args = append(args, "--checkpoint", cp)
			}
			done := make(chan result, 1)
			go func() { done <- runCmd(t, nil, pr, args...) }()
			input := records(t, 2000)
			go func() { _, _ = io.WriteString(pw, input) }() // then the producer waits
			var res result
			select {
			case res = <-done:
			case <-time.After(10 * time.Second):
				pw.Close()
				<-done
				t.Fatal("hung")
			}
			s := jsonReport(t, res)
			t.Logf("read %d upserted %d failed %d left %d stopped %v status %d", s.RecordsRead, s.Upserted, s.Failed, s.LeftToResume, s.Stopped, s.ExitStatus)
			assert.True(t, s.Stopped)
			assert.Equal(t, exitFailed, s.ExitStatus)
			assert.Equal(t, s.RecordsRead, s.Upserted+s.Failed+s.Duplicates, res.stderr)
			ids, _ := func() ([]string, []int) {
				if _, err := os.Stat(dl); err != nil {
					return nil, nil
				}
				return letters(t, dl)
			}()
			if ckpt {
				assert.Equal(t, s.Failed, s.LeftToResume)
				assert.Empty(t, ids)
				// resume on a healthy index: every record lands
				srv.SetFaults(nil)
				res2 := runCmd(t, nil, strings.NewReader(input), append(remote(t, srv), "--progress", "off", "--dead-letter", dl, "--json", "--checkpoint", cp)...)
				s2 := jsonReport(t, res2)
				assert.Equal(t, exitOK, s2.ExitStatus, res2.stderr)
				assert.Equal(t, 2000, srv.Count("__default__"))
			} else {
				assert.Len(t, ids, s.Failed)
			}
		})
	}
}

// slowProgress is stderr, whose progress lines (" done ") take hold
// once armed is set.
type slowProgress struct {
	mu    sync.Mutex
	b     bytes.Buffer
	armed *atomic.Bool
	hold  time.Duration
}

func (w *slowProgress) Write(p []byte) (int, error) {
	if w.armed.Load() && bytes.Contains(p, []byte(" done ")) {
		time.Sleep(w.hold)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *slowProgress) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// A run stopped by a refusal (in.halt) whose --max-failure-seconds
// watchdog also fires before Stream returns (here a final progress line
// takes 30 ms to write, and a record replaced by a later one of its id
// keeps the watchdog's count of waiting records above 0) is a stopped
// run: it was once taken for one that gave up, whose drain of the rest of
// the input met the halt and reported an interruption no signal made.
func TestAHaltedRunThatAlsoGaveUpIsReportedStopped(t *testing.T) {
	var refused atomic.Bool
	srv := upserttest.NewServer(upserttest.WithFaults(func(upserttest.Request) upserttest.Fault {
		refused.Store(true)
		return upserttest.Fault{Code: codes.Unauthenticated, Message: "Invalid API Key"}
	}))
	defer srv.Close()
	dl := deadLetterPath(t)
	const n = 5000
	input := `{"id":"d","values":[1,1,1]}` + "\n" + `{"id":"d","values":[2,2,2]}` + "\n" + records(t, n)
	stderr := &slowProgress{armed: &refused, hold: 30 * time.Millisecond}
	var stdout bytes.Buffer
	args := append(remote(t, srv), "--progress", "lines", "--dead-letter", dl, "--json", "--batch-size", "50",
		"--max-failure-seconds", "0.001")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	status := run(ctx, args, strings.NewReader(input), &stdout, stderr)
	res := result{status, stdout.String(), stderr.String()}
	s := jsonReport(t, res)
	t.Logf("gave_up %v stopped %v interrupted %v read %d failed %d", s.GaveUp, s.Stopped, s.Interrupted, s.RecordsRead, s.Failed)
	require.True(t, s.Stopped, "the refusal says why it ended; stderr:\n%s", res.stderr)
	assert.False(t, s.GaveUp)
	assert.False(t, s.Interrupted, "no signal came; stderr:\n%s", res.stderr)
	assert.NotContains(t, res.stderr, "interrupted")
}
