package upsert

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"syscall"
	"testing"

	"github.com/pinecone-io/go-pinecone/v5/pinecone"
	"github.com/stretchr/testify/assert"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Pinecone's messages, as docs.pinecone.io ("Database limits") gives them.
const (
	monthlyWriteUnitsMessage = "Request failed. You've reached your write unit limit for the current month. \nTo continue writing data, upgrade your plan."
	upsertSizeMessage        = "Request failed. You've reached the max upsert size limit per second for index docs. Pace your upserts or contact Pinecone Support (https://app.pinecone.io/organizations/-/settings/support/ticket) to request a higher limit."
	upsertQPSMessage         = "Request failed. You've reached the upsert QPS limit for namespace docs (100 QPS). Pace your upsert requests or contact Pinecone Support to request a higher limit."
	embedTokensMessage       = "Request failed. You've reached the max embedding tokens per minute (250000) model 'llama-text-embed-v2'' and input type 'passage' for the current project. \nTo increase this limit, upgrade your plan."
	storageQuotaMessage      = "Request failed. You've reached the max storage allowed for project demo. To update or upsert new data, delete records or upgrade your plan."
	namespaceQuotaMessage    = "Request failed. You've reached the max namespaces allowed in serverless index docs. To add more namespaces, upgrade your plan."
	// Not published: the monthly embedding-token answer in the shape of
	// the monthly write units' (README, "Not confirmed anywhere public").
	monthlyEmbedTokensMessage = "Request failed. You've reached the embedding token limit (5000000) for model llama-text-embed-v2 for the current month. To continue embedding, upgrade your plan."
)

// pineconeREST is the error the SDK returns for a REST answer: a
// *pinecone.PineconeError whose text holds the JSON of the body.
func pineconeREST(code int, errorCode, message string) error {
	return &pinecone.PineconeError{Code: code, Msg: fmt.Errorf(`{"status_code":%d,"error_code":%q,"message":%q}`, code, errorCode, message)}
}

func TestClassifyReadsPineconesMessages(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want Class
	}{
		{"Pinecone's too-large text is too large even as a 429 over REST", pineconeREST(429, "RESOURCE_EXHAUSTED", "Your request is larger than the maximum supported size - 2MB"), ClassTooLarge},
		{"Pinecone's too-large text is too large even as RESOURCE_EXHAUSTED over gRPC", status.Error(codes.ResourceExhausted, "Your request is larger than the maximum supported size - 2MB"), ClassTooLarge},
		{"the monthly write units over REST are a quota", pineconeREST(429, "RESOURCE_EXHAUSTED", monthlyWriteUnitsMessage), ClassQuotaExceeded},
		{"the monthly write units over gRPC are a quota", status.Error(codes.ResourceExhausted, monthlyWriteUnitsMessage), ClassQuotaExceeded},
		{"HTTP 402 is a quota", pineconeREST(402, "PAYMENT_REQUIRED", "delinquent payment"), ClassQuotaExceeded},
		{"HTTP 403 QUOTA_EXCEEDED is a quota", pineconeREST(403, "QUOTA_EXCEEDED", storageQuotaMessage), ClassQuotaExceeded},
		{"the namespace quota over gRPC is a quota", status.Error(codes.PermissionDenied, namespaceQuotaMessage), ClassQuotaExceeded},
		{"another HTTP 403 is denied", pineconeREST(403, "FORBIDDEN", "this key may not write"), ClassDenied},
		{"another PERMISSION_DENIED is denied", status.Error(codes.PermissionDenied, "this key may not write"), ClassDenied},
		{"the monthly embedding tokens are a quota", pineconeREST(429, "RESOURCE_EXHAUSTED", monthlyEmbedTokensMessage), ClassQuotaExceeded},
		{"the embedding tokens per minute are a rate limit, though they say to upgrade", pineconeREST(429, "RESOURCE_EXHAUSTED", embedTokensMessage), ClassRateLimited},
		{"the upsert size per second is a rate limit", status.Error(codes.ResourceExhausted, upsertSizeMessage), ClassRateLimited},
		{"REST's request over 2 MB is too large", pineconeREST(400, "INVALID_ARGUMENT", "Your request is larger than the maximum supported size - 2MB. Please try to reduce your batch size."), ClassTooLarge},
		{"the earlier wording of a request over 2 MB is too large", pineconeREST(400, "INVALID_ARGUMENT", "Request size 3MB exceeds the maximum supported size of 2MB"), ClassTooLarge},
		{"the library's transport reads the body too", httpError(429, 0, []byte(`{"error":{"code":"RESOURCE_EXHAUSTED","message":"`+monthlyWriteUnitsMessage+`"},"status":429}`)), ClassQuotaExceeded},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, Classify(tt.err))
		})
	}
}

// inferencePerSecondMessage is Pinecone's answer to the per-second
// inference limit (docs.pinecone.io/reference/api/database-limits).
const inferencePerSecondMessage = "Request failed. You've reached the max inference requests per second (100) for the current project."

func TestDescribeNamesTheLimitReached(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want Limit
	}{
		{"upsert QPS over gRPC", status.Error(codes.ResourceExhausted, upsertQPSMessage), LimitRequests},
		{"upsert size over gRPC", status.Error(codes.ResourceExhausted, upsertSizeMessage), LimitBytes},
		{"upsert size over REST", pineconeREST(429, "RESOURCE_EXHAUSTED", upsertSizeMessage), LimitBytes},
		{"embedding tokens over REST", pineconeREST(429, "RESOURCE_EXHAUSTED", embedTokensMessage), LimitEmbedTokens},
		{"embedding tokens through the library's transport", httpError(429, 0, []byte(embedTokensMessage)), LimitEmbedTokens},
		{"inference requests", pineconeREST(429, "RESOURCE_EXHAUSTED", "Request failed. You've reached the max inference requests per minute (2000) for the current project."), LimitInferenceRequests},
		{"inference requests per second", pineconeREST(429, "RESOURCE_EXHAUSTED", inferencePerSecondMessage), LimitInferenceRequests},
		{"inference requests per second through the library's transport", httpError(429, 0, []byte(inferencePerSecondMessage)), LimitInferenceRequests},
		{"upsert QPS in a namespace named for inference", status.Error(codes.ResourceExhausted, "Request failed. You've reached the upsert QPS limit for namespace inference requests (100 QPS)."), LimitRequests},
		{"a bare 429", pineconeREST(429, "", ""), LimitUnknown},
		{"a quota names no rate limit", status.Error(codes.ResourceExhausted, monthlyWriteUnitsMessage), LimitUnknown},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, describe(tt.err, Classify).Limit)
		})
	}
}

func TestNeverSent(t *testing.T) {
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"gRPC's unresolvable host", status.Error(codes.Unavailable, "name resolver error: produced zero addresses"), true},
		{"gRPC's refused connection", status.Error(codes.Unavailable, `connection error: desc = "transport: Error while dialing: dial tcp 127.0.0.1:1: connect: connection refused"`), true},
		{"a refused REST connection, wrapped by the SDK", fmt.Errorf("failed to upsert records: %w", &url.Error{Op: "Post", URL: "https://127.0.0.1:1/records", Err: refused}), true},
		{"an unresolvable REST host", &url.Error{Op: "Post", URL: "https://x.invalid", Err: &net.DNSError{Err: "no such host", Name: "x.invalid", IsNotFound: true}}, true},
		{"an UNAVAILABLE answer reached the index", status.Error(codes.Unavailable, "upstream connect error"), false},
		{"a reset connection may have delivered the request", &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}, false},
		{"a timeout may have delivered the request", status.Error(codes.DeadlineExceeded, "context deadline exceeded"), false},
		{"an unknown error", errors.New("?"), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, neverSent(tt.err))
		})
	}
	t.Run("unreachable names the host only for a request never sent", func(t *testing.T) {
		err := unreachable("nohost.invalid:443", status.Error(codes.Unavailable, "name resolver error: produced zero addresses"))
		assert.Contains(t, err.Error(), "cannot reach nohost.invalid:443")
		assert.Equal(t, codes.Unavailable, status.Code(errors.Unwrap(err)))
		other := status.Error(codes.Unavailable, "down")
		assert.Same(t, other, unreachable("h:443", other))
	})
}

// What an answer quotes is the caller's data: an apostrophe within a word
// neither opens nor closes a quote.
func TestWithoutQuotedDropsWhatAnAnswerQuotes(t *testing.T) {
	for _, tt := range []struct{ msg, want string }{
		{"you've reached the max namespaces allowed in serverless index 'docs' (100).", "you've reached the max namespaces allowed in serverless index '-' (100)."},
		{"vector id 'it's-quota_exceeded' is refused", "vector id '-' is refused"},
		{"keys 'a' 'b' and 'l'été'", "keys '-' '-' and '-'"},
		{"'quota exceeded'", "'-'"},
		{"an unclosed 'quota exceeded", "an unclosed 'quota exceeded"},
		{"it's 'x'y' z", "it's '-' z"},
	} {
		assert.Equal(t, tt.want, withoutQuoted(tt.msg), tt.msg)
	}
}
