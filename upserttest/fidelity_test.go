package upserttest_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/upsertlib/upsert/upserttest"
)

// recordsNDJSON builds a records-upsert body of n records; extra is added to each
// record's JSON object (without braces), e.g. `"blob":"..."`.
func recordsNDJSON(n int, extra string) string {
	var b strings.Builder
	for i := 0; i < n; i++ {
		fmt.Fprintf(&b, `{"_id":"r-%d","chunk_text":"text"`, i)
		if extra != "" {
			b.WriteString(",")
			b.WriteString(extra)
		}
		b.WriteString("}\n")
	}
	return b.String()
}

// reference.md, "Real Pinecone": "REST answers \"Your request is larger than
// the maximum supported size - 2MB\"" (also pinecone-ts-client issue #23).
// The status is not published, so only a 4xx is required here.
func TestRecordsOver2MBAnswerPineconesText(t *testing.T) {
	srv := start(t)
	// 60 records of about 35 KB each (under the 40 KB metadata limit): about
	// 2.1 MB, over 2,000,000 bytes.
	body := recordsNDJSON(60, fmt.Sprintf(`"blob":%q`, strings.Repeat("x", 35_000)))
	require.Greater(t, len(body), upserttest.DefaultMaxRequestBytes)
	status, _, resp := post(t, srv, "/records/namespaces/ns/upsert", "k", body)
	require.Equal(t, 4, status/100, "a client error: %d %s", status, resp)
	assert.Contains(t, resp, `"Your request is larger than the maximum supported size - 2MB"`, "Pinecone's text for a request over 2 MB")
}
