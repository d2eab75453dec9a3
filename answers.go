package upsert

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"regexp"
	"strings"
	"syscall"
	"unicode"
	"unicode/utf8"

	"google.golang.org/grpc/codes"
)

// Pinecone says more in the text of an answer than in its status: a 429 is
// a rate limit or a monthly quota, and the rate limit it names is the
// request rate, the upsert size or the embedding tokens. The phrases below
// are those of Pinecone's documented messages (docs.pinecone.io, "Database
// limits"); over gRPC the same texts are assumed to come with
// RESOURCE_EXHAUSTED (429) and PERMISSION_DENIED (403). Texts are matched
// in lower case, with runs of spaces and line breaks read as one space.

// quotaPhrases mark an answer that no retry can change before the quota
// does: the monthly write units or embedding tokens ("…limit for the
// current month…", 429), the storage and namespace quotas (403
// QUOTA_EXCEEDED), payment (402). "Upgrade your plan" alone is not one:
// the per-minute embedding-token limit says it too.
var quotaPhrases = []string{
	"for the current month",
	"quota_exceeded",
	"quota exceeded",
	"reached the max storage",
	"reached the max namespaces",
	"payment required",
}

// limitPhrases name the rate limit a 429 says was reached, checked in
// order.
var limitPhrases = []struct {
	phrase string
	limit  Limit
}{
	{"embedding tokens per minute", LimitEmbedTokens},
	{"tokens per minute", LimitEmbedTokens},
	{"upsert size limit", LimitBytes},
	// Write units are counted per KB of request (an assumption: no
	// message of Pinecone's per-index write-unit limit is published).
	{"write units per second", LimitBytes},
	{"qps limit", LimitRequests},
	{"inference requests", LimitInferenceRequests}, // "max inference requests per second (100)"
	{"requests per second", LimitRequests},
	{"inference", LimitInferenceRequests},
	{"embed requests", LimitInferenceRequests},
	{"requests per minute", LimitInferenceRequests},
}

// tooLargeText reports whether msg is Pinecone's answer to a request over
// 2 MB: "Your request is larger than the maximum supported size - 2MB"
// (REST), or an earlier wording, "Request size 3MB exceeds the maximum
// supported size of 2MB".
func tooLargeText(msg string) bool {
	m := wording(msg)
	return strings.Contains(m, "larger than the maximum supported size") || strings.Contains(m, "exceeds the maximum supported size")
}

// normalize lower-cases msg and reads every run of white space as one
// space.
func normalize(msg string) string {
	return strings.Join(strings.Fields(strings.ToLower(msg)), " ")
}

func hasPhrase(msg string, phrases []string) bool {
	for _, p := range phrases {
		if strings.Contains(msg, p) {
			return true
		}
	}
	return false
}

// isQuota reports whether msg says a quota of the project stops writes.
func isQuota(msg string) bool { return hasPhrase(wording(msg), quotaPhrases) }

// stopsOneNamespace reports whether e is the quota of namespaces per
// index: the index refuses to create the namespace written, and still
// takes writes into those it holds.
func stopsOneNamespace(e *Error) bool {
	return e.Class == ClassQuotaExceeded && strings.Contains(wording(e.Error()), "reached the max namespaces")
}

// namespaceNamed matches the namespace in the request-rate answer ("…QPS
// limit for namespace <namespace> (<limit> QPS)…"), normalized.
var namespaceNamed = regexp.MustCompile(`for namespace .* \((\d+) qps\)`)

// wording returns msg normalized, without the caller's data it names (the
// namespace of the request-rate answer, whatever it quotes): a namespace,
// an id or a metadata key holding "quota_exceeded" must not make a rate
// limit or one invalid record read as a spent quota.
func wording(msg string) string {
	return withoutQuoted(namespaceNamed.ReplaceAllString(normalize(msg), "for namespace - ($1 qps)"))
}

// withoutQuoted returns msg with what it quotes in single quotes ("…but
// got '<id>'", "Metadata key '<key>'…") replaced by '-'. A quote opens
// after a character that is no letter or digit and closes before one, so
// that an apostrophe within a word ("You've", an id "it's-x") does
// neither.
func withoutQuoted(msg string) string {
	var b strings.Builder
	prev := ' '
	for i := 0; i < len(msg); {
		r, size := utf8.DecodeRuneInString(msg[i:])
		if r == '\'' && !inWord(prev) {
			if end := closingQuote(msg[i+size:]); end >= 0 {
				b.WriteString("'-'")
				i += size + end + 1
				prev = '\''
				continue
			}
		}
		b.WriteRune(r)
		i, prev = i+size, r
	}
	return b.String()
}

// closingQuote returns the index in s of the first quote followed by no
// letter or digit, or -1.
func closingQuote(s string) int {
	for i, r := range s {
		if r != '\'' {
			continue
		}
		if next, _ := utf8.DecodeRuneInString(s[i+1:]); i+1 == len(s) || !inWord(next) {
			return i
		}
	}
	return -1
}

func inWord(r rune) bool { return unicode.IsLetter(r) || unicode.IsDigit(r) }

// limitNamed returns the rate limit msg says was reached.
func limitNamed(msg string) Limit {
	msg = wording(msg)
	for _, l := range limitPhrases {
		if strings.Contains(msg, l.phrase) {
			return l.limit
		}
	}
	return LimitUnknown
}

// perSecond reports whether a rate-limited answer, msg, names a limit per
// second ("max inference requests per second (100)"), not per minute.
func perSecond(msg string) bool {
	return strings.Contains(wording(msg), "per second")
}

// neverSentPhrases are in gRPC's UNAVAILABLE when the channel could not
// connect: gRPC fails such a call before writing anything of it.
var neverSentPhrases = []string{
	"name resolver error",
	"produced zero addresses",
	"while dialing",
	"connection refused",
	"no such host",
	"authentication handshake failed",
}

// httpToHTTPS is net/http's error when an https request met a server
// answering plain HTTP: the TLS handshake failed, so nothing was sent.
const httpToHTTPS = "server gave HTTP response to HTTPS client"

// neverSent reports whether err says that the request never reached the
// index: its host did not resolve, the connection was refused or could
// not be set up. Such a request cannot have written anything.
func neverSent(err error) bool {
	var dns *net.DNSError
	var op *net.OpError
	var cert *tls.CertificateVerificationError
	var header tls.RecordHeaderError
	var ech *tls.ECHRejectionError
	switch {
	case errors.As(err, &dns), errors.As(err, &cert):
		return true
	case errors.As(err, &header) && header.Conn != nil, errors.As(err, &ech), strings.Contains(err.Error(), httpToHTTPS):
		// The TLS handshake failed: the request was never written. A
		// record header error with no Conn may come after it, and an
		// alert ("remote error") at any time.
		return true
	case errors.As(err, &op) && op.Op == "dial":
		return true
	case errors.Is(err, syscall.ECONNREFUSED):
		return true
	}
	if st, ok := grpcStatus(err); ok && st.Code() == codes.Unavailable {
		return hasPhrase(strings.ToLower(st.Message()), neverSentPhrases)
	}
	return false
}

// unreachable names host in err when err says the request never reached
// it: gRPC's "name resolver error: produced zero addresses" names nothing.
func unreachable(host string, err error) error {
	if err == nil || host == "" || !neverSent(err) {
		return err
	}
	return fmt.Errorf("cannot reach %s (nothing was sent): %w", host, err)
}
