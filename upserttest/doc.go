// Package upserttest provides a Pinecone-compatible data plane for tests,
// as net/http/httptest provides HTTP servers.
//
// [NewServer] starts a [Server] on a random loopback port that speaks the
// VectorService gRPC protocol of the Pinecone Go SDK, and on the same port
// the REST records endpoint of indexes with integrated embedding (see
// below), so that the real SDK can upsert into it:
//
//	srv := upserttest.NewServer()
//	defer srv.Close()
//
//	pc, err := pinecone.NewClient(pinecone.NewClientParams{ApiKey: "test"})
//	if err != nil { ... }
//	idx, err := pc.Index(pinecone.NewIndexConnParams{Host: srv.Host(), Namespace: "docs"})
//	if err != nil { ... }
//	defer idx.Close()
//
//	_, err = idx.UpsertVectors(ctx, []*pinecone.Vector{{Id: "a", Values: &[]float32{1, 2}}})
//	v, ok := srv.Vector("docs", "a") // what the server stored
//
// The server implements Upsert, Fetch and DescribeIndexStats; the other
// VectorService methods answer codes.Unimplemented. It validates Upsert
// requests against Pinecone's per-request limits (see [MaxVectorsPerRequest]
// and the constants that follow it: ASCII ids without NUL, no all-zero dense
// values, metadata size and types), the dimension of the index
// ([WithDimension]) and its vector type ([WithVectorType]; by default the
// first write decides whether the index is dense or sparse, as Pinecone's
// index is one or the other), and answers invalid ones with
// codes.InvalidArgument and Pinecone's message, writing nothing of them.
//
// "" and "__default__" are one namespace, as on Pinecone since April 2025
// (go-pinecone v5 sends "__default__" for the default namespace, v6 ""):
// they share their stored vectors, records and limits, and the accessors
// take either name. [Request.Namespace] is the name as received.
//
// DescribeIndexStats counts vectors, and the records of REST records
// upserts, at once by default. Pinecone's counts lag behind writes:
// [WithStatsLag] makes the server's lag too, so that a test can check that
// the code under test does not assume instant counts. A DescribeIndexStats
// request with a filter is refused with codes.InvalidArgument, as a
// serverless index refuses it.
//
// # REST records (integrated embedding)
//
// Indexes with integrated embedding take text records through the SDK's
// IndexConnection.UpsertRecords, which calls the REST API over HTTPS:
//
//	POST /records/namespaces/{namespace}/upsert
//	Content-Type: application/x-ndjson
//	Api-Key: ...
//	X-Pinecone-Api-Version: 2025-10
//
//	{"_id":"rec1","chunk_text":"...","category":"..."}
//	{"_id":"rec2","chunk_text":"...","category":"..."}
//
// The SDK derives the REST address from the index host by replacing
// "http://" with "https://", so the server serves both on one port: it
// looks at the first byte of each connection, and serves TLS handshakes
// (0x16) with an HTTPS server and anything else with plaintext gRPC. The
// HTTPS server has a self-signed certificate made by NewServer
// ([Server.Certificate]); [Server.Client] returns an HTTP client that
// trusts it, to give the SDK:
//
//	pc, err := pinecone.NewClient(pinecone.NewClientParams{ApiKey: "test", RestClient: srv.Client()})
//	idx, err := pc.Index(pinecone.NewIndexConnParams{Host: srv.Host(), Namespace: "docs"})
//	err = idx.UpsertRecords(ctx, []*pinecone.IntegratedRecord{{"_id": "rec1", "chunk_text": "..."}})
//	fields, ok := srv.Record("docs", "rec1") // {"chunk_text": "..."}
//
// Each line of the body must be a JSON object with a string id in "_id" or
// "id" and the text to embed (the field of [WithFieldMap], or by default
// any string field); the request may hold at most [MaxRecordsPerRequest]
// (96) records, and ids have the limits of vector ids. Otherwise the whole
// request is answered 400, and nothing of it is written; so is a body over
// [WithMaxRequestBytes] (2,000,000 bytes by default), with Pinecone's "Your
// request is larger than the maximum supported size - 2MB. Please try to
// reduce your batch size.". The server embeds
// nothing: it stores each record's fields as they came, apart from the
// vectors ([Server.Record], [Server.Records], [Server.RecordCount]), and
// DescribeIndexStats counts them with the vectors. An id holds one record
// of the index, as on Pinecone: a record replaces the vector of its id, and
// a vector the record of its id. Success is answered 201
// Created with an empty body, as Pinecone does; errors with the JSON body
// of Pinecone's data plane, a google.rpc.Status with the numeric gRPC
// code (not the control plane's {"error":{...},"status":N}):
//
//	{"code":8,"message":"Request failed. You've reached ...","details":[]}
//
// Records upserts go through the same API key check (made before the body
// is read), fault script, admission buckets (a record counts as a vector,
// the body size as the request's bytes), write slots and latency as gRPC
// Upserts, sharing them by namespace; [Request.REST] tells a fault script
// which API a request came through. Any other path is answered 404, with
// the same error body.
//
// The SDK (since v5.4.1) returns a *pinecone.PineconeError whose Code is the
// HTTP status for any answer but 201; v5.2.0 returned nil, and lost the
// records silently.
//
// # Capacity, rate limits and quotas
//
// Options model an index of limited capacity, per namespace as Pinecone's
// limits are: admission token buckets on vectors, bytes and requests per
// second ([WithRate], [WithByteRate], [WithRequestRate], or the [Serverless]
// preset, which reads "MB" as 10^6 bytes) that answer
// codes.ResourceExhausted (HTTP 429) with Pinecone's message for the limit:
// the upsert size per second naming the index, the request rate naming the
// namespace and its rate. Index-wide limits are shared by all namespaces:
// write units per second ([WithWriteUnitRate]; 1 per KB of request, at
// least 5 per request, plus 1 per KB of the records an upsert overwrites,
// counted in [Stats.WriteUnits]) and, for integrated records, embedding
// tokens per minute ([WithEmbedTokensPerMinute]). Quotas answer what no
// retry can change: the monthly write units
// ([WithMonthlyWriteUnits], 429 "…write unit limit for the current
// month…") and the namespaces of an index ([WithMaxNamespaces], 403 "…max
// namespaces…"). [WithClock] runs these limits on a test's virtual time,
// so that a per-minute window passes in no time.
//
// Write slots with a FIFO queue ([WithSlots]) and a write latency
// ([WithLatency], [WithByteLatency], [WithSlowAbove], with a lognormal
// jitter of mean 1: [WithLatencyJitter]) model the time a write takes.
// [WithCapacityChange] makes the index's admission rates change during a
// run. A write that holds a slot is applied
// even if its client has timed out, as on a real service, so a client
// deadline shorter than the latency produces an ambiguous timeout: the
// client sees codes.DeadlineExceeded, and the vectors land anyway.
//
// # Faults
//
// A fault script ([FaultFunc], installed with [WithFaults] or
// [Server.SetFaults]) is consulted for every upsert request, of either API,
// and can answer any gRPC code, with an optional retry-after, after an
// optional delay, having written none, some or all of the vectors (or
// records), or reset the connection instead of answering. Ready-made scripts cover rate-limit bursts
// ([RateLimitBurst]), random errors ([ErrorRate]), periodic outages
// ([Outage]), ambiguous timeouts ([AmbiguousTimeouts]), partial writes
// ([PartialWrites]), connection resets ([ConnectionResets]) and rejected
// records ([RejectIDs]); [Chain] combines them. Random scripts are
// deterministic given their seed.
//
// Faults are gRPC codes; a REST request is answered the corresponding HTTP
// status of Pinecone's REST API (as grpc-gateway maps them): codes.OK is
// 201, codes.InvalidArgument 400, codes.Unauthenticated 401,
// codes.PermissionDenied 403, codes.ResourceExhausted 429, codes.Internal
// 500, codes.Unimplemented 501, codes.Unavailable 503,
// codes.DeadlineExceeded 504 and codes.Canceled 499. A fault's RetryAfter
// is sent as the Retry-After header.
//
// Where Pinecone publishes no message (the write units per second) or no
// figure, the server's is written in the manner of the others, and says
// so at its option.
//
// # A family of indexes
//
// [DrawIndex] draws, from a seed, an [Index]: a server's capacity model and
// faults from wide ranges (rates, latency and its tail, slots, slowdowns,
// capacity changes, outages, random 429s, dimensions, Pinecone's limits
// present, raised or absent) and a run of records, with the run's ideal
// time ([Index.IdealTime]), so that a client can be judged on indexes
// nobody tuned it for: efficiency, ideal ÷ actual time, means the same on
// every index.
//
// # Inspection
//
// [Server.Vector], [Server.Vectors], [Server.Count] and
// [Server.Namespaces] read what was stored, as deep copies, and
// [Server.Record], [Server.Records] and [Server.RecordCount] the records;
// [Server.Stats] counts requests of both APIs, answers by gRPC code (and
// REST answers by HTTP status), vectors and records written, bytes
// received, write units metered, requests refused by a rate limit or a
// quota, and the peak concurrency of writes; [Server.Reset] forgets both
// between the phases of a test. [Server.WaitIdle] waits until every
// request received has been answered, writes whose clients gave up
// included, before a test asserts on what landed. [Server.Restart] drops every connection,
// gRPC and HTTPS, and serves again on the same port, keeping the data.
package upserttest
