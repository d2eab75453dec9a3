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

// A metadata key that starts with "$" is refused, over both transports.
// The SDK's source states the rule (go-pinecone v5.4.1,
// pinecone/models.go, NewMetadata): "Keys must be strings and must not
// start with a $", next to the rules upserttest already enforces ("Nested
// JSON objects are not supported", "Null values are not supported"). Bad
// input is answered INVALID_ARGUMENT over gRPC (reference.md: "INVALID_ARGUMENT
// for bad input") and 400 over REST, and nothing of the request is
// written, as for the other metadata rules. upserttest checked the
// values' types and the size, never the keys, so it stored such a vector
// or record.
func TestAMetadataKeyStartingWithDollarIsRefusedOverBothTransports(t *testing.T) {
	t.Run("gRPC UpsertVectors", func(t *testing.T) {
		srv := start(t)
		v := dense("a", 1, 2)
		v.Metadata = meta(t, map[string]any{"$genre": "drama"})
		_, err := connect(t, srv).UpsertVectors(bg(t), []*pinecone.Vector{dense("ok", 1, 2), v})
		assert.Equal(t, codes.InvalidArgument, code(err), "a metadata key starting with $ is refused: %v", err)
		assert.Zero(t, srv.Count(ns), "nothing of the request is written")
	})
	t.Run("REST UpsertRecords", func(t *testing.T) {
		srv := start(t)
		idx, _ := connectREST(t, srv, "test", ns)
		err := idx.UpsertRecords(bg(t), []*pinecone.IntegratedRecord{
			record("ok", "chunk_text", "t"),
			record("r", "chunk_text", "t", "$genre", "drama"),
		})
		require.Error(t, err, "a record field (metadata) starting with $ is refused")
		code, _ := restStatus(t, err)
		assert.Equal(t, http.StatusBadRequest, code)
		assert.Zero(t, srv.RecordCount(ns), "nothing of the request is written")
	})
}

// An index's dimension is "fixed at index creation" (reference.md, Real
// Pinecone: "Dense dimension ≤ 20,000 and fixed at index creation"), so a
// vector of 20,001 values written into an index of dimension 4 is a
// dimension mismatch, which Pinecone answers "INVALID_ARGUMENT \"Vector
// dimension N does not match the dimension of the index M\"" (reference.md,
// Answers). upserttest checked its own maximum first ("Vector dimension
// 20001 exceeds the maximum dimension of 20000") even when the index's
// dimension was known, a text no Pinecone index with a dimension answers.
func TestAVectorOver20000ValuesIntoAnIndexOfKnownDimensionIsADimensionMismatch(t *testing.T) {
	srv := start(t, upserttest.WithDimension(4))
	_, err := connect(t, srv).UpsertVectors(bg(t), []*pinecone.Vector{denseN("big", upserttest.MaxDimension+1)})
	require.Equal(t, codes.InvalidArgument, code(err))
	assert.Equal(t, fmt.Sprintf("Vector dimension %d does not match the dimension of the index 4", upserttest.MaxDimension+1),
		status.Convert(err).Message())
	assert.Zero(t, srv.Count(ns))
}

// Namespace names with characters that the REST path must escape
// ("/", "?", "#", " ", "%") are one namespace over gRPC and REST, and
// DescribeIndexStats names it as sent (reference.md: a namespace is up to
// 512 ASCII characters, no NUL).
func TestNamespacesWithPathCharactersAreOneNamespaceOverBothTransports(t *testing.T) {
	for _, name := range []string{"a/b", "a?b", "a#b", "a b", "a%2Fb"} {
		t.Run(fmt.Sprintf("%q", name), func(t *testing.T) {
			srv := start(t)
			_, err := connectAs(t, srv, "test", name).UpsertVectors(bg(t), []*pinecone.Vector{dense("v", 1)})
			require.NoError(t, err)
			idx, _ := connectREST(t, srv, "test", name)
			require.NoError(t, idx.UpsertRecords(bg(t), []*pinecone.IntegratedRecord{record("r", "chunk_text", "t")}))
			assert.Equal(t, 1, srv.Count(name))
			assert.Equal(t, 1, srv.RecordCount(name))
			st, err := idx.DescribeIndexStats(bg(t))
			require.NoError(t, err)
			require.Contains(t, st.Namespaces, name)
			assert.EqualValues(t, 2, st.Namespaces[name].VectorCount)
		})
	}
}
