package upsert

import (
	"github.com/pinecone-io/go-pinecone/v5/pinecone"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// Pinecone's per-request limits (docs.pinecone.io, database limits).
const (
	// MaxBatchSize is the most vectors Pinecone accepts in one upsert
	// request.
	MaxBatchSize = 1000

	// MaxRequestBytes is the largest upsert request Pinecone accepts: 2 MB.
	// Batches are cut so that the encoded request never exceeds it.
	MaxRequestBytes = 2_000_000
)

// item is one record on its way through the pipeline: a vector, or an
// integrated-embedding record.
type item struct {
	seq  int    // position in the input: the index in the slice given to All
	id   string // the record's id
	ns   string // the record's namespace, once checked
	size int    // bytes the record adds to its encoded request
	hash uint64 // of namespace and id, when the intake keeps ids in order
	vec  *pinecone.Vector
	rec  *pinecone.IntegratedRecord
}

// Field numbers of the SDK's gRPC messages (db_data_2025-10.proto). The
// sizes below are the exact protobuf encoding; a test checks them against
// proto.Size of the SDK's registered messages.
const (
	fieldRequestVectors   = 1 // UpsertRequest.vectors
	fieldRequestNamespace = 2 // UpsertRequest.namespace
	fieldVectorID         = 1 // Vector.id
	fieldVectorValues     = 2 // Vector.values (packed fixed32)
	fieldVectorMetadata   = 3 // Vector.metadata (google.protobuf.Struct)
	fieldVectorSparse     = 4 // Vector.sparse_values
	fieldSparseIndices    = 1 // SparseValues.indices (packed varint)
	fieldSparseValues     = 2 // SparseValues.values (packed fixed32)
)

// requestOverhead returns the bytes an UpsertRequest spends on its
// namespace.
func requestOverhead(namespace string) int {
	if namespace == "" {
		return 0
	}
	return protowire.SizeTag(fieldRequestNamespace) + protowire.SizeBytes(len(namespace))
}

// wireSize returns how many bytes v adds to an encoded UpsertRequest,
// including its field tag and length. metadataSize is proto.Size of its
// metadata, or -1 to compute it.
func wireSize(v *pinecone.Vector, metadataSize int) int {
	n := vectorSize(v, metadataSize)
	return protowire.SizeTag(fieldRequestVectors) + protowire.SizeBytes(n)
}

func vectorSize(v *pinecone.Vector, metadataSize int) int {
	n := 0
	if v.Id != "" {
		n += protowire.SizeTag(fieldVectorID) + protowire.SizeBytes(len(v.Id))
	}
	if v.Values != nil && len(*v.Values) > 0 {
		n += protowire.SizeTag(fieldVectorValues) + protowire.SizeBytes(4*len(*v.Values))
	}
	if v.Metadata != nil {
		if metadataSize < 0 {
			metadataSize = proto.Size(v.Metadata)
		}
		n += protowire.SizeTag(fieldVectorMetadata) + protowire.SizeBytes(metadataSize)
	}
	if s := v.SparseValues; s != nil {
		n += protowire.SizeTag(fieldVectorSparse) + protowire.SizeBytes(sparseSize(s))
	}
	return n
}

func sparseSize(s *pinecone.SparseValues) int {
	n := 0
	if len(s.Indices) > 0 {
		packed := 0
		for _, i := range s.Indices {
			packed += protowire.SizeVarint(uint64(i))
		}
		n += protowire.SizeTag(fieldSparseIndices) + protowire.SizeBytes(packed)
	}
	if len(s.Values) > 0 {
		n += protowire.SizeTag(fieldSparseValues) + protowire.SizeBytes(4*len(s.Values))
	}
	return n
}

// batcher cuts a stream of items into batches by count and by encoded
// request size. The size of each batch is asked of next when the batch
// starts, so that an adaptive batch size takes effect at the next batch.
type batcher struct {
	maxBytes int                             // for the records alone: MaxRequestBytes less the request's overhead
	next     func() (size int, trial uint64) // the size of the next batch, and the trial of a size it is a batch of (0: none)
	cur      batch
	gen      int // counts the batches started: tells a batch from the next one of its route
	target   int
	bytes    int
}

// batch is a batch of items; trial is the number of the trial of a batch
// size it is a batch of, 0 for none (see lane.nextBatch).
type batch struct {
	items []item
	bytes int // the records' encoded size
	trial uint64
	turn  *place // its place in its route's line, once dispatched
}

// add appends it and returns the batch that was closed by it: the current
// one when it is full or it does not fit, or the one it filled. ok is
// false when no batch closed. At most one batch closes per add, so a batch
// that fills as it starts waits for the next add or take.
func (b *batcher) add(it item) (full batch, ok bool) {
	if len(b.cur.items) > 0 && (len(b.cur.items) >= b.target || b.bytes+it.size > b.maxBytes) {
		full, ok = b.take(), true
	}
	if len(b.cur.items) == 0 {
		b.gen++
		b.target, b.cur.trial = b.next()
		b.cur.items = make([]item, 0, b.target)
	}
	b.cur.items = append(b.cur.items, it)
	b.bytes += it.size
	if !ok && len(b.cur.items) >= b.target {
		full, ok = b.take(), true
	}
	return full, ok
}

// take returns the pending batch, possibly empty, and starts a new one.
func (b *batcher) take() batch {
	full := b.cur
	full.bytes = b.bytes
	b.cur, b.bytes = batch{}, 0
	return full
}

// split returns the two halves of a batch, the first one larger when the
// length is odd. The first half's capacity is cut so that nothing appended
// to it could overwrite the second.
func split(items []item) (first, second []item) {
	mid := (len(items) + 1) / 2
	return items[:mid:mid], items[mid:]
}

// recut cuts items into the fewest nearly equal pieces of at most limit
// records, in order.
func recut(items []item, limit int) [][]item {
	k := (len(items) + limit - 1) / limit
	pieces := make([][]item, k)
	for i := range k {
		lo, hi := i*len(items)/k, (i+1)*len(items)/k
		pieces[i] = items[lo:hi:hi]
	}
	return pieces
}
