package upsert

// defaultNamespace is the name Pinecone gives the default namespace. Since
// April 2025 Pinecone takes "" and "__default__" as the same namespace;
// go-pinecone v5 sends "__default__" for it, v6 sends "".
const defaultNamespace = "__default__"

// namespaceKey returns the name under which a run keeps the state of
// namespace (its batches, its lane of the [Limiter], the ids in flight),
// so that "" and "__default__" share one: "".
func namespaceKey(namespace string) string {
	if namespace == defaultNamespace {
		return ""
	}
	return namespace
}

// sameNamespace reports whether a and b name one namespace.
func sameNamespace(a, b string) bool { return namespaceKey(a) == namespaceKey(b) }
