package upsertredis

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/upsertlib/upsert/internal/redistest"
	"github.com/upsertlib/upsert/internal/share"
)

// clients counts the connections to admin's server other than admin's
// own: all, and those subscribed to a channel.
func clients(t *testing.T, admin *redis.Client) (all, subscribed int) {
	t.Helper()
	list, err := admin.ClientList(context.Background()).Result()
	require.NoError(t, err)
	for _, line := range strings.Split(strings.TrimSpace(list), "\n") {
		if strings.Contains(line, " cmd=client|list ") {
			continue
		}
		all++
		if !strings.Contains(line, " sub=0 ") { // sub=N: N channels
			subscribed++
		}
	}
	return all, subscribed
}

// The package doc's cost of a shared lane, for sizing Redis's maxclients:
// one process's Store holds one subscription (one connection) whatever
// its lanes, plus the client's pool, shared by all its lanes' exchanges,
// which keeps at most its PoolSize; each lane exchanges once per interval.
func TestTheRedisCostOfALane(t *testing.T) {
	t.Parallel() // a server of its own, to count its clients
	const poolSize = 4
	srv := redistest.Run(t)
	admin := client(t, srv)
	for _, lanes := range []int{1, 8, 32} {
		t.Run(fmt.Sprint(lanes, " lanes"), func(t *testing.T) {
			rdb := srv.Client(&redis.Options{PoolSize: poolSize})
			s := New(rdb, WithPrefix(t.Name()+":"))
			ms := make([]share.Member, lanes)
			for i := range ms {
				ms[i] = s.Join(context.Background(), share.Lane{Host: lane.Host, Namespace: fmt.Sprint("tenant-", i)})
			}
			require.Eventually(t, func() bool {
				n, err := admin.PubSubNumSub(context.Background(), ms[lanes-1].(*member).channel()).Result()
				return err == nil && n[ms[lanes-1].(*member).channel()] == 1
			}, 5*time.Second, time.Millisecond, "the last lane's channel subscribed")
			before, start := s.Stats().Exchanges, time.Now()
			time.Sleep(time.Second)
			perLane := float64(s.Stats().Exchanges-before) / time.Since(start).Seconds() / float64(lanes)
			all, sub := clients(t, admin)
			t.Logf("%d lanes: %d connections, %d of them subscriptions; %.1f exchanges a second per lane", lanes, all, sub, perLane)
			assert.Equal(t, 1, sub, "one subscription for all the Store's lanes")
			assert.LessOrEqual(t, all-sub, poolSize, "the pool, shared by the lanes, within its PoolSize")
			assert.LessOrEqual(t, perLane, 1.2*float64(time.Second/DefaultInterval), "one exchange per interval per lane, no more")

			for _, m := range ms {
				require.NoError(t, m.Leave(context.Background()))
			}
			require.Eventually(t, func() bool { _, sub := clients(t, admin); return sub == 0 }, 5*time.Second, time.Millisecond,
				"the last lane left closes the subscription")
			require.NoError(t, rdb.Close())
			require.Eventually(t, func() bool { all, _ := clients(t, admin); return all == 0 }, 5*time.Second, time.Millisecond)
		})
	}
}
