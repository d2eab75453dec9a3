package main

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
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
