package upsertotel

import (
	"strings"

	"github.com/upsertlib/upsert/internal/namecap"
	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
)

// DefaultMaxNamespaces is how many Pinecone namespaces a Telemetry's
// metrics name in db.namespace unless [WithMaxNamespaces] says otherwise:
// the same as upsertprom's.
const DefaultMaxNamespaces = 100

// OtherNamespace is the db.namespace of the metrics of the namespaces seen
// after the Telemetry named its most ([WithMaxNamespaces]): the same value
// as upsertprom's. A namespace of that name shares their series.
const OtherNamespace = "_other"

// namespaceLabels gives the db.namespace of a Pinecone namespace on
// metrics: the namespace itself for the first max seen, OtherNamespace
// after. The default namespace has none, and takes no place.
type namespaceLabels struct{ namecap.Cap }

// of returns the db.namespace of namespace ns on metrics: "" (left out)
// for the default namespace, else ns as validUTF8 spells it within the
// cap, and OtherNamespace beyond it.
func (l *namespaceLabels) of(ns string) string {
	if ns == "" {
		return ""
	}
	label, _ := l.Of(ns)
	return label
}

// validUTF8 returns s with each run of bytes that is not UTF-8 replaced
// by U+FFFD, and s itself when it is valid. OTLP carries attributes and
// span names as protobuf strings, which must be UTF-8: one that is not
// fails the whole export it is part of. upsert refuses the records of a
// namespace that is not valid UTF-8, but reports them to the Failure
// observer with it.
func validUTF8(s string) string {
	return strings.ToValidUTF8(s, "\uFFFD")
}

// namespaceAttrs are db.operation.name and, unless namespace is "",
// db.namespace: namespace as it is, so the caller spells it valid UTF-8
// (validUTF8, or namespaceLabels.of for metrics).
func namespaceAttrs(operation, namespace string) []attribute.KeyValue {
	if namespace == "" {
		return []attribute.KeyValue{semconv.DBOperationName(operation)}
	}
	return []attribute.KeyValue{semconv.DBOperationName(operation), semconv.DBNamespace(namespace)}
}
