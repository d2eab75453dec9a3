// Package upserttest provides a Pinecone-compatible gRPC data plane for
// tests, as net/http/httptest provides HTTP servers.
//
// [NewServer] starts a [Server] on a random loopback port that speaks the
// VectorService protocol of the Pinecone Go SDK, so that the real SDK can
// upsert into it:
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
// and the constants that follow it) and the dimension of the index
// ([WithDimension]), and answers invalid ones with codes.InvalidArgument,
// writing nothing of them.
//
// # Capacity
//
// Options model an index of limited capacity, per namespace as Pinecone's
// limits are: admission token buckets on vectors, bytes and requests per
// second ([WithRate], [WithByteRate], [WithRequestRate], or the [Serverless]
// preset) that answer codes.ResourceExhausted; a number of write slots with
// a FIFO queue ([WithSlots]); and a write latency ([WithLatency],
// [WithByteLatency], [WithSlowAbove]). A write that holds a slot is applied
// even if its client has timed out, as on a real service, so a client
// deadline shorter than the latency produces an ambiguous timeout: the
// client sees codes.DeadlineExceeded, and the vectors land anyway.
//
// # Faults
//
// A fault script ([FaultFunc], installed with [WithFaults] or
// [Server.SetFaults]) is consulted for every Upsert request and can answer
// any gRPC code, with an optional retry-after, after an optional delay,
// having written none, some or all of the vectors, or reset the connection
// instead of answering. Ready-made scripts cover rate-limit bursts
// ([RateLimitBurst]), random errors ([ErrorRate]), periodic outages
// ([Outage]), ambiguous timeouts ([AmbiguousTimeouts]), partial writes
// ([PartialWrites]), connection resets ([ConnectionResets]) and rejected
// records ([RejectIDs]); [Chain] combines them. Random scripts are
// deterministic given their seed.
//
// Faults are gRPC codes; the HTTP statuses of Pinecone's REST API
// correspond as follows: 429 is codes.ResourceExhausted, 500 is
// codes.Internal, 503 is codes.Unavailable and 504 is
// codes.DeadlineExceeded.
//
// # Inspection
//
// [Server.Vector], [Server.Vectors], [Server.Count] and
// [Server.Namespaces] read what was stored, as deep copies; [Server.Stats]
// counts requests, answers by code, vectors written, bytes received and
// the peak concurrency of writes; [Server.Reset] forgets both between the
// phases of a test. [Server.Restart] drops every connection and serves
// again on the same port, keeping the data.
package upserttest
