package upsertredis

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/upsertlib/upsert/internal/redistest"
	"github.com/upsertlib/upsert/internal/selfsigned"
	"github.com/upsertlib/upsert/internal/share"
)

// TestRedisCluster runs a lane through a cluster client against a
// one-node Redis Cluster, which refuses a script whose keys lie in
// different slots as any cluster does.
func TestRedisCluster(t *testing.T) {
	t.Parallel() // a new cluster node takes two seconds to accept writes
	port, err := redistest.FreePort()
	require.NoError(t, err)
	srv := redistest.Run(t, "--port", strconv.Itoa(port), "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf")
	ctx := context.Background()
	admin := client(t, srv)
	require.NoError(t, admin.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", "0", "16383").Err())
	require.Eventually(t, func() bool {
		info, _ := admin.ClusterInfo(ctx).Result()
		return len(info) > 0 && strings.Contains(info, "cluster_state:ok")
	}, 10*time.Second, 5*time.Millisecond)
	err = admin.Eval(ctx, "return 1", []string{"a", "b"}).Err()
	require.ErrorContains(t, err, "CROSSSLOT", "the cluster checks slots")

	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{net.JoinHostPort("127.0.0.1", strconv.Itoa(port))}})
	t.Cleanup(func() { rdb.Close() })
	s := newStore(t, rdb)
	a, b := join(t, s), join(t, s)
	require.True(t, a.View().Shared, "Join through a cluster client")
	_, applied, err := a.Cut(ctx, share.Cut{Sent: time.Now(), Rate: 800})
	require.NoError(t, err)
	assert.True(t, applied)
	_, err = b.Breaker(ctx, true)
	require.NoError(t, err)
	assert.Equal(t, 2, exchange(t, b).Writers)
	require.NoError(t, b.Leave(ctx))
	require.NoError(t, a.Leave(ctx))
	assert.Zero(t, s.Stats().Failures)

	state, writers := laneKeys("x", "host", "ns")
	slots := make([]int64, 2)
	for i, k := range []string{state, writers} {
		slots[i], err = admin.ClusterKeySlot(ctx, k).Result()
		require.NoError(t, err)
	}
	assert.Equal(t, slots[0], slots[1])
}

// TestPasswordAndTLS runs a lane through a client that the user configured
// with a password and TLS.
func TestPasswordAndTLS(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	pool := selfSigned(t, dir)
	port, err := redistest.FreePort()
	require.NoError(t, err)
	redistest.Run(t, "--requirepass", "s3cret", "--tls-port", strconv.Itoa(port),
		"--tls-cert-file", filepath.Join(dir, "cert.pem"), "--tls-key-file", filepath.Join(dir, "key.pem"),
		"--tls-ca-cert-file", filepath.Join(dir, "cert.pem"), "--tls-auth-clients", "no")
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))

	noAuth := redis.NewClient(&redis.Options{Addr: addr, TLSConfig: &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"}})
	t.Cleanup(func() { noAuth.Close() })
	assert.False(t, join(t, newStore(t, noAuth)).View().Shared, "without the password Redis refuses: the writer goes alone")

	rdb := redis.NewClient(&redis.Options{Addr: addr, Password: "s3cret", TLSConfig: &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"}})
	t.Cleanup(func() { rdb.Close() })
	s := newStore(t, rdb)
	a := join(t, s)
	require.True(t, a.View().Shared)
	_, applied, err := a.Cut(context.Background(), share.Cut{Sent: time.Now(), Rate: 800})
	require.NoError(t, err)
	assert.True(t, applied)
}

// selfSigned writes a self-signed certificate for 127.0.0.1 and its key to
// dir, and returns a pool that trusts it.
func selfSigned(t *testing.T, dir string) *x509.CertPool {
	cert, err := selfsigned.Certificate("upsertredis test", time.Hour)
	require.NoError(t, err)
	key, err := x509.MarshalPKCS8PrivateKey(cert.PrivateKey)
	require.NoError(t, err)
	write := func(name, typ string, b []byte) {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: b}), 0o600))
	}
	write("cert.pem", "CERTIFICATE", cert.Certificate[0])
	write("key.pem", "PRIVATE KEY", key)
	pool := x509.NewCertPool()
	pool.AddCert(cert.Leaf)
	return pool
}
