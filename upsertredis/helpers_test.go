package upsertredis

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/upsertlib/upsert/internal/redistest"
	"github.com/upsertlib/upsert/internal/share"
)

// shared is the redis-server of the tests that neither kill, restart nor
// flush it; each test keeps to keys of its own prefix.
var shared *redistest.Server

func TestMain(m *testing.M) {
	if addr := os.Getenv(helperEnv); addr != "" {
		writerProcess(addr) // never returns
	}
	var err error
	if shared, err = redistest.Start(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	redis.SetLogger(quiet{}) // the clients of the fault tests would log every failed dial
	code := m.Run()
	shared.Close()
	os.Exit(code)
}

// manual is an interval long enough that the background exchange never
// runs during a test: the test calls sync itself.
const manual = time.Hour

// client returns a client of srv (the shared server when nil), closed at
// the end of t.
func client(t *testing.T, srv *redistest.Server) *redis.Client {
	if srv == nil {
		srv = shared
	}
	rdb := srv.Client(nil)
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

// newStore returns a Store through rdb whose keys start with t's name,
// whose members exchange only when the test says so, and whose timeout
// leaves room for a machine busy with other tests, unless opts say
// otherwise.
func newStore(t *testing.T, rdb redis.UniversalClient, opts ...Option) *Store {
	opts = append([]Option{WithPrefix(t.Name() + ":"), WithInterval(manual), WithTimeout(time.Second)}, opts...)
	return New(rdb, opts...)
}

// withLapse shortens how long a writer's report keeps it in the lane's
// outage (share.OutageLapse), Redis's clock being real.
func withLapse(d time.Duration) Option { return func(o *options) { o.lapse = d } }

var lane = share.Lane{Host: "http://127.0.0.1:5081", Namespace: "docs"}

// join joins lane through s; the member leaves at the end of t.
func join(t *testing.T, s *Store) *member {
	m := s.Join(context.Background(), lane).(*member)
	t.Cleanup(func() { _ = m.Leave(context.Background()) })
	return m
}

// subscribed waits until n Stores listen on m's lane's channel of cuts
// (a Store holds one subscription for all its members): subscribing does
// not wait for Redis.
func subscribed(t *testing.T, rdb redis.UniversalClient, m *member, n int64) {
	t.Helper()
	require.Eventually(t, func() bool {
		got, err := rdb.PubSubNumSub(context.Background(), m.channel()).Result()
		return err == nil && got[m.channel()] == n
	}, time.Second, time.Millisecond)
}

func exchange(t *testing.T, m *member) share.View {
	t.Helper()
	require.NoError(t, m.sync(context.Background()))
	return m.View()
}

// crash stops m's exchanges without leaving, as a process that dies.
func crash(m *member) {
	m.life.leave.Do(func() {
		close(m.life.stop)
		<-m.life.done
	})
}

// keys returns the keys of prefix on rdb.
func keys(t *testing.T, rdb *redis.Client, prefix string) []string {
	ks, err := rdb.Keys(context.Background(), prefix+"*").Result()
	require.NoError(t, err)
	return ks
}

// logBuffer collects log lines, safe for concurrent use.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) lines(substr string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return strings.Count(b.buf.String(), substr)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func (b *logBuffer) logger() *slog.Logger { return slog.New(slog.NewTextHandler(b, nil)) }

// quiet is a go-redis logger that drops everything.
type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

// cutHeard has a cut a's lane and waits for b to hear of it before its
// next exchange; msg says what failed if it does not.
func cutHeard(t *testing.T, a, b *member, msg string) {
	t.Helper()
	changed := b.Changed()
	_, applied, err := a.Cut(context.Background(), share.Cut{Sent: time.Now(), Rate: 800, Level: 1000})
	require.NoError(t, err)
	require.True(t, applied)
	select {
	case <-changed:
	case <-time.After(time.Second):
		t.Fatal(msg)
	}
}
