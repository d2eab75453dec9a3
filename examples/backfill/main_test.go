package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The SDK sends gRPC in plaintext to a host written http://, and the API
// key with it: the example refuses such a host unless it is on the
// loopback interface (as Pinecone Local is), as cmd/pcupsert does, and
// takes https:// or a host without a scheme (which the SDK dials with
// TLS). No network is used: the SDK's connection is lazy.
func TestAPlaintextHostIsRefusedUnlessItIsLoopback(t *testing.T) {
	for _, tc := range []struct {
		host    string
		refused bool
	}{
		{host: "http://example-abc123.svc.aped-4627-b74a.pinecone.io", refused: true},
		{host: "HTTP://example-abc123.svc.aped-4627-b74a.pinecone.io", refused: true},
		{host: "http://10.0.0.5:5081", refused: true},
		{host: "http://localhost.example.com:5081", refused: true},
		{host: "http://localhost:5081"},
		{host: "http://127.0.0.1:5081"},
		{host: "http://[::1]:5081"},
		{host: "https://example-abc123.svc.aped-4627-b74a.pinecone.io"},
		{host: "example-abc123.svc.aped-4627-b74a.pinecone.io"},
	} {
		t.Setenv("PINECONE_API_KEY", "pcsk_test_secret")
		t.Setenv("PINECONE_HOST", tc.host)
		t.Setenv("PINECONE_NAMESPACE", "")
		idx, _, cleanup, err := connect()
		if err == nil {
			assert.NotNil(t, idx, tc.host)
			cleanup()
		}
		if tc.refused {
			assert.ErrorContains(t, err, "unencrypted", "%s: the API key would cross the network unencrypted", tc.host)
		} else {
			assert.NoError(t, err, tc.host)
		}
	}
}

// Both PINECONE_API_KEY and PINECONE_HOST set select that index (no
// embedded server, so no verify), in PINECONE_NAMESPACE if set; either
// missing selects the embedded index, in the example's namespace.
func TestConnectSelectsTheIndexConfigured(t *testing.T) {
	t.Setenv("PINECONE_API_KEY", "pcsk_test_secret")
	t.Setenv("PINECONE_HOST", "https://example-abc123.svc.aped-4627-b74a.pinecone.io")
	t.Setenv("PINECONE_NAMESPACE", "mine")
	idx, verify, cleanup, err := connect()
	require.NoError(t, err)
	assert.Nil(t, verify, "a real index: no embedded server to verify")
	assert.Equal(t, "mine", idx.Namespace())
	cleanup()

	t.Setenv("PINECONE_API_KEY", "")
	t.Setenv("PINECONE_HOST", "")
	t.Setenv("PINECONE_NAMESPACE", "")
	idx, verify, cleanup, err = connect()
	require.NoError(t, err)
	assert.NotNil(t, verify, "neither: the embedded index")
	assert.Equal(t, "upsert-backfill-example", idx.Namespace())
	cleanup()
}

// One of the two settings without the other is a mistake, not a wish for
// the embedded index: the run would write nowhere the user meant.
func TestConnectRefusesHalfARealIndexsSettings(t *testing.T) {
	for _, tc := range []struct{ key, host string }{
		{"pcsk_test_secret", ""},
		{"", "https://example-abc123.svc.aped-4627-b74a.pinecone.io"},
	} {
		t.Setenv("PINECONE_API_KEY", tc.key)
		t.Setenv("PINECONE_HOST", tc.host)
		_, _, _, err := connect()
		require.Error(t, err)
		assert.Contains(t, err.Error(), "set both PINECONE_API_KEY and PINECONE_HOST")
		assert.NotContains(t, err.Error(), "pcsk_test_secret")
	}
}
