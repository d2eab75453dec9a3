package upsertredis

import (
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/upsertlib/upsert/internal/redistest"
)

// The line that says a writer goes on alone names what went wrong, not
// only what the exchange saw: with go-redis's defaults a refused
// connection is retried past the store's timeout ("context deadline
// exceeded"), and a client without the password that Redis requires is
// answered "ERR Protocol error: unauthenticated multibulk length" (the
// scripts' arguments are more than an unauthenticated client may send).
// The password itself is never logged.
func TestTheFallbackLogNamesTheCause(t *testing.T) {
	t.Parallel() // servers of its own
	port, err := redistest.FreePort()
	require.NoError(t, err)
	locked := redistest.Run(t, "--requirepass", "s3cret")
	hung, err := redistest.NewProxy(shared.Socket(), 0)
	require.NoError(t, err)
	t.Cleanup(hung.Close)
	hung.Hold()
	t.Cleanup(hung.Release)

	tests := []struct {
		name   string
		client func() *redis.Client
		error  string // what the exchange saw
		cause  string // what the log adds
	}{
		{"connection refused", func() *redis.Client {
			return redis.NewClient(&redis.Options{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port))})
		}, "context deadline exceeded", "connect: connection refused"},
		{"connection refused, the client set as the package doc says", func() *redis.Client {
			return redis.NewClient(&redis.Options{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), DialerRetries: 1, MaxRetries: 1})
		}, "connect: connection refused", ""},
		{"password missing", func() *redis.Client { return locked.Client(nil) },
			"unauthenticated multibulk length", "NOAUTH Authentication required"},
		{"password wrong", func() *redis.Client { return locked.Client(&redis.Options{Password: "wr0ng"}) },
			"WRONGPASS", ""},
		{"Redis hung", func() *redis.Client { return redis.NewClient(&redis.Options{Addr: hung.Addr()}) },
			"context deadline exceeded", "Redis accepted a new connection"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rdb := tt.client()
			t.Cleanup(func() { rdb.Close() })
			var logs logBuffer
			s := New(rdb, WithPrefix(t.Name()+":"), WithInterval(manual), WithTimeout(DefaultTimeout), WithLogger(logs.logger()))
			m := join(t, s)
			require.False(t, m.View().Shared)
			require.Eventually(t, func() bool { return logs.lines("Redis failed") == 1 }, 5*time.Second, time.Millisecond)
			line := logs.String()
			t.Log(line)
			assert.Contains(t, line, tt.error)
			if tt.cause != "" {
				assert.Contains(t, line, "cause=")
				assert.Contains(t, line, tt.cause)
			} else {
				assert.NotContains(t, line, "cause=", "the error says it already")
			}
			assert.NotContains(t, line, "s3cret")
			assert.NotContains(t, line, "wr0ng")
		})
	}
}
