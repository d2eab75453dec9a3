package upsertredis

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// helperEnv, when set to a Redis socket, makes the test binary a writer
// process: it joins lane, says so on stdout, and exchanges until killed.
const helperEnv = "UPSERTREDIS_TEST_WRITER"

func writerProcess(socket string) {
	rdb := redis.NewClient(&redis.Options{Network: "unix", Addr: socket})
	s := New(rdb, WithPrefix(os.Getenv(helperEnv+"_PREFIX")), WithInterval(5*time.Millisecond), WithHeartbeat(50*time.Millisecond))
	s.Join(context.Background(), lane)
	os.Stdout.WriteString("joined\n")
	select {}
}

// TestAKilledWriterProcessIsDropped kills (SIGKILL) a writer process of
// the lane: the writers left see it gone once its heartbeat expires, and
// their part of the rate grows.
func TestAKilledWriterProcessIsDropped(t *testing.T) {
	exe, err := os.Executable()
	require.NoError(t, err)
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"="+shared.Socket(), helperEnv+"_PREFIX="+t.Name()+":")
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "joined\n", line)

	a := join(t, newStore(t, client(t, nil)))
	assert.Equal(t, 2, a.View().Writers)
	assert.Equal(t, 500.0, a.View().Allocation(1000))
	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	require.Eventually(t, func() bool { return exchange(t, a).Writers == 1 }, 5*time.Second, time.Millisecond)
	assert.Equal(t, 1000.0, a.View().Allocation(1000), "the writer left takes up the dead one's part")
}
