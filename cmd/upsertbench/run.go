package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"slices"
	"sync"
	"time"

	"github.com/pinecone-io/go-pinecone/v5/pinecone"
	"google.golang.org/grpc/codes"

	"github.com/upsertlib/upsert/upserttest"
)

// settleTimeout bounds the wait, after a run, for the server to answer the
// requests still in progress (writes whose client timed out or was stopped).
const settleTimeout = 10 * time.Second

// result is the outcome of one strategy on one profile.
type result struct {
	profile, strategy string
	// reports is the strategy's: whether it reports what it failed.
	reports bool
	// records is the number of records given, landed how many of them the
	// server stored (by the stop, for a stopped run), and reported how many
	// the strategy reported failed.
	records, landed, reported int
	// lost is the number of records neither stored nor reported failed,
	// once the server has answered every request.
	lost int
	// stopped is set when the run was stopped at the deadline.
	stopped bool
	// elapsed is the wall time from the start to the last record settled,
	// for the last client to finish; for a stopped run, to the stop (when
	// the last client returned).
	elapsed time.Duration
	// efficiency is the ideal time over the actual time (see efficiency).
	efficiency float64
	// requests and rateLimited count the upsert requests the server
	// received and those it answered codes.ResourceExhausted.
	requests, rateLimited int
	// calls are the client-side figures of every client together.
	calls callStats
	// clients holds one entry per client.
	clients []clientResult
}

// clientResult is the outcome of one client of a run.
type clientResult struct {
	records, landed, reported, lost int
	stopped                         bool
	elapsed                         time.Duration
	calls                           callStats
}

// throughput is the client's landed records per second.
func (c clientResult) throughput() float64 {
	if c.elapsed <= 0 {
		return 0
	}
	return float64(c.landed) / c.elapsed.Seconds()
}

// rateLimitedShare is the share of the server's answers that were 429s.
func (r result) rateLimitedShare() float64 {
	if r.requests == 0 {
		return 0
	}
	return float64(r.rateLimited) / float64(r.requests)
}

// client is one writer of a run: its records, its index connection and the
// recorder of its calls.
type client struct {
	records []*pinecone.Vector
	idx     *pinecone.IndexConnection
	calls   *calls

	reported []string
	err      error
	elapsed  time.Duration
	stopped  bool
}

// run writes the records of p at scale with s into a fresh server, each
// client of p with its own connection, and measures the outcome. A client
// still running after deadline is stopped. Progress goes to progress, if
// not nil.
func run(ctx context.Context, p profile, s strategy, scale float64, deadline time.Duration, progress io.Writer) (result, error) {
	perClient := p.recordsPerClient(scale)
	clients := make([]*client, p.clients)
	for i := range clients {
		clients[i] = &client{records: makeRecords(i*perClient, perClient, cmp.Or(p.dimension, dimension)), calls: new(calls)}
	}

	// The server is made last, since Outage counts from its start.
	srv := upserttest.NewServer(p.serverOptions()...)
	defer srv.Close()
	defer closeClients(clients)
	if err := dialClients(srv, clients); err != nil {
		return result{}, err
	}

	ctx, cancel := context.WithTimeout(ctx, deadline)
	defer cancel()
	stopProgress := reportProgress(progress, srv, p, s, perClient*p.clients)
	write := s.newRun()
	start := time.Now()
	var wg sync.WaitGroup
	for _, c := range clients {
		wg.Go(func() {
			c.reported, c.err = write(ctx, c.idx, c.records, p.timeout)
			c.elapsed = time.Since(start)
			c.stopped = ctx.Err() != nil
		})
	}
	wg.Wait()
	cancel()
	stopProgress()
	for _, c := range clients {
		if c.err != nil {
			return result{}, fmt.Errorf("%s/%s: %w", p.name, s.name, c.err)
		}
	}
	return measureReturned(srv, p, s, clients, start, progress), nil
}

// measureReturned measures a run whose clients, started at start, have
// returned.
func measureReturned(srv *upserttest.Server, p profile, s strategy, clients []*client, start time.Time, progress io.Writer) result {
	// What the server holds as the clients return, taken before it is
	// asked whether it answered everything, so that a write landing
	// between the two counts as late. A stopped run is measured at the
	// stop: over the time to it, writes still in progress land after it,
	// and count as neither landed nor lost. Otherwise, writes still in
	// progress count only if they land records that were missing then: a
	// straggling duplicate of a request the strategy split and resent adds
	// nothing, and the ideal frees a timed-out request at its timeout.
	atReturn := storedRecords(srv, clients)
	var atStop [][]bool
	if slices.ContainsFunc(clients, func(c *client) bool { return c.stopped }) {
		atStop = atReturn
	}
	late := !answeredAll(srv)
	if !settle(srv) && progress != nil {
		fmt.Fprintf(progress, "%s/%s: the server still had requests in progress after %v\n", p.name, s.name, settleTimeout)
	}
	settled := time.Since(start)
	r := measure(srv, p, s, clients, atStop)
	if late && !r.stopped && r.landed > countStored(atReturn) {
		// Writes the clients gave up on landed records after they
		// returned: the clock runs until the server has answered them.
		r.elapsed = max(r.elapsed, settled)
		r.efficiency = efficiency(p, r.landed, r.elapsed)
	}
	return r
}

// dialClients connects each client to srv.
func dialClients(srv *upserttest.Server, clients []*client) error {
	pc, err := pinecone.NewClient(pinecone.NewClientParams{ApiKey: "bench"})
	if err != nil {
		return err
	}
	for _, c := range clients {
		c.idx, err = pc.Index(pinecone.NewIndexConnParams{Host: srv.Host(), Namespace: namespace}, c.calls.dialOption())
		if err != nil {
			return err
		}
	}
	return nil
}

// closeClients closes the connections dialClients made.
func closeClients(clients []*client) {
	for _, c := range clients {
		if c.idx != nil {
			_ = c.idx.Close()
		}
	}
}

// storedRecords reports, for each record of each client, whether srv
// stores it.
func storedRecords(srv *upserttest.Server, clients []*client) [][]bool {
	out := make([][]bool, len(clients))
	for i, c := range clients {
		out[i] = make([]bool, len(c.records))
		for j, rec := range c.records {
			_, out[i][j] = srv.Vector(namespace, rec.Id)
		}
	}
	return out
}

// countStored counts the records stored reports as stored.
func countStored(stored [][]bool) int {
	n := 0
	for _, c := range stored {
		for _, ok := range c {
			if ok {
				n++
			}
		}
	}
	return n
}

// measure compares what the clients sent and reported with what srv
// stored. If atStop is not nil (a stopped run), the records landed are
// those it stored at the stop (see storedRecords); lost are always the
// records srv does not store now and the clients did not report.
func measure(srv *upserttest.Server, p profile, s strategy, clients []*client, atStop [][]bool) result {
	stats := srv.Stats()
	r := result{
		profile:     p.name,
		strategy:    s.name,
		reports:     s.reports,
		requests:    stats.Requests,
		rateLimited: stats.Codes[codes.ResourceExhausted],
	}
	all := make([]*calls, len(clients))
	for i, c := range clients {
		cr := clientResult{
			records:  len(c.records),
			reported: len(c.reported),
			stopped:  c.stopped,
			elapsed:  c.elapsed,
			calls:    summarize(c.calls),
		}
		reported := make(map[string]bool, len(c.reported))
		for _, id := range c.reported {
			reported[id] = true
		}
		for j, rec := range c.records {
			_, stored := srv.Vector(namespace, rec.Id)
			if atStop != nil && atStop[i][j] || atStop == nil && stored {
				cr.landed++
			}
			if !stored && !reported[rec.Id] {
				cr.lost++
			}
		}
		r.records += cr.records
		r.landed += cr.landed
		r.reported += cr.reported
		r.lost += cr.lost
		r.stopped = r.stopped || cr.stopped
		r.elapsed = max(r.elapsed, cr.elapsed)
		r.clients = append(r.clients, cr)
		all[i] = c.calls
	}
	r.calls = summarize(all...)
	r.efficiency = efficiency(p, r.landed, r.elapsed)
	return r
}

// settle waits until srv has answered every upsert request it received, so
// that writes still in progress when the clients returned are counted (as
// landed unless the run was stopped, and in any case not as lost); it
// reports false if that takes longer than settleTimeout.
func settle(srv *upserttest.Server) bool {
	deadline := time.Now().Add(settleTimeout)
	for {
		if answeredAll(srv) {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// reportProgress prints the records stored by srv to w every two seconds
// until the returned function is called. It does nothing if w is nil.
func reportProgress(w io.Writer, srv *upserttest.Server, p profile, s strategy, total int) (stop func()) {
	if w == nil {
		return func() {}
	}
	fmt.Fprintf(w, "%s/%s: %d records, %d client(s)\n", p.name, s.name, total, p.clients)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		start := time.Now()
		tick := time.NewTicker(2 * time.Second)
		defer tick.Stop()
		for {
			select {
			case <-tick.C:
				fmt.Fprintf(w, "%s/%s: %d/%d stored after %v\n", p.name, s.name, srv.Count(namespace), total, time.Since(start).Round(time.Second))
			case <-done:
				return
			}
		}
	})
	return func() {
		close(done)
		wg.Wait()
	}
}

// answeredAll reports whether srv has answered every upsert request it
// received.
func answeredAll(srv *upserttest.Server) bool {
	stats := srv.Stats()
	answered := 0
	for _, n := range stats.Codes {
		answered += n
	}
	return answered >= stats.Requests
}
