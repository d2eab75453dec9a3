package upsertredis

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/upsertlib/upsert/internal/share"
)

// logFallback logs, with the cause found under err (see cause), that the
// writer id of lane goes on alone because an exchange failed with err. It
// runs on a goroutine of its own, only when the store has a logger: the
// cause may cost a round trip, which neither a lane's join nor a cut
// waits for, so the line comes within one timeout of the failure.
func (s *Store) logFallback(lane share.Lane, id string, err error) {
	attrs := []slog.Attr{slog.String("error", err.Error())}
	if c := s.cause(err); c != "" {
		attrs = append(attrs, slog.String("cause", c))
	}
	s.log(slog.LevelWarn, "upsertredis: Redis failed; the writer goes on alone with what it learned", lane, id, attrs...)
}

// cause returns what went wrong under err, a failed exchange, when err
// hides it, or "" when it has nothing to add. It makes at most one round
// trip through the client, bounded by the store's timeout:
//
//   - after a timeout, one dial with the client's own dialer (TLS
//     included): go-redis retries a refused dial (DialerRetries, then
//     MaxRetries) past the store's timeout, so a Redis that is down reads
//     "context deadline exceeded". Only for a client whose Options are
//     [redis.Options] (a single node or a failover client); a cluster
//     client's timeout is left as it is;
//   - after Redis's "Protocol error: unauthenticated multibulk length"
//     (its answer to a command of more than 10 arguments, as the scripts
//     are, from a client that sent no password), one PING, which Redis
//     answers NOAUTH.
func (s *Store) cause(err error) string {
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return s.dialCheck()
	case strings.Contains(err.Error(), "unauthenticated"):
		return s.pingCheck()
	}
	return ""
}

// dialCheck dials Redis as the client would, and says what came of it.
func (s *Store) dialCheck() string {
	c, ok := s.rdb.(interface{ Options() *redis.Options })
	if !ok || c.Options() == nil || c.Options().Dialer == nil {
		return ""
	}
	o := c.Options()
	_, err := within(context.Background(), s.opts.timeout, func(ctx context.Context) (struct{}, error) {
		conn, err := o.Dialer(ctx, o.Network, o.Addr)
		if err == nil {
			_ = conn.Close()
		}
		return struct{}{}, err
	})
	switch {
	case err == nil:
		return fmt.Sprintf("Redis accepted a new connection: it is reachable, but answered no exchange within the store's timeout (%v)", s.opts.timeout)
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Sprintf("no new connection to Redis opened within the store's timeout (%v) either", s.opts.timeout)
	}
	return err.Error()
}

// pingCheck sends Redis a PING, whose error says what the exchange's did
// not.
func (s *Store) pingCheck() string {
	_, err := within(context.Background(), s.opts.timeout, func(ctx context.Context) (string, error) {
		return s.rdb.Ping(ctx).Result()
	})
	if err == nil {
		return ""
	}
	return err.Error()
}

// within runs f with a context that ends after d (or with ctx), and
// returns f's answer, or the context's error when that comes first: f is
// then left to finish in the background, bounded by its own means, and
// its answer is dropped.
func within[T any](ctx context.Context, d time.Duration, f func(context.Context) (T, error)) (T, error) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	type result struct {
		out T
		err error
	}
	done := make(chan result, 1)
	go func() {
		out, err := f(ctx)
		done <- result{out, err}
	}()
	select {
	case r := <-done:
		return r.out, r.err
	case <-ctx.Done():
		var zero T
		return zero, ctx.Err()
	}
}
