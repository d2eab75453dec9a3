package upserttest_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/pinecone-io/go-pinecone/v5/pinecone"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

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

// Pinecone answers a REST request over 2 MB 400 Bad Request with "Your
// request is larger than the maximum supported size - 2MB. Please try to
// reduce your batch size." (pinecone-ts-client issue #23; the TypeScript
// client's PineconeBadRequestError, its class for 400, in
// pinecone-vercel-starter PR #28), code 3 (INVALID_ARGUMENT) in the body.
func TestRecordsOver2MBAreAnswered400WithPineconesText(t *testing.T) {
	srv := start(t)
	// 60 records of about 35 KB each (under the 40 KB metadata limit): about
	// 2.1 MB, over 2,000,000 bytes.
	body := recordsNDJSON(60, fmt.Sprintf(`"blob":%q`, strings.Repeat("x", 35_000)))
	require.Greater(t, len(body), upserttest.DefaultMaxRequestBytes)
	status, _, resp := post(t, srv, "/records/namespaces/ns/upsert", "k", body)
	assert.Equal(t, http.StatusBadRequest, status, resp)
	code, msg := decodeError(t, resp)
	assert.Equal(t, codes.InvalidArgument, code)
	assert.Equal(t, "Your request is larger than the maximum supported size - 2MB. Please try to reduce your batch size.", msg)
	st := srv.Stats()
	assert.Equal(t, map[codes.Code]int{codes.InvalidArgument: 1}, st.Codes)
	assert.Equal(t, map[int]int{http.StatusBadRequest: 1}, st.HTTPCodes)
	assert.Zero(t, st.RateLimited, "not a rate limit")
	assert.Zero(t, srv.RecordCount(ns))
}

// Through the SDK (go-pinecone v5.4.1), the answer to a records upsert over
// 2 MB is a *pinecone.PineconeError with Code 400 whose text holds the
// phrase that the upsert library reads as too large ("larger than the
// maximum supported size", its answers.go), so that it splits the batch
// rather than failing its records as invalid.
func TestTheSDKSeesARecordsUpsertOver2MBAsABadRequestThatSaysItIsTooLarge(t *testing.T) {
	srv := start(t)
	idx, _ := connectREST(t, srv, "test", ns)
	recs := make([]*pinecone.IntegratedRecord, 60) // 60 × 35 KB: over 2 MB
	for i := range recs {
		recs[i] = record(fmt.Sprint("r", i), "chunk_text", "text", "blob", strings.Repeat("x", 35_000))
	}
	code, msg := restStatus(t, idx.UpsertRecords(bg(t), recs))
	assert.Equal(t, http.StatusBadRequest, code)
	assert.Contains(t, msg, "larger than the maximum supported size")
	assert.Contains(t, msg, "Your request is larger than the maximum supported size - 2MB. Please try to reduce your batch size.")
	assert.Zero(t, srv.RecordCount(ns))
}

// A namespace that is not ASCII, or has a NUL, is refused as invalid and
// nothing is written: Pinecone allows "ASCII except \0" in a namespace
// (docs.pinecone.io/reference/api/database-limits/identifier-limits).
func TestANamespaceThatIsNotASCIIIsRefused(t *testing.T) {
	for _, bad := range []string{"café", "a\x00b"} {
		t.Run(fmt.Sprintf("%q", bad), func(t *testing.T) {
			srv := start(t)
			idx := connectAs(t, srv, "test", bad)
			_, err := idx.UpsertVectors(bg(t), batch("v", 3, 4))
			require.Error(t, err, "Pinecone refuses a namespace that is not ASCII without NUL")
			assert.Equal(t, codes.InvalidArgument, status.Code(err))
			assert.Zero(t, srv.Count(bad), "nothing written")
		})
	}
}

// An id that is not ASCII is refused with Pinecone's words: answers users
// quoted read {"code":3,"message":"Vector ID must be ASCII, but got 'A
// Braña_0'","details":[]} (and github.com/Kav-K/GPTDiscord/issues/84).
func TestAnIDThatIsNotASCIIIsRefusedInPineconesWords(t *testing.T) {
	srv := start(t)
	idx := connect(t, srv)
	_, err := idx.UpsertVectors(bg(t), append(batch("v", 1, 4), denseN("é-1", 4)))
	require.Error(t, err)
	assert.Equal(t, codes.InvalidArgument, status.Code(err))
	assert.Contains(t, status.Convert(err).Message(), "ID must be ASCII, but got ")
}

// Pinecone's answer to all-zero dense values names the vector, as its
// answer to a non-ASCII id does: a captured REST answer
// (deepset-ai/haystack issue #10194, Dec 2025) reads
//
//	{"code":3,"message":"Dense vectors must contain at least one non-zero value. Vector ID 'f81d…' contains only zeros","details":[]}
//
// so that code which reads the id out of the answer, to set aside only the
// bad record, can be tested against the server.
func TestAnAllZeroDenseVectorIsRefusedNamingItLikePinecone(t *testing.T) {
	srv := start(t)
	_, err := connect(t, srv).UpsertVectors(bg(t), []*pinecone.Vector{dense("ok", 1, 2), dense("zeros-1", 0, 0)})
	require.Equal(t, codes.InvalidArgument, code(err))
	assert.Equal(t, "Dense vectors must contain at least one non-zero value. Vector ID 'zeros-1' contains only zeros",
		status.Convert(err).Message())
	assert.Zero(t, srv.Count(ns), "the whole request is refused")
}
