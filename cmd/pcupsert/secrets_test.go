package main

import (
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"

	"github.com/upsertlib/upsert"
	"github.com/upsertlib/upsert/upserttest"
)

// A --host with credentials or a query in it is refused (checkHost)
// without quoting it: only the API key itself is masked on stderr, and the
// URL may hold a password or another key.
func TestHostCredentialsAreNotEchoed(t *testing.T) {
	t.Setenv("PINECONE_API_KEY", "pcsk_the_env_key_0123456789")
	for _, host := range []string{
		"https://admin:hunter2-PLANTED@idx-proj.svc.us-east1.pinecone.io",
		"https://idx-proj.svc.us-east1.pinecone.io/?api_key=hunter2-PLANTED",
	} {
		res := runCmd(t, nil, strings.NewReader(""), "--host", host, "--progress", "off")
		if res.status != exitUsage {
			t.Fatalf("status %d, stderr %q", res.status, res.stderr)
		}
		if strings.Contains(res.stderr, "hunter2-PLANTED") || strings.Contains(res.stdout, "hunter2-PLANTED") {
			t.Errorf("--host %s: the secret in the URL is printed: %q", host, res.stderr)
		}
	}
}

// longKey is an API key of the usual length; its secret part is long.
const longKey = "pcsk_4Xyz9_SECRETPARTabcdefghijklmnopqrstuvwxyz0123456789ABCDEFGH"

// causes masks the key before it cuts the message to maxCauseChars: a key
// that straddles the cut would no longer be whole, and the mask would miss
// it (the report once printed the first part of the key).
func TestCausesMaskTheKeyBeforeCuttingTheMessage(t *testing.T) {
	c := &causes{mask: masker(longKey)}
	msg := strings.Repeat("x", maxCauseChars-30) + " api-key=" + longKey
	c.requestDone(upsert.RequestEvent{Err: &upsert.Error{Class: upsert.ClassServer, Err: os.ErrInvalid}})
	c.requestDone(upsert.RequestEvent{Err: &upsert.Error{Class: upsert.ClassInvalid, Err: errString(msg)}})
	for _, cs := range c.top("h", nil) {
		if strings.Contains(cs.Message, longKey[:20]) {
			t.Errorf("the report's cause holds the start of the API key: %q", cs.Message)
		}
	}
}

type errString string

func (e errString) Error() string { return string(e) }

// The same through the command: an index whose refusal quotes the key.
func TestTheReportPrintsNoPartOfTheKey(t *testing.T) {
	msg := strings.Repeat("x", maxCauseChars-30) + " api-key=" + longKey
	srv := upserttest.NewServer(upserttest.WithFaults(func(upserttest.Request) upserttest.Fault {
		return upserttest.Fault{Code: codes.InvalidArgument, Message: msg}
	}))
	t.Cleanup(srv.Close)
	t.Setenv("PINECONE_API_KEY", longKey)
	dl := deadLetterPath(t)
	for _, args := range [][]string{nil, {"--json"}} {
		res := runCmd(t, nil, strings.NewReader(records(t, 1)), append([]string{"--host", srv.Host(), "--dead-letter", dl, "--progress", "off", "--batch-size", "1"}, args...)...)
		if res.status != exitFailed {
			t.Fatalf("status %d\nstdout %s\nstderr %s", res.status, res.stdout, res.stderr)
		}
		for name, out := range map[string]string{"stdout": res.stdout, "stderr": res.stderr} {
			if strings.Contains(out, longKey[:20]) {
				t.Errorf("%v: %s holds part of the API key:\n%s", args, name, out)
			}
		}
	}
}

// Usage errors are printed through the filter that masks the API key, as
// every other output is: a key passed by mistake as an argument (as a
// positional, or as the value of another flag) is not echoed.
func TestUsageErrorsDoNotPrintTheAPIKey(t *testing.T) {
	t.Setenv("PINECONE_API_KEY", longKey)
	for _, args := range [][]string{
		{longKey, "in.ndjson"},
		{"--progress", longKey},
		{"--dimension", longKey},
	} {
		res := runCmd(t, nil, strings.NewReader(""), args...)
		assert.Equal(t, exitUsage, res.status)
		assert.Contains(t, res.stderr, "[API key]", "args %q", args)
		assert.NotContains(t, res.stderr, longKey[:20], "args %q", args)
		assert.NotContains(t, res.stdout, longKey[:20])
	}
}

// A --host with the http:// scheme makes the SDK dial gRPC without TLS
// (go-pinecone v5.4.1 index_connection.go), and the Api-Key metadata of
// every request then crosses the network in clear text: a typo such as
// http://NAME-PROJECT.svc.REGION.pinecone.io would send the real key to
// anyone on the path. Plain http is refused for a host that is not
// loopback, as a usage error naming --host, before anything is dialed.
func TestAPlainHTTPHostThatIsNotLoopbackIsRefused(t *testing.T) {
	t.Setenv("PINECONE_API_KEY", longKey)
	// Addresses of the documentation ranges (RFC 5737, RFC 3849), never
	// routed: no name to look up, and nothing reaches anyone should a
	// run dial them.
	for _, host := range []string{
		"http://192.0.2.1",
		"http://192.0.2.1:443",
		"http://[2001:db8::1]:5081",
	} {
		res := runCmd(t, nil, strings.NewReader(records(t, 1)), "--host", host, "--progress", "off", "--dead-letter", deadLetterPath(t),
			"--max-failure-seconds", "0.05") // bounds a run that dials
		assert.Equal(t, exitUsage, res.status, "--host %s: the key would be sent without TLS\nstderr:\n%s", host, res.stderr)
		assert.Contains(t, res.stderr, "--host", host)
		assert.Contains(t, res.stderr, "the API key would cross the network unencrypted", host)
		assert.NotContains(t, res.stderr, "writing to "+host, "nothing is opened for %s", host)
	}
}

// Plain http stays allowed for the loopback hosts where the embedded
// index (upserttest) and Pinecone Local listen, in each spelling that
// names loopback without a lookup; any other name is refused, since it
// may resolve anywhere.
func TestPlainHTTPIsTakenForALoopbackHostAlone(t *testing.T) {
	for _, host := range []string{
		"http://localhost:5081", "http://LocalHost", "http://localhost.:5081", "http://127.0.0.1:5081",
		"http://127.8.9.10", "http://[::1]:5081", "http://[::ffff:127.0.0.1]:5081", "https://192.0.2.1",
	} {
		got, err := checkHost(host, "--host")
		assert.NoError(t, err, host)
		assert.Equal(t, strings.ToLower(host), strings.ToLower(got), host)
	}
	for _, host := range []string{
		"http://localhost.example.com", "http://localhost..", "http://127.0.0.1.nip.io", "http://0.0.0.0:5081",
		"http://[::]:5081", "http://10.0.0.1", "http://idx-proj.svc.us-east1.pinecone.io",
	} {
		_, err := checkHost(host, "--host")
		var ue *usageError
		if assert.ErrorAs(t, err, &ue, host) {
			assert.Contains(t, ue.msg, "--host \""+host+"\": plain http is for a loopback host only", host)
		}
	}
}

// A host that --index looks up and checkHost refuses is named by the
// index, not as a --host the user did not give. The control plane is a
// local server (PINECONE_CONTROLLER_HOST) that describes the index with a
// plain-http host that is not loopback.
func TestAHostLookedUpByIndexIsRefusedNamingTheIndex(t *testing.T) {
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"name":"my-index","host":"http://192.0.2.1","dimension":3,"metric":"cosine","vector_type":"dense",` +
			`"deletion_protection":"disabled","spec":{"pod":{"environment":"us-east1-gcp","pod_type":"p1.x1","pods":1,"replicas":1,"shards":1}},` +
			`"status":{"ready":true,"state":"Ready"}}`))
	}))
	t.Cleanup(api.Close)
	t.Setenv("PINECONE_CONTROLLER_HOST", api.URL)
	t.Setenv("PINECONE_API_KEY", longKey)
	res := runCmd(t, nil, strings.NewReader(records(t, 1)), "--index", "my-index", "--progress", "off", "--dead-letter", deadLetterPath(t))
	require.Equal(t, exitUsage, res.status, "stderr:\n%s", res.stderr)
	assert.Contains(t, res.stderr, `--index "my-index": its host "http://192.0.2.1": plain http is for a loopback host only`)
	assert.NotContains(t, res.stderr, "--host \"")
}
