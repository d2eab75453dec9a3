package upsert

// Fuzz targets for the pieces of the library that take arbitrary input: the
// error classifier, the record validator, the batcher and All's rule for
// repeated ids. Their seed corpora are in testdata/fuzz/<FuzzName>/ (or in
// f.Add) and run with every go test; a brief fuzz pass of each (go test
// -fuzz takes one target at a time):
//
//	rc=0
//	for f in FuzzClassify FuzzValidate FuzzBatcher FuzzAllDuplicates; do
//		go test -run='^$' -fuzz="^$f\$" -fuzztime=5s . || rc=1
//	done
//	exit $rc
//
// A failing input is written to testdata/fuzz/<FuzzName>/; keep it there.

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/pinecone-io/go-pinecone/v5/pinecone"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/stretchr/testify/require"
)

// ---- FuzzClassify ----

// Kinds of error FuzzClassify builds.
const (
	fuzzErrGRPC     = iota // a gRPC status error
	fuzzErrPinecone        // a *pinecone.PineconeError
	fuzzErrPlain           // an error the classifier does not know
	numFuzzErrKinds
)

// unwrapper is a wrapper that is neither fmt's nor errors.Join's.
type unwrapper struct{ err error }

func (u unwrapper) Error() string { return "wrapped: " + u.err.Error() }
func (u unwrapper) Unwrap() error { return u.err }

// wrapFuzz wraps err in n layers, each chosen by a bit pair of how: fmt's %w,
// fmt with two %w (a plain error first), errors.Join, or a custom type.
func wrapFuzz(err error, n int, how uint8) error {
	for i := range n {
		switch (how >> (2 * (i % 4))) & 3 {
		case 0:
			err = fmt.Errorf("layer %d: %w", i, err)
		case 1:
			err = fmt.Errorf("%w; %w", errors.New("unrelated"), err)
		case 2:
			err = errors.Join(err)
		case 3:
			err = unwrapper{err}
		}
	}
	return err
}

// wantGRPCClass is the documented class of a gRPC status (see the Class
// constants).
func wantGRPCClass(c codes.Code, msg string) Class {
	if m := proxyStatus.FindStringSubmatch(msg); m != nil {
		code, _ := strconv.Atoi(m[1])
		return wantHTTPClass(code, msg) // an HTTP answer grpc-go relayed
	}
	quota := isQuota(msg) // Pinecone's quota texts, as answers.go lists them
	switch c {
	case codes.ResourceExhausted:
		switch {
		case strings.Contains(wording(msg), "larger than max"), tooLargeText(msg):
			return ClassTooLarge // gRPC's own message size limit, or Pinecone's text (not what it quotes)
		case quota:
			return ClassQuotaExceeded
		}
		return ClassRateLimited
	case codes.DeadlineExceeded:
		return ClassTimeout
	case codes.Unavailable, codes.Internal, codes.Unknown, codes.Aborted, codes.DataLoss:
		return ClassServer
	case codes.InvalidArgument, codes.FailedPrecondition, codes.OutOfRange, codes.AlreadyExists:
		switch {
		case quota:
			return ClassQuotaExceeded
		case tooLargeText(msg):
			return ClassTooLarge
		}
		return ClassInvalid
	case codes.PermissionDenied:
		if quota {
			return ClassQuotaExceeded
		}
		return ClassDenied
	case codes.Unauthenticated, codes.NotFound, codes.Unimplemented:
		return ClassDenied
	case codes.Canceled:
		return ClassCanceled
	}
	return 0
}

// wantHTTPClass is the documented class of an HTTP status and its
// message, or 0 when the code is not an HTTP status (< 100) and the error
// is not recognised.
func wantHTTPClass(code int, msg string) Class {
	switch {
	case code < 100:
		return 0
	case code == 402, (code == 429 || code == 403 || code == 400 || code == 409 && !aborted(msg)) && isQuota(msg):
		// 400 and 409 are INVALID_ARGUMENT's and ALREADY_EXISTS's statuses
		// (grpc-gateway), under which a quota reads as over gRPC.
		return ClassQuotaExceeded
	case code == 413, code/100 == 4 && tooLargeText(msg): // a 429 too: split, not resent whole
		return ClassTooLarge
	case code == 429:
		return ClassRateLimited
	case code == 408, code == 504:
		return ClassTimeout
	case code == 401, code == 403, code == 404, code == 501:
		return ClassDenied
	case code == 499:
		return ClassCanceled
	case code >= 500, code == 409 && aborted(msg): // ABORTED's 409, as over gRPC
		return ClassServer
	case code >= 400:
		return ClassInvalid
	default: // 1xx-3xx reported as an error
		return ClassServer
	}
}

func FuzzClassify(f *testing.F) {
	// kind, gRPC code (taken mod 17), HTTP code, message, layers of
	// wrapping (mod 5), how to wrap.
	f.Add(uint8(fuzzErrGRPC), uint8(codes.ResourceExhausted), 0, "rate limit exceeded", uint8(0), uint8(0))
	f.Add(uint8(fuzzErrGRPC), uint8(codes.ResourceExhausted), 0, "grpc: received message larger than max (4194305 vs. 4194304)", uint8(1), uint8(0))
	f.Add(uint8(fuzzErrGRPC), uint8(codes.ResourceExhausted), 0, "trying to send message larger than max", uint8(3), uint8(0b111001))
	f.Add(uint8(fuzzErrGRPC), uint8(codes.Unavailable), 0, "larger than max", uint8(2), uint8(0b1110))
	f.Add(uint8(fuzzErrGRPC), uint8(codes.DeadlineExceeded), 0, "context deadline exceeded", uint8(1), uint8(3))
	f.Add(uint8(fuzzErrGRPC), uint8(codes.OK), 0, "", uint8(0), uint8(0))
	f.Add(uint8(fuzzErrGRPC), uint8(codes.Canceled), 0, "canceled", uint8(4), uint8(0xe4))
	f.Add(uint8(fuzzErrPinecone), uint8(0), 429, "Too Many Requests", uint8(0), uint8(0))
	f.Add(uint8(fuzzErrPinecone), uint8(0), 503, "Service Unavailable", uint8(1), uint8(2))
	f.Add(uint8(fuzzErrPinecone), uint8(0), 413, "Payload Too Large", uint8(0), uint8(0))
	f.Add(uint8(fuzzErrPinecone), uint8(0), 429, "Your request is larger than the maximum supported size - 2MB.", uint8(0), uint8(0))
	f.Add(uint8(fuzzErrGRPC), uint8(codes.ResourceExhausted), 0, "request exceeds the maximum supported size", uint8(0), uint8(0))
	f.Add(uint8(fuzzErrPinecone), uint8(0), 404, "not found", uint8(2), uint8(5))
	f.Add(uint8(fuzzErrPinecone), uint8(0), 99, "not an HTTP status", uint8(0), uint8(0))
	f.Add(uint8(fuzzErrPinecone), uint8(0), -1, "", uint8(0), uint8(0))
	f.Add(uint8(fuzzErrPlain), uint8(0), 0, "connection reset by peer", uint8(1), uint8(0))
	f.Add(uint8(fuzzErrPinecone), uint8(0), 402, "0", uint8(0), uint8(5)) // a quota, found by the fuzzer
	f.Add(uint8(fuzzErrPinecone), uint8(0), 429, "reached your write unit limit for the current month", uint8(0), uint8(0))
	f.Add(uint8(fuzzErrGRPC), uint8(codes.PermissionDenied), 0, "QUOTA_EXCEEDED", uint8(0), uint8(0))
	f.Add(uint8(fuzzErrPinecone), uint8(0), 400, `{"code":3,"message":"reached your write unit limit for the current month"}`, uint8(0), uint8(0))
	f.Add(uint8(fuzzErrPinecone), uint8(0), 409, `{"code":6,"message":"QUOTA_EXCEEDED"}`, uint8(0), uint8(0))
	f.Add(uint8(fuzzErrPinecone), uint8(0), 409, `{"code":10,"message":"QUOTA_EXCEEDED"}`, uint8(0), uint8(0))
	f.Fuzz(func(t *testing.T, kind, grpcCode uint8, httpCode int, msg string, layers, how uint8) {
		var base error
		var want Class
		switch kind % numFuzzErrKinds {
		case fuzzErrGRPC:
			c := codes.Code(grpcCode % 17)
			base = status.Error(c, msg)
			if c == codes.OK {
				if base != nil {
					t.Fatalf("status.Error(OK) = %v, want nil", base)
				}
				if got := Classify(nil); got != 0 {
					t.Fatalf("Classify(nil) = %v, want 0", got)
				}
				return
			}
			want = wantGRPCClass(c, msg)
		case fuzzErrPinecone:
			base = &pinecone.PineconeError{Code: httpCode, Msg: errors.New(msg)}
			want = wantHTTPClass(httpCode, msg)
			if want == 0 {
				want = ClassServer // not recognised
			}
		case fuzzErrPlain:
			base = errors.New(msg)
			want = ClassServer
		}

		got := Classify(base)
		if !got.valid() {
			t.Fatalf("Classify(%#v) = %v, not a class", base, got)
		}
		if got != want {
			t.Fatalf("Classify(%v) = %v, want %v", base, got, want)
		}

		wrapped := wrapFuzz(base, int(layers%5), how)
		if gotW := Classify(wrapped); gotW != got {
			t.Fatalf("wrapping changed the class: Classify(%v) = %v, unwrapped %v", wrapped, gotW, got)
		}

		// describe makes the *Error the pipeline reports: same class,
		// matching its sentinel, with the code the error carried.
		e := describe(wrapped, Classify)
		if e.Class != got {
			t.Fatalf("describe(%v).Class = %v, Classify says %v", wrapped, e.Class, got)
		}
		if !errors.Is(e, got.Err()) {
			t.Fatalf("describe(%v) does not match %v", wrapped, got.Err())
		}
		if Classify(e) != got || Classify(fmt.Errorf("again: %w", e)) != got {
			t.Fatalf("the described error %v classifies differently from %v", e, got)
		}
		switch kind % numFuzzErrKinds {
		case fuzzErrGRPC:
			if c := codes.Code(grpcCode % 17); e.GRPCCode != c || e.Code() != c.String() {
				t.Fatalf("describe(%v): gRPC code %v, Code() %q; want %v", wrapped, e.GRPCCode, e.Code(), c)
			}
		case fuzzErrPinecone:
			if httpCode >= 100 && (e.StatusCode != httpCode || e.Code() != fmt.Sprint(httpCode)) {
				t.Fatalf("describe(%v): status %d, Code() %q; want %d", wrapped, e.StatusCode, e.Code(), httpCode)
			}
		}
	})
}

// ---- FuzzValidate ----

// float32s reads little-endian float32s from b (a trailing partial value is
// dropped).
func float32s(b []byte) []float32 {
	out := make([]float32, len(b)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return out
}

// uint32s reads little-endian uint32s from b.
func uint32s(b []byte) []uint32 {
	out := make([]uint32, len(b)/4)
	for i := range out {
		out[i] = binary.LittleEndian.Uint32(b[4*i:])
	}
	return out
}

func allFinite(vs []float32) bool {
	for _, v := range vs {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			return false
		}
	}
	return true
}

// metadataProblem returns why md breaks Pinecone's metadata rules, or "".
// The size is that of compact JSON, as encoding/json writes it.
func metadataProblem(md *structpb.Struct) string {
	for k, v := range md.GetFields() {
		if strings.HasPrefix(k, "$") {
			return fmt.Sprintf("key %q starts with $", k)
		}
		switch x := v.GetKind().(type) {
		case *structpb.Value_StringValue, *structpb.Value_BoolValue:
		case *structpb.Value_NumberValue:
			if math.IsNaN(x.NumberValue) || math.IsInf(x.NumberValue, 0) {
				return fmt.Sprintf("field %q is not finite", k)
			}
		case *structpb.Value_ListValue:
			for _, e := range x.ListValue.GetValues() {
				if _, ok := e.GetKind().(*structpb.Value_StringValue); !ok {
					return fmt.Sprintf("field %q is a list of other than strings", k)
				}
			}
		default:
			return fmt.Sprintf("field %q is a %T", k, x)
		}
	}
	if _, err := proto.Marshal(md); err != nil {
		return fmt.Sprintf("cannot be encoded: %v", err) // a string that is not UTF-8
	}
	var js bytes.Buffer
	enc := json.NewEncoder(&js)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(md.AsMap()); err != nil {
		return fmt.Sprintf("cannot be encoded: %v", err)
	}
	if n := js.Len() - 1; n > MaxMetadataBytes { // less the newline Encode adds
		return fmt.Sprintf("is %d bytes as compact JSON, more than %d", n, MaxMetadataBytes)
	}
	return ""
}

// recordProblem returns why v breaks one of Pinecone's per-record rules,
// or "": the validator's specification, written out independently.
func recordProblem(v *pinecone.Vector) string {
	id := v.Id
	if len(id) < 1 || len(id) > MaxIDBytes {
		return fmt.Sprintf("id of %d bytes", len(id))
	}
	for i := 0; i < len(id); i++ {
		if id[i] == 0 || id[i] >= 0x80 {
			return fmt.Sprintf("id byte %d is %#x", i, id[i])
		}
	}
	var dense []float32
	if v.Values != nil {
		dense = *v.Values
	}
	s := v.SparseValues
	hasSparse := s != nil && (len(s.Indices) > 0 || len(s.Values) > 0)
	if len(dense) == 0 && !hasSparse {
		return "no values"
	}
	if len(dense) > MaxDimension {
		return "dense dimension too large"
	}
	if !allFinite(dense) {
		return "dense value not finite"
	}
	if len(dense) > 0 && !slices.ContainsFunc(dense, func(f float32) bool { return f != 0 }) {
		return "dense values all zero"
	}
	if hasSparse {
		if len(s.Indices) != len(s.Values) {
			return "sparse lengths differ"
		}
		if len(s.Indices) > MaxSparseNonZeros {
			return "too many sparse values"
		}
		if !allFinite(s.Values) {
			return "sparse value not finite"
		}
		seen := make(map[uint32]bool, len(s.Indices))
		for _, i := range s.Indices {
			if seen[i] {
				return fmt.Sprintf("sparse index %d repeated", i)
			}
			seen[i] = true
		}
	}
	if v.Metadata != nil {
		if p := metadataProblem(v.Metadata); p != "" {
			return "metadata " + p
		}
	}
	return ""
}

// Bits of FuzzValidate's flags.
const (
	fuzzValuesPointer = 1 << iota // Values points to a slice, even an empty one
	fuzzSparse                    // SparseValues is set, even empty
	fuzzMetadata                  // Metadata is set: metaJSON, plus the padding
)

// maxFuzzPad bounds the padding string of FuzzValidate, enough to cross
// MaxMetadataBytes several times over.
const maxFuzzPad = 1 << 18

func FuzzValidate(f *testing.F) {
	le := func(vs ...float32) []byte {
		b := make([]byte, 0, 4*len(vs))
		for _, v := range vs {
			b = binary.LittleEndian.AppendUint32(b, math.Float32bits(v))
		}
		return b
	}
	idx := func(is ...uint32) []byte {
		b := make([]byte, 0, 4*len(is))
		for _, i := range is {
			b = binary.LittleEndian.AppendUint32(b, i)
		}
		return b
	}
	// id, dense values, sparse indices, sparse values, metadata JSON,
	// padding string, its repeat count (a "pad" metadata field), flags.
	f.Add([]byte("doc-1#chunk-7"), le(0.1, -2, 3e30), []byte(nil), []byte(nil), []byte(nil), "", uint16(0), uint8(fuzzValuesPointer))
	f.Add([]byte("a"), []byte(nil), idx(1, 300, 70_000, 4_000_000_000), le(1, 2, 3, 4), []byte(nil), "", uint16(0), uint8(fuzzSparse))
	f.Add([]byte("hybrid"), le(1, 2), idx(5, 5), le(1, 2), []byte(nil), "", uint16(0), uint8(fuzzValuesPointer|fuzzSparse))
	f.Add([]byte("unsorted"), []byte(nil), idx(9, 3, 9), le(1, 2, 3), []byte(nil), "", uint16(0), uint8(fuzzSparse))
	f.Add([]byte("m"), le(1), []byte(nil), []byte(nil), []byte(`{"title":"Go","year":2026,"draft":false,"tags":["a","b"]}`), "", uint16(0), uint8(fuzzValuesPointer|fuzzMetadata))
	f.Add([]byte("bad-md"), le(1), []byte(nil), []byte(nil), []byte(`{"n":null,"o":{"x":1},"l":[1,"a"]}`), "", uint16(0), uint8(fuzzValuesPointer|fuzzMetadata))
	f.Add([]byte("dollar"), le(1), []byte(nil), []byte(nil), []byte(`{"$in":"x"}`), "", uint16(0), uint8(fuzzValuesPointer|fuzzMetadata))
	f.Add([]byte("big-md"), le(1), []byte(nil), []byte(nil), []byte(`{}`), "z", uint16(41_000), uint8(fuzzValuesPointer|fuzzMetadata))
	f.Add([]byte("nan"), le(float32(math.NaN())), []byte(nil), []byte(nil), []byte(nil), "", uint16(0), uint8(fuzzValuesPointer))
	f.Add([]byte("empty"), []byte(nil), []byte(nil), []byte(nil), []byte(nil), "", uint16(0), uint8(fuzzValuesPointer|fuzzSparse))
	f.Add([]byte("nul\x00id"), le(1), []byte(nil), []byte(nil), []byte(nil), "", uint16(0), uint8(fuzzValuesPointer))
	f.Add([]byte("caf\xc3\xa9"), le(1), []byte(nil), []byte(nil), []byte(nil), "", uint16(0), uint8(fuzzValuesPointer))
	f.Add([]byte(strings.Repeat("i", 513)), le(1), []byte(nil), []byte(nil), []byte(nil), "", uint16(0), uint8(fuzzValuesPointer))
	f.Fuzz(func(t *testing.T, id, dense, sparseIdx, sparseVals, metaJSON []byte, pad string, padRepeat uint16, flags uint8) {
		v := &pinecone.Vector{Id: string(id)}
		if vals := float32s(dense); len(vals) > 0 || flags&fuzzValuesPointer != 0 {
			v.Values = &vals
		}
		if flags&fuzzSparse != 0 {
			v.SparseValues = &pinecone.SparseValues{Indices: uint32s(sparseIdx), Values: float32s(sparseVals)}
		}
		if flags&fuzzMetadata != 0 {
			fields := map[string]any{}
			if len(metaJSON) > 0 {
				if err := json.Unmarshal(metaJSON, &fields); err != nil || fields == nil {
					t.Skip("not a JSON object")
				}
			}
			if padRepeat > 0 && pad != "" {
				fields["pad"] = strings.Repeat(pad, min(int(padRepeat), maxFuzzPad/len(pad)))
			}
			md, err := structpb.NewStruct(fields)
			if err != nil {
				t.Skip("not a Struct")
			}
			v.Metadata = md
		}

		val := &validator{}
		size, err := val.check(v)
		problem := recordProblem(v)
		if err != nil {
			if problem == "" && wireSize(v, -1) <= MaxRequestBytes {
				t.Fatalf("check rejected a valid record: %v", err)
			}
			return
		}
		if problem != "" {
			t.Fatalf("check accepted a record that breaks a rule (%s), size %d", problem, size)
		}

		// Each rule, spelled out for the accepted record.
		if len(v.Id) < 1 || len(v.Id) > MaxIDBytes || strings.ContainsFunc(v.Id, func(r rune) bool { return r == 0 || r >= 0x80 }) {
			t.Fatalf("accepted id %q", v.Id)
		}
		if v.Values != nil && !allFinite(*v.Values) {
			t.Fatal("accepted a dense value that is not finite")
		}
		if s := v.SparseValues; s != nil && (len(s.Indices) > 0 || len(s.Values) > 0) {
			if len(s.Indices) != len(s.Values) || !allFinite(s.Values) {
				t.Fatalf("accepted sparse values of %d indices and %d values", len(s.Indices), len(s.Values))
			}
		}

		// The size is the exact encoding, as the SDK's message encodes it.
		if want := wireSize(v, -1); size != want {
			t.Fatalf("check returned size %d, wireSize says %d", size, want)
		}
		for _, ns := range []string{"", "ns"} {
			if want := encodedRequestSize(t, []*pinecone.Vector{v}, ns) - requestOverhead(ns); size != want {
				t.Fatalf("check returned size %d, the SDK's UpsertRequest in namespace %q encodes the record in %d", size, ns, want)
			}
		}

		// The same record passes again with the same size.
		if again, err := val.check(v); err != nil || again != size {
			t.Fatalf("checking the record again: size %d, %v; first %d", again, err, size)
		}
	})
}

// ---- FuzzBatcher ----

func FuzzBatcher(f *testing.F) {
	sizes := func(ss ...uint16) []byte {
		b := make([]byte, 0, 2*len(ss))
		for _, s := range ss {
			b = binary.LittleEndian.AppendUint16(b, s)
		}
		return b
	}
	// Item sizes (uint16 each, plus one), batch size (mod 1000, plus one),
	// byte limit (plus one), and the changes of the batch size from one
	// batch to the next (empty: fixed).
	f.Add(sizes(0, 0, 0, 0, 0), uint16(1), uint16(999), []byte(nil))
	f.Add(sizes(3, 3, 3, 8, 0), uint16(99), uint16(9), []byte(nil))
	f.Add(sizes(2, 9, 2), uint16(99), uint16(9), []byte(nil))
	f.Add(sizes(4, 4, 4), uint16(0), uint16(99), []byte(nil))
	f.Add(sizes(100, 200, 300, 65535, 1, 1, 1), uint16(2), uint16(500), []byte{0, 5, 1})
	f.Add(sizes(10, 10, 10, 10, 10, 10, 10, 10), uint16(3), uint16(40), []byte{0x80, 7, 0xff})
	f.Fuzz(func(t *testing.T, rawSizes []byte, batchSize, maxBytes uint16, changes []byte) {
		items := make([]item, len(rawSizes)/2)
		for i := range items {
			items[i] = item{seq: i, size: 1 + int(binary.LittleEndian.Uint16(rawSizes[2*i:]))}
		}
		limit := 1 + int(maxBytes)
		base := 1 + int(batchSize)%MaxBatchSize

		// next hands out the batch size of each batch: base, then base
		// moved by each change in turn (a batch size is 1 to MaxBatchSize),
		// with the top bit of a change marking a trial batch.
		type target struct {
			size  int
			trial uint64
		}
		var targets []target
		next := func() (int, uint64) {
			tg := target{size: base}
			if len(changes) > 0 {
				ch := changes[len(targets)%len(changes)]
				tg = target{
					size:  1 + (base-1+len(targets)*int(ch&0x7f))%MaxBatchSize,
					trial: uint64(ch >> 7),
				}
			}
			targets = append(targets, tg)
			return tg.size, tg.trial
		}

		b := batcher{maxBytes: limit, next: next}
		var batches []batch
		for _, it := range items {
			if full, ok := b.add(it); ok {
				if len(full.items) == 0 {
					t.Fatalf("add of item %d returned an empty batch", it.seq)
				}
				batches = append(batches, full)
			}
		}
		if last := b.take(); len(last.items) > 0 {
			batches = append(batches, last)
		}
		if again := b.take(); len(again.items) != 0 {
			t.Fatalf("a second take returned %d items", len(again.items))
		}

		if len(batches) != len(targets) {
			t.Fatalf("%d batches for %d calls of next", len(batches), len(targets))
		}
		seq := 0
		for i, bt := range batches {
			bytes := 0
			for _, it := range bt.items {
				if it.seq != seq {
					t.Fatalf("batch %d holds item %d where item %d was due", i, it.seq, seq)
				}
				seq++
				bytes += it.size
			}
			tg := targets[i]
			if bt.trial != tg.trial {
				t.Fatalf("batch %d: trial %v, next said %v", i, bt.trial, tg.trial)
			}
			n := len(bt.items)
			if n > 1 && n > tg.size {
				t.Fatalf("batch %d holds %d items, its batch size is %d (sizes %v, byte limit %d)", i, n, tg.size, itemSizes(bt.items), limit)
			}
			if n > 1 && bytes > limit {
				t.Fatalf("batch %d holds %d items of %d bytes, over the limit of %d", i, n, bytes, limit)
			}
			// A batch closes only when full, when the next item would not
			// fit, or at the end: no batch is smaller than it need be.
			if i+1 < len(batches) && n < tg.size && bytes+batches[i+1].items[0].size <= limit {
				t.Fatalf("batch %d closed at %d items of %d bytes, below its size %d, though item %d (%d bytes) fitted the limit of %d",
					i, n, bytes, tg.size, batches[i+1].items[0].seq, batches[i+1].items[0].size, limit)
			}
		}
		if seq != len(items) {
			t.Fatalf("%d items came out of %d", seq, len(items))
		}
	})
}

func itemSizes(its []item) []int {
	out := make([]int, len(its))
	for i, it := range its {
		out[i] = it.size
	}
	return out
}

// ---- FuzzAllDuplicates ----

// FuzzAllDuplicates checks All's rule for repeated ids against a reference:
// of each id, only the last valid occurrence is sent, exactly once; the
// other valid ones are duplicates; invalid and nil records fail alone.
func FuzzAllDuplicates(f *testing.F) {
	// One record per byte: 0xff is nil; otherwise the low three bits pick
	// one of eight ids (so that ids repeat) and bit 3 makes it invalid.
	f.Add([]byte{0, 1, 0})
	f.Add([]byte{0, 8, 0x08})
	f.Add([]byte{0x08, 0xff, 0x08, 2})
	f.Add([]byte{3, 3, 0x0b, 3, 0xff, 0x0b})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 4000 {
			data = data[:4000]
		}
		records := make([]*pinecone.Vector, len(data))
		last := map[string]int{} // id -> position of its last valid occurrence
		valid := map[string]int{}
		var invalid []int
		for i, b := range data {
			if b == 0xff {
				invalid = append(invalid, i)
				continue
			}
			id := fmt.Sprintf("id-%d", b&7)
			v := float32(i)
			if b&8 != 0 {
				v = float32(math.NaN())
				invalid = append(invalid, i)
			} else {
				last[id] = i
				valid[id]++
			}
			records[i] = &pinecone.Vector{Id: id, Values: &[]float32{v, 1}}
		}
		fi := newFakeIndex(nil)
		res, _ := All(context.Background(), records, testOpts(fi)...)

		stored := fi.Stored()
		require.Len(t, stored, len(last))
		for id, i := range last {
			require.Equal(t, float32(i), (*stored[id].Values)[0], "id %s: the last valid occurrence wins", id)
		}
		sent := map[string]int{}
		for _, c := range fi.Calls() {
			for _, id := range c {
				sent[id]++
			}
		}
		for id, n := range sent {
			require.Equal(t, 1, n, "id %s is sent once", id)
		}
		dups := 0
		for _, n := range valid {
			dups += n - 1
		}
		require.Equal(t, dups, res.Duplicates)
		require.Equal(t, len(last), res.Upserted)
		var failed []int
		for _, fl := range res.Failed {
			require.Equal(t, ClassInvalid, fl.Class)
			failed = append(failed, fl.Index)
		}
		require.ElementsMatch(t, invalid, failed)
	})
}
