package upserttest

import (
	"fmt"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/upsertlib/upsert/internal/tokenbucket"
)

// This file holds the limits of a Server that Pinecone answers with its
// own messages (docs.pinecone.io, "Database limits"): the rate limits of a
// namespace (capacity.go holds their buckets), the index-wide write units
// per second and embedding tokens per minute, and the quotas: monthly
// write units, namespaces per index.

// supportURL ends Pinecone's rate-limit messages.
const supportURL = "https://app.pinecone.io/organizations/-/settings/support/ticket"

// indexName is the index that the messages name.
const indexName = "upserttest"

// Pinecone's messages, per limit.
var (
	upsertSizeMessage = "Request failed. You've reached the max upsert size limit per second for index " + indexName +
		". Pace your upserts or contact Pinecone Support (" + supportURL + ") to request a higher limit."
	writeUnitsMessage = "Request failed. You've reached the max write units per second for index " + indexName +
		". Pace your upserts or contact Pinecone Support (" + supportURL + ") to request a higher limit."
	monthlyWriteUnitsMessage = "Request failed. You've reached your write unit limit for the current month. To continue writing data, upgrade your plan."
	namespacesMessage        = "Request failed. You've reached the max namespaces allowed in serverless index " + indexName +
		". To add more namespaces, upgrade your plan."
)

func requestRateMessage(namespace string, perSecond float64) string {
	return fmt.Sprintf("Request failed. You've reached the upsert QPS limit for namespace %s (%g QPS). "+
		"Pace your upsert requests or contact Pinecone Support (%s) to request a higher limit.", namespace, perSecond, supportURL)
}

func embedTokensMessage(perMinute int) string {
	return fmt.Sprintf("Request failed. You've reached the max embedding tokens per minute (%d) model 'llama-text-embed-v2' "+
		"and input type 'passage' for the current project. To increase this limit, upgrade your plan.", perMinute)
}

// limitError is the answer to a request over a limit: a gRPC status, and
// whether the limit is a quota (which the stats count apart from rate
// limits).
type limitError struct {
	st    *status.Status
	quota bool
}

func (e *limitError) Error() string              { return e.st.Err().Error() }
func (e *limitError) GRPCStatus() *status.Status { return e.st }

func rateLimited(msg string) error {
	return &limitError{st: status.New(codes.ResourceExhausted, msg)}
}

func quotaExceeded(code codes.Code, msg string) error {
	return &limitError{st: status.New(code, msg), quota: true}
}

// writeUnits is what Pinecone meters for an upsert request of the given
// size: 1 per KB, at least 5.
func writeUnits(bytes int) int {
	return max(5, (bytes+999)/1000)
}

// overwriteUnits is what Pinecone meters on top of an upsert request for
// the records it overwrote, of the given total size: 1 per KB, rounded up
// as writeUnits does; 0 when it overwrote none.
func overwriteUnits(bytes int) int {
	return (bytes + 999) / 1000
}

// chargeOverwrites meters the write units of the records a write
// overwrote, bytes in all, once the write is done (only then is it known
// what it replaced): they count in Stats.WriteUnits and the monthly quota,
// and are taken from the write-unit bucket (WithWriteUnitRate), which they
// may leave in debt, to be repaid by its refill before the next request is
// admitted.
func (s *Server) chargeOverwrites(bytes int) {
	wu := overwriteUnits(bytes)
	if wu == 0 {
		return
	}
	l := &s.limits
	l.mu.Lock()
	l.writeUnits.Take(s.cfg.bucketTime(s.start, s.cfg.now()), wu)
	l.monthlyUsed += int64(wu)
	l.mu.Unlock()
	s.countWriteUnits(wu)
}

// embedTokens estimates the embedding tokens of a record: one per 4 bytes
// of the text the index embeds, rounded up, at least 1. With a field map
// (fieldMap, WithFieldMap's field, not ""), that text is the field's alone,
// as Pinecone embeds, and charges, only the field_map field, not the
// metadata beside it. Without one, the server cannot tell the text from
// the metadata, and counts every string field but the id: an estimate
// that may charge more than Pinecone would.
func embedTokens(r record, fieldMap string) int {
	n := 0
	if fieldMap != "" {
		text, _ := r.fields[fieldMap].(string)
		n = len(text)
	} else {
		for k, v := range r.fields {
			if s, ok := v.(string); ok && k != r.idKey {
				n += len(s)
			}
		}
	}
	return max(1, (n+3)/4)
}

// indexLimits is the state of the index-wide limits.
type indexLimits struct {
	mu          sync.Mutex
	writeUnits  *tokenbucket.Bucket // nil when disabled
	embedTokens *tokenbucket.Bucket
	monthlyUsed int64 // write units admitted since NewServer or Reset
}

func (l *indexLimits) reset(cfg *config) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.writeUnits = newBucket(cfg.writeUnitRate)
	l.embedTokens = newBucket(cfg.embedTokens)
	l.monthlyUsed = 0
}

// admission is what a request asks of the limits.
type admission struct {
	namespace string
	now       time.Time
	items     int // vectors or records
	bytes     int
	tokens    int // embedding tokens, for REST records
}

// admit checks a request against the quotas and then every bucket, the
// namespace's and the index's, taking from all of them only when all have
// enough. It returns the answer of the first limit that refuses it, or
// nil. A request it admits holds a reservation of its namespace
// (reserveNamespace), which the caller gives back with releaseNamespace
// once the request has written, or will not write.
func (s *Server) admit(a admission) error {
	if err := s.reserveNamespace(a.namespace); err != nil {
		return err
	}
	wu, err := s.take(a)
	if err != nil {
		s.releaseNamespace(a.namespace)
		return err
	}
	s.countWriteUnits(wu)
	return nil
}

// take takes a's tokens from every bucket if every bucket has enough, and
// returns the write units charged.
func (s *Server) take(a admission) (writeUnitsTaken int, err error) {
	caps := s.capacity(a.namespace)
	l := &s.limits
	caps.mu.Lock()
	defer caps.mu.Unlock()
	l.mu.Lock()
	defer l.mu.Unlock()
	if q := s.cfg.monthlyWriteUnits; q > 0 && l.monthlyUsed >= q {
		return 0, quotaExceeded(codes.ResourceExhausted, monthlyWriteUnitsMessage)
	}
	wu := writeUnits(a.bytes)
	at := s.cfg.bucketTime(s.start, a.now) // the index's buckets follow its capacity changes
	switch {
	case !caps.vectors.Has(at, a.items), !caps.bytes.Has(at, a.bytes):
		return 0, rateLimited(upsertSizeMessage)
	case !caps.requests.Has(at, 1):
		qps := s.cfg.requestRate.rate * s.cfg.factorAt(a.now.Sub(s.start))
		return 0, rateLimited(requestRateMessage(a.namespace, qps))
	case !l.writeUnits.Has(at, wu):
		return 0, rateLimited(writeUnitsMessage)
	case a.tokens > 0 && !l.embedTokens.Has(a.now, a.tokens):
		return 0, rateLimited(embedTokensMessage(s.cfg.embedTokens.burst))
	}
	caps.vectors.Take(at, a.items)
	caps.bytes.Take(at, a.bytes)
	caps.requests.Take(at, 1)
	l.writeUnits.Take(at, wu)
	if a.tokens > 0 {
		l.embedTokens.Take(a.now, a.tokens)
	}
	l.monthlyUsed += int64(wu)
	return wu, nil
}

// reserveNamespace refuses a request into a new namespace when the index
// has as many as WithMaxNamespaces allows, counting both the namespaces
// that hold vectors or records and those reserved by admitted requests
// still on their way to writing (waiting for a slot, or in their write
// latency): the quota is enforced at admission, as Pinecone refuses such a
// request with 403 at once, nothing written, so concurrent first writes
// into new namespaces cannot together exceed it. Otherwise it reserves the
// namespace for the request until releaseNamespace. Without
// WithMaxNamespaces it does nothing.
func (s *Server) reserveNamespace(namespace string) error {
	max := s.cfg.maxNamespaces
	if max <= 0 {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.store[namespace]) == 0 && len(s.records[namespace]) == 0 && s.reserved[namespace] == 0 {
		used := s.namespacesLocked()
		for ns := range s.reserved {
			used[ns] = true
		}
		if len(used) >= max { // namespace is not among them
			return quotaExceeded(codes.PermissionDenied, namespacesMessage)
		}
	}
	if s.reserved == nil {
		s.reserved = make(map[string]int)
	}
	s.reserved[namespace]++
	return nil
}

// releaseNamespace gives back a reservation of reserveNamespace, once its
// request has written (the namespace then holds data, which counts in its
// stead) or will not write.
func (s *Server) releaseNamespace(namespace string) {
	if s.cfg.maxNamespaces <= 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.reserved[namespace]--; s.reserved[namespace] <= 0 {
		delete(s.reserved, namespace)
	}
}

// namespaceKey is the name under which the server keeps a namespace: ""
// and "__default__" are one namespace, as on Pinecone since April 2025.
func namespaceKey(namespace string) string {
	if namespace == "" {
		return defaultNamespace
	}
	return namespace
}

// defaultNamespace is Pinecone's name for the default namespace.
const defaultNamespace = "__default__"

// validID checks a vector or record id as Pinecone does: 1 to 512 ASCII
// characters, no NUL. kind is "Vector" or "Record".
func validID(kind, id string) error {
	switch {
	case len(id) == 0:
		return invalid("%s ID must not be empty", kind)
	case len(id) > MaxIDBytes:
		return invalid("%s ID length %d exceeds the maximum length of %d bytes", kind, len(id), MaxIDBytes)
	case strings.ContainsRune(id, 0):
		return invalid("%s ID must not contain NUL", kind)
	case strings.ContainsFunc(id, notASCII):
		return invalid("%s ID must be ASCII, but got '%s'", kind, id) // Pinecone's words
	}
	return nil
}

// notASCII reports whether r is outside ASCII or NUL, which Pinecone's
// identifiers (ids, namespaces) refuse.
func notASCII(r rune) bool { return r == 0 || r >= utf8.RuneSelf }
