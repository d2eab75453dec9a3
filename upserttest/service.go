package upserttest

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/pinecone-io/go-pinecone/v5/pinecone"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/known/structpb"
)

// The Pinecone SDK's generated gRPC code is internal to the SDK, so the
// service is built here by hand from the message descriptors that the SDK
// registers in protobuf's global registry when its package is initialized
// (it is imported above for pinecone.Vector, which also guarantees that).
// Messages are read and written through protoreflect; the concrete message
// types are the SDK's own, so the wire format is exactly the SDK's.

const (
	serviceName   = "VectorService"
	upsertMethod  = "/VectorService/Upsert"
	fetchMethod   = "/VectorService/Fetch"
	statsMethod   = "/VectorService/DescribeIndexStats"
	protoFileName = "db_data_2025-10.proto" // informational, as in generated code
)

// desc holds the message types and fields the service uses.
var desc = loadDescriptors()

type descriptors struct {
	upsertReq, upsertResp, fetchReq, fetchResp, statsReq, statsResp protoreflect.MessageType
	vector                                                          protoreflect.MessageType

	upsertVectors, upsertNamespace, upsertedCount protoreflect.FieldDescriptor

	vecID, vecValues, vecSparse, vecMetadata protoreflect.FieldDescriptor
	sparseIndices, sparseValues              protoreflect.FieldDescriptor

	fetchIDs, fetchNamespace        protoreflect.FieldDescriptor
	fetchRespVectors, fetchRespNS   protoreflect.FieldDescriptor
	statsNamespaces, statsDimension protoreflect.FieldDescriptor
	statsTotal, summaryVectorCount  protoreflect.FieldDescriptor
	statsVectorType, statsFilter    protoreflect.FieldDescriptor
}

func loadDescriptors() *descriptors {
	msg := func(name string) protoreflect.MessageType {
		mt, err := protoregistry.GlobalTypes.FindMessageByName(protoreflect.FullName(name))
		if err != nil {
			panic(fmt.Sprintf("upserttest: message %s is not registered by the Pinecone SDK: %v", name, err))
		}
		return mt
	}
	field := func(md protoreflect.MessageDescriptor, name string) protoreflect.FieldDescriptor {
		fd := md.Fields().ByName(protoreflect.Name(name))
		if fd == nil {
			panic(fmt.Sprintf("upserttest: message %s has no field %s in this Pinecone SDK", md.FullName(), name))
		}
		return fd
	}
	d := &descriptors{
		upsertReq:  msg("UpsertRequest"),
		upsertResp: msg("UpsertResponse"),
		fetchReq:   msg("FetchRequest"),
		fetchResp:  msg("FetchResponse"),
		statsReq:   msg("DescribeIndexStatsRequest"),
		statsResp:  msg("DescribeIndexStatsResponse"),
	}
	d.vector = msg("Vector")
	vector := d.vector.Descriptor()
	sparse := msg("SparseValues").Descriptor()
	summary := msg("NamespaceSummary").Descriptor()

	d.upsertVectors = field(d.upsertReq.Descriptor(), "vectors")
	d.upsertNamespace = field(d.upsertReq.Descriptor(), "namespace")
	d.upsertedCount = field(d.upsertResp.Descriptor(), "upserted_count")
	d.vecID = field(vector, "id")
	d.vecValues = field(vector, "values")
	d.vecSparse = field(vector, "sparse_values")
	d.vecMetadata = field(vector, "metadata")
	d.sparseIndices = field(sparse, "indices")
	d.sparseValues = field(sparse, "values")
	d.fetchIDs = field(d.fetchReq.Descriptor(), "ids")
	d.fetchNamespace = field(d.fetchReq.Descriptor(), "namespace")
	d.fetchRespVectors = field(d.fetchResp.Descriptor(), "vectors")
	d.fetchRespNS = field(d.fetchResp.Descriptor(), "namespace")
	d.statsNamespaces = field(d.statsResp.Descriptor(), "namespaces")
	d.statsDimension = field(d.statsResp.Descriptor(), "dimension")
	d.statsTotal = field(d.statsResp.Descriptor(), "total_vector_count")
	d.statsVectorType = field(d.statsResp.Descriptor(), "vector_type")
	d.statsFilter = field(d.statsReq.Descriptor(), "filter")
	d.summaryVectorCount = field(summary, "vector_count")
	return d
}

// serviceDesc is the hand-written equivalent of the generated
// VectorService_ServiceDesc, limited to the methods the server implements;
// gRPC answers the others codes.Unimplemented. The registered service value
// is the *generation serving the call.
var serviceDesc = grpc.ServiceDesc{
	ServiceName: serviceName,
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{
		{MethodName: "Upsert", Handler: unaryHandler(upsertMethod, desc.upsertReq, (*generation).upsert)},
		{MethodName: "Fetch", Handler: unaryHandler(fetchMethod, desc.fetchReq, (*generation).fetch)},
		{MethodName: "DescribeIndexStats", Handler: unaryHandler(statsMethod, desc.statsReq, (*generation).describeIndexStats)},
	},
	Streams:  []grpc.StreamDesc{},
	Metadata: protoFileName,
}

type methodFunc func(g *generation, ctx context.Context, req proto.Message) (proto.Message, error)

func unaryHandler(fullMethod string, in protoreflect.MessageType, call methodFunc) func(any, context.Context, func(any) error, grpc.UnaryServerInterceptor) (any, error) {
	return func(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
		g := srv.(*generation)
		if t, ok := ctx.Value(rpcTagKey{}).(*rpcTag); ok {
			t.reached.Store(true) // the handler accounts for this request
		}
		req := in.New().Interface()
		if err := dec(req); err != nil {
			if fullMethod == upsertMethod {
				g.s.countUnprocessed(status.Code(err), noHTTPStatus)
			}
			return nil, err
		}
		run := func(ctx context.Context, req any) (any, error) {
			if !g.enter() {
				if fullMethod == upsertMethod {
					g.s.countUnprocessed(codes.Unavailable, noHTTPStatus)
				}
				return nil, errStopped
			}
			defer g.leave()
			resp, err := call(g, ctx, req.(proto.Message))
			if err != nil {
				return nil, err
			}
			return resp, nil
		}
		if interceptor == nil {
			return run(ctx, req)
		}
		return interceptor(ctx, req, &grpc.UnaryServerInfo{Server: srv, FullMethod: fullMethod}, run)
	}
}

// statsHandler accounts for Upsert requests that gRPC answers without
// calling the handler, such as those over the maximum message size.
type statsHandler struct{ s *Server }

type rpcTagKey struct{}

type rpcTag struct{ reached atomic.Bool }

func (h statsHandler) TagRPC(ctx context.Context, info *stats.RPCTagInfo) context.Context {
	if info.FullMethodName == upsertMethod {
		return context.WithValue(ctx, rpcTagKey{}, &rpcTag{})
	}
	return ctx
}

func (h statsHandler) HandleRPC(ctx context.Context, st stats.RPCStats) {
	end, ok := st.(*stats.End)
	if !ok {
		return
	}
	if t, ok := ctx.Value(rpcTagKey{}).(*rpcTag); ok && !t.reached.Load() {
		h.s.countUnprocessed(status.Code(end.Error), noHTTPStatus)
	}
}

func (statsHandler) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }

func (statsHandler) HandleConn(context.Context, stats.ConnStats) {}

// decodeUpsert reads an UpsertRequest into the SDK's types. The vectors are
// fresh copies that the caller owns.
func decodeUpsert(m protoreflect.Message) (namespace string, vectors []*pinecone.Vector) {
	namespace = m.Get(desc.upsertNamespace).String()
	list := m.Get(desc.upsertVectors).List()
	vectors = make([]*pinecone.Vector, list.Len())
	for i := range vectors {
		vectors[i] = decodeVector(list.Get(i).Message())
	}
	return namespace, vectors
}

func decodeVector(m protoreflect.Message) *pinecone.Vector {
	v := &pinecone.Vector{Id: m.Get(desc.vecID).String()}
	if l := m.Get(desc.vecValues).List(); l.Len() > 0 {
		vals := make([]float32, l.Len())
		for i := range vals {
			vals[i] = float32(l.Get(i).Float())
		}
		v.Values = &vals
	}
	if m.Has(desc.vecSparse) {
		sm := m.Get(desc.vecSparse).Message()
		il, vl := sm.Get(desc.sparseIndices).List(), sm.Get(desc.sparseValues).List()
		if il.Len() > 0 || vl.Len() > 0 {
			sv := &pinecone.SparseValues{}
			if il.Len() > 0 {
				sv.Indices = make([]uint32, il.Len())
				for i := range sv.Indices {
					sv.Indices[i] = uint32(il.Get(i).Uint())
				}
			}
			if vl.Len() > 0 {
				sv.Values = make([]float32, vl.Len())
				for i := range sv.Values {
					sv.Values[i] = float32(vl.Get(i).Float())
				}
			}
			v.SparseValues = sv
		}
	}
	if m.Has(desc.vecMetadata) {
		md := &structpb.Struct{}
		proto.Merge(md, m.Get(desc.vecMetadata).Message().Interface())
		v.Metadata = md
	}
	return v
}

// encodeVector writes v into the empty Vector message m.
func encodeVector(m protoreflect.Message, v *pinecone.Vector) {
	m.Set(desc.vecID, protoreflect.ValueOfString(v.Id))
	if v.Values != nil {
		l := m.Mutable(desc.vecValues).List()
		for _, x := range *v.Values {
			l.Append(protoreflect.ValueOfFloat32(x))
		}
	}
	if sv := v.SparseValues; sv != nil {
		sm := m.Mutable(desc.vecSparse).Message()
		il := sm.Mutable(desc.sparseIndices).List()
		for _, x := range sv.Indices {
			il.Append(protoreflect.ValueOfUint32(x))
		}
		vl := sm.Mutable(desc.sparseValues).List()
		for _, x := range sv.Values {
			vl.Append(protoreflect.ValueOfFloat32(x))
		}
	}
	if v.Metadata != nil {
		proto.Merge(m.Mutable(desc.vecMetadata).Message().Interface(), v.Metadata)
	}
}

// vectorSize is the size of v as a Vector message, as an upsert request
// carries it.
func vectorSize(v *pinecone.Vector) int {
	m := desc.vector.New()
	encodeVector(m, v)
	return proto.Size(m.Interface())
}

func newUpsertResponse(n int) proto.Message {
	resp := desc.upsertResp.New()
	resp.Set(desc.upsertedCount, protoreflect.ValueOfUint32(uint32(n)))
	return resp.Interface()
}

// fetch answers the stored vectors among the requested ids; missing ids are
// absent from the answer.
func (g *generation) fetch(ctx context.Context, req proto.Message) (proto.Message, error) {
	s := g.s
	if err := s.authorizeGRPC(ctx); err != nil {
		return nil, err
	}
	m := req.ProtoReflect()
	ns := m.Get(desc.fetchNamespace).String()
	key := namespaceKey(ns)
	ids := m.Get(desc.fetchIDs).List()

	resp := desc.fetchResp.New()
	resp.Set(desc.fetchRespNS, protoreflect.ValueOfString(ns))
	out := resp.Mutable(desc.fetchRespVectors).Map()

	s.mu.Lock()
	defer s.mu.Unlock()
	stored := s.store[key]
	for i := 0; i < ids.Len(); i++ {
		id := ids.Get(i).String()
		v, ok := stored[id]
		if !ok {
			continue
		}
		val := out.NewValue()
		encodeVector(val.Message(), v)
		out.Set(protoreflect.ValueOfString(id).MapKey(), val)
	}
	return resp.Interface(), nil
}

// errStatsFilter refuses a DescribeIndexStats request with a filter.
// Pinecone's OpenAPI spec (2025-10, DescribeIndexStatsRequest.filter):
// "Serverless indexes do not support filtering `describe_index_stats` by
// metadata"; go-pinecone's DescribeIndexStatsFiltered: "only available on
// pods-based indexes". The server is a serverless index. The wording of
// Pinecone's answer is not published: this message is the server's.
var errStatsFilter = status.Error(codes.InvalidArgument,
	"Serverless indexes do not support filtering describe_index_stats by metadata")

// describeIndexStats answers the vector count of every non-empty namespace
// (WithStatsLag after the writes), their total, the dimension of the index
// if it is known, and its vector type if it is known: set by WithVectorType
// or WithDimension, or decided by the first vector written (see
// indexShape). A namespace
// counts its vectors and its records (REST records upserts), which an
// index with integrated embedding stores as vectors (see indexedLocked).
// The dimension is only ever fixed by vectors (or WithDimension): the
// server embeds no record, so it does not know the dimension of an
// embedding model, and an index holding only records answers none (0),
// where Pinecone would answer its model's (1024 for llama-text-embed-v2).
// A request with a filter is refused (errStatsFilter).
func (g *generation) describeIndexStats(ctx context.Context, req proto.Message) (proto.Message, error) {
	s := g.s
	if err := s.authorizeGRPC(ctx); err != nil {
		return nil, err
	}
	if req.ProtoReflect().Has(desc.statsFilter) {
		return nil, errStatsFilter
	}
	resp := desc.statsResp.New()
	out := resp.Mutable(desc.statsNamespaces).Map()

	s.mu.Lock()
	defer s.mu.Unlock()
	uncounted := s.uncounted()
	total := 0
	for ns := range s.namespacesLocked() {
		n := s.indexedLocked(ns) - uncounted[ns]
		if n <= 0 {
			continue
		}
		val := out.NewValue()
		val.Message().Set(desc.summaryVectorCount, protoreflect.ValueOfUint32(uint32(n)))
		out.Set(protoreflect.ValueOfString(ns).MapKey(), val)
		total += n
	}
	resp.Set(desc.statsTotal, protoreflect.ValueOfUint32(uint32(total)))
	if s.shape.dim > 0 {
		resp.Set(desc.statsDimension, protoreflect.ValueOfUint32(uint32(s.shape.dim)))
	}
	if t := s.shape.vectorType; t != "" {
		resp.Set(desc.statsVectorType, protoreflect.ValueOfString(t))
	}
	return resp.Interface(), nil
}
