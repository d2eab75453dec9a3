package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// letterErrors reads a dead-letter file: the error of each record's
// letter, by id, and of each bad line's, by line.
func letterErrors(t *testing.T, path string) (byID map[string]string, byLine map[int]string) {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	byID, byLine = map[string]string{}, map[int]string{}
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var l struct {
			ID    string `json:"id"`
			Line  int    `json:"line"`
			Error string `json:"error"`
		}
		require.NoError(t, json.Unmarshal(sc.Bytes(), &l), sc.Text())
		if l.ID != "" {
			byID[l.ID] = l.Error
		} else {
			byLine[l.Line] = l.Error
		}
	}
	require.NoError(t, sc.Err())
	return byID, byLine
}

// The embedded index, without --dimension, takes the dimension of the first
// valid record, not of the first line: a first line that is not a record,
// or a record the library refuses before sending, fixes nothing.
func TestTheEmbeddedIndexTakesItsDimensionFromTheFirstValidRecord(t *testing.T) {
	tests := []struct {
		name  string
		first string // the first line, of dimension 3 where it has values
		// bad: the first line is a bad line, not a record; else it is a
		// record that fails before it is sent.
		bad bool
	}{
		{"an all-zero dense vector", `{"id":"first","values":[0,0,0]}`, false},
		{"an id Pinecone refuses", fmt.Sprintf(`{"id":%q,"values":[1,2,3]}`, strings.Repeat("x", 513)), false},
		{"values of the wrong type", `{"id":"first","values":"1,2,3"}`, true},
		{"a malformed line", `{"id":"first","values":[1,2,3`, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b strings.Builder
			b.WriteString(tt.first + "\n")
			for i := range 10 {
				fmt.Fprintf(&b, `{"id":"v%d","values":[%d,0.5]}`+"\n", i, i+1)
			}
			// A record valid in itself, of the first line's dimension:
			// it fails only if the index's dimension is 2.
			b.WriteString(`{"id":"probe","values":[1,2,3]}` + "\n")
			dl := deadLetterPath(t)
			res := runCmd(t, nil, strings.NewReader(b.String()), "--json", "--dead-letter", dl, "--progress", "off")
			require.Equal(t, exitFailed, res.status, "stderr:\n%s", res.stderr)
			s := jsonReport(t, res)

			assert.Equal(t, 10, s.Upserted, "every record of dimension 2 lands")
			assert.Equal(t, &embedded{Stored: 10, AsExpected: true}, s.Embedded)
			byID, byLine := letterErrors(t, dl)
			assert.Regexp(t, `^invalid: line 12 \(id "probe"\): .*(the index's dimension is 2|dimension of the index 2)`, byID["probe"],
				"the index's dimension is that of the valid records")
			for i := range 10 {
				assert.NotContains(t, byID, fmt.Sprintf("v%d", i))
			}
			if tt.bad {
				assert.Equal(t, 1, s.BadLines)
				assert.Equal(t, 1, s.Failed, "the probe")
				assert.Contains(t, byLine, 1)
			} else {
				assert.Zero(t, s.BadLines)
				assert.Equal(t, 2, s.Failed, "the first record and the probe")
				assert.Equal(t, map[string]int{"invalid": 2}, s.FailedByClass)
				var firstErr string
				for id, e := range byID {
					if id != "probe" {
						firstErr = e
					}
				}
				assert.Regexp(t, `^invalid: line 1 \(id "[^"]+"\): `, firstErr, "refused before sending, by its line")
			}
		})
	}
}

// An id that comes again later in the input (an update) is sent twice, and
// each landing counts in "upserted", while the embedded index holds it
// once: the check of what it holds allows for that, and calls such a run,
// where every record landed, no mismatch.
func TestARecordRepeatedInALaterBatchIsNoMismatch(t *testing.T) {
	input := records(t, 300) + `{"id":"r1","values":[9,9,9]}` + "\n"
	dl := deadLetterPath(t)
	res := runCmd(t, nil, strings.NewReader(input), "--json", "--progress", "off", "--dead-letter", dl, "--batch-size", "50")
	s := jsonReport(t, res)
	assert.Zero(t, s.Failed)
	assert.Equal(t, 301, s.Upserted)
	assert.Equal(t, 300, s.Embedded.Stored)
	assert.True(t, s.Embedded.AsExpected, "every record landed; the index holds each id once")
	assert.Equal(t, exitOK, res.status, "stdout:\n%s\nstderr:\n%s", res.stdout, res.stderr)

	res = runCmd(t, nil, strings.NewReader(input), "--progress", "off", "--dead-letter", dl, "--batch-size", "50")
	assert.Contains(t, res.stdout, "embedded index: holds 300 records, 1 fewer than upserted: records of an id upserted again replaced the earlier ones")

	// A repeat within a batch is replaced before sending, not sent twice.
	res = runCmd(t, nil, strings.NewReader(records(t, 10)+`{"id":"r1","values":[9,9,9]}`+"\n"), "--json", "--progress", "off", "--dead-letter", dl)
	s = jsonReport(t, res)
	assert.Equal(t, 1, s.Duplicates)
	assert.Equal(t, &embedded{Stored: 10, AsExpected: true}, s.Embedded)
	assert.Equal(t, exitOK, res.status)
}

// Without --batch-size, the dry run batches at 1000, where a run's
// adaptive batches start at 100: two records of one id 150 lines apart
// share a batch of the dry run, where the later one replaces the earlier
// one (a duplicate), but not the run's first two, and the run sends and
// upserts both. The dry run once said it "would send" 299 records where
// the run upserted 300. Which records a run replaces depends on where its
// batches fall, so the dry run says the most it sends, every valid
// record, and counts its duplicates in its own batches, saying so.
func TestADryRunSaysAtMostTheRecordsARealRunSends(t *testing.T) {
	in := strings.Replace(records(t, 300), `"id":"r150"`, `"id":"r0"`, 1)
	dry := runCmd(t, nil, strings.NewReader(in), "--dry-run", "--json")
	var rep dryRunReport
	require.NoError(t, json.Unmarshal([]byte(dry.stdout), &rep), "stdout:\n%s\nstderr:\n%s", dry.stdout, dry.stderr)
	real := runCmd(t, nil, strings.NewReader(in), "--json", "--progress", "off", "--dead-letter", deadLetterPath(t))
	require.Equal(t, exitOK, real.status, "stderr:\n%s", real.stderr)
	s := jsonReport(t, real)
	require.Equal(t, 300, s.Upserted, "the real run sends both records of r0")
	require.Zero(t, s.Duplicates)

	assert.GreaterOrEqual(t, rep.Records, s.Upserted, "the dry run says it would send fewer records than a real run sends")
	assert.Equal(t, 300, rep.Records, "every valid record")
	assert.Equal(t, map[string]int{"__default__": 300}, rep.Namespaces)
	assert.Equal(t, 1, rep.Duplicates, "r0's two records share a batch of 1000")
	assert.Equal(t, 1, rep.Batches)

	human := runCmd(t, nil, strings.NewReader(in), "--dry-run")
	require.Equal(t, exitOK, human.status, "stderr:\n%s", human.stderr)
	assert.Contains(t, human.stdout, "duplicates     1 in batches of up to 1000 (a run's depend on how its batches fall)\n")
	assert.Contains(t, human.stdout, "would send     300 records at most (1 fewer if a run's batches hold the duplicates) in at least 1 batch of up to 1000\n")
}
