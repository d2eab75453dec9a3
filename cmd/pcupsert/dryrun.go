package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"sync"

	"github.com/pinecone-io/go-pinecone/v5/pinecone"

	"github.com/upsertlib/upsert"
)

// dryRunReport is what a dry run found, for the human and the JSON
// report.
type dryRunReport struct {
	DryRun bool   `json:"dry_run"`
	Input  string `json:"input"`
	Format string `json:"format"`
	// Checkpoint is --checkpoint, read and not written: the dry run
	// checks what a run resumed from it would, the input after the
	// Skipped records and SkippedBadLines bad lines it settled. "" (left
	// out) without --checkpoint.
	Checkpoint      string `json:"checkpoint,omitempty"`
	Skipped         int    `json:"skipped"`
	SkippedBadLines int    `json:"skipped_bad_lines"`
	// RecordsRead counts the Skipped records too, BadLines and what
	// follows only what comes after them.
	RecordsRead int `json:"records_read"`
	BadLines    int `json:"bad_lines"`
	Invalid     int `json:"invalid"`
	// Duplicates are the records that a later record of their id
	// replaces while both wait in one batch, when batched as the dry run
	// does, at BatchSize: a run whose batches fall otherwise (adaptive
	// ones start at 100; a slow input sends partial ones) replaces those
	// its own batches hold, fewer or, rarely, others.
	Duplicates int `json:"duplicates"`
	// Records are the most records a run would send, by namespace in
	// Namespaces: every valid one, the Duplicates included, which a run
	// whose batches hold them does not send. Batches are the fewest it
	// would send them in: batches of BatchSize records at most (and 2 MB).
	Records    int            `json:"records"`
	Batches    int            `json:"batches"`
	BatchSize  int            `json:"batch_size"`
	Namespaces map[string]int `json:"namespaces"`
	ExitStatus int            `json:"exit_status"`
}

// dryRun checks the input as a run would, with the library's own rules
// and batching, but hands the batches to a function that counts them
// instead of sending them: nothing reaches an index, and none is opened.
// Batches are counted at --batch-size, or at the largest size (1000) when
// it is adaptive: a real run starts at 100 and grows while the index
// keeps up, and sends partial batches when the input is slow, so it sends
// at least as many. Records are counted before the batching replaces a
// record by a later one of its id (a duplicate): every valid record, the
// most a real run sends, since which records it replaces depends on where
// its batches fall. With cp (nil without
// --checkpoint), the library skips the records cp settled, as it does for
// a resumed run, and in skips the bad lines that run would not report
// again (the caller set in.skip and in.skipBadThrough); the error matches
// upsert.ErrCheckpointPastEnd when the input is shorter than cp says.
func dryRun(ctx context.Context, o options, in *input, cp upsert.Checkpoint, onInvalid func(upsert.Failure)) (dryRunReport, error) {
	rep := dryRunReport{DryRun: true, Checkpoint: o.checkpoint, BatchSize: o.batchSize, Namespaces: map[string]int{}}
	if rep.BatchSize == 0 {
		rep.BatchSize = upsert.MaxBatchSize
	}
	namespace := namespaceName(o.namespace) // what the SDK sends for ""
	var mu sync.Mutex
	count := func(_ context.Context, _ string, batch []*pinecone.Vector) error {
		mu.Lock()
		defer mu.Unlock()
		rep.Batches++
		rep.Records += len(batch)
		return nil
	}
	opts := []upsert.Option{upsert.WithUpsertFunc(count), upsert.WithBatchSize(rep.BatchSize),
		upsert.WithObserver(upsert.Observer{Failure: onInvalid})}
	if o.dimension > 0 {
		opts = append(opts, upsert.WithDimension(o.dimension))
	}
	if cp != nil {
		opts = append(opts, upsert.WithCheckpoint(cp))
	}
	res, err := upsert.Stream(ctx, in.records(ctx), opts...)
	if in.err != nil {
		return rep, in.err
	}
	if err != nil && ctx.Err() != nil {
		return rep, ctx.Err()
	}
	if errors.Is(err, upsert.ErrCheckpointPastEnd) {
		return rep, err
	}
	rep.Skipped, rep.SkippedBadLines = res.Stats.Skipped, in.skippedBad
	rep.RecordsRead, rep.BadLines = in.read, in.bad
	rep.Invalid, rep.Duplicates = res.Stats.Failed, res.Duplicates
	rep.Records += rep.Duplicates // a run whose batches do not hold them sends them
	if rep.Records > 0 {
		rep.Namespaces[namespace] = rep.Records
	}
	return rep, nil
}

// write writes the dry run's findings.
func (r dryRunReport) write(out io.Writer) error {
	w := &stickyWriter{w: out}
	fmt.Fprintf(w, "dry run: nothing was sent\n")
	fmt.Fprintf(w, "records read   %d\n", r.RecordsRead)
	if r.Checkpoint != "" {
		if r.Skipped == 0 && r.SkippedBadLines == 0 {
			fmt.Fprintf(w, "skipped        none: --checkpoint %s settles nothing yet\n", r.Checkpoint)
		} else {
			fmt.Fprintf(w, "skipped        %s%s, settled by an earlier run (--checkpoint %s; checked from there on)\n",
				quantity(r.Skipped, "record"), plural(r.SkippedBadLines, " and %d bad line%s"), r.Checkpoint)
		}
	}
	fmt.Fprintf(w, "bad lines      %d\n", r.BadLines)
	fmt.Fprintf(w, "invalid        %d\n", r.Invalid)
	fmt.Fprintf(w, "duplicates     %d in batches of up to %d (a run's depend on how its batches fall)\n", r.Duplicates, r.BatchSize)
	fmt.Fprintf(w, "would send     %s", quantity(r.Records, "record"))
	if r.Duplicates > 0 {
		fmt.Fprintf(w, " at most (%d fewer if a run's batches hold the duplicates)", r.Duplicates)
	}
	fmt.Fprintf(w, " in %s%s of up to %d\n", atLeast(r.Batches), quantity(r.Batches, "batch"), r.BatchSize)
	for _, ns := range slices.Sorted(maps.Keys(r.Namespaces)) {
		fmt.Fprintf(w, "  namespace %q: %s\n", ns, quantity(r.Namespaces[ns], "record"))
	}
	return w.err
}

// writeJSON writes the dry run's findings as one JSON object.
func (r dryRunReport) writeJSON(w io.Writer) error { return encodeJSON(w, r) }

// atLeast is "at least " before a count of batches a run may exceed, ""
// before 0, which an input with nothing to send keeps.
func atLeast(batches int) string {
	if batches == 0 {
		return ""
	}
	return "at least "
}
