package main

import (
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// figures are the counts of a final report, human or JSON, without the
// times (elapsed, latency, throughput), which differ from run to run.
type figures struct {
	RecordsRead, BadLines, Upserted, Failed, Duplicates int
	FailedByClass                                       map[string]int
	Requests, Retries                                   int
	RetriesByClass                                      map[string]int
	Splits                                              int
	ErrorsByCode                                        map[string]int
	Causes                                              []cause // without their hosts: the port differs
	Stored, DeadLetters, ExitStatus                     int
}

// jsonFigures takes the figures of a --json report.
func jsonFigures(s summary) figures {
	f := figures{
		RecordsRead: s.RecordsRead, BadLines: s.BadLines, Upserted: s.Upserted, Failed: s.Failed, Duplicates: s.Duplicates,
		FailedByClass: nonZero(s.FailedByClass), Requests: s.Requests, Retries: s.Retries, RetriesByClass: nonZero(s.RetriesByClass),
		Splits: s.Splits, ErrorsByCode: nonZero(s.ErrorsByCode), DeadLetters: s.DeadLetters.Count, ExitStatus: s.ExitStatus,
	}
	for _, c := range s.Causes {
		c.Host = ""
		f.Causes = append(f.Causes, c)
	}
	if s.Embedded != nil {
		f.Stored = s.Embedded.Stored
	}
	return f
}

func nonZero(m map[string]int) map[string]int {
	out := map[string]int{}
	for k, v := range m {
		if v != 0 {
			out[k] = v
		}
	}
	return out
}

// humanFigures reads the figures of a human report.
func humanFigures(t *testing.T, res result) figures {
	t.Helper()
	out := res.stdout
	atoi := func(s string) int {
		t.Helper()
		n, err := strconv.Atoi(s)
		require.NoError(t, err, "%q in\n%s", s, out)
		return n
	}
	// counted reads "12 (rate-limited 3, server 9)".
	counted := func(row string) (int, map[string]int) {
		t.Helper()
		m := regexp.MustCompile(`^(\d+)(?: \((.*)\))?$`).FindStringSubmatch(reportValue(t, out, row))
		require.NotNil(t, m, "row %q in\n%s", row, out)
		by := map[string]int{}
		if m[2] != "" {
			for part := range strings.SplitSeq(m[2], ", ") {
				i := strings.LastIndexByte(part, ' ')
				by[part[:i]] = atoi(part[i+1:])
			}
		}
		return atoi(m[1]), by
	}
	f := figures{
		RecordsRead:  atoi(reportValue(t, out, "records read")),
		BadLines:     atoi(reportValue(t, out, "bad lines")),
		Upserted:     atoi(reportValue(t, out, "upserted")),
		Duplicates:   atoi(reportValue(t, out, "duplicates")),
		Requests:     atoi(reportValue(t, out, "requests")),
		Splits:       atoi(reportValue(t, out, "splits")),
		ErrorsByCode: map[string]int{},
		ExitStatus:   res.status,
	}
	f.Failed, f.FailedByClass = counted("failed")
	f.Retries, f.RetriesByClass = counted("retries")
	if codes := reportValue(t, out, "errors by code"); codes != "none" {
		for part := range strings.SplitSeq(codes, ", ") {
			code, n, _ := strings.Cut(part, " ")
			f.ErrorsByCode[code] = atoi(n)
		}
	}
	for _, m := range regexp.MustCompile(`(?m)^  (\S+) ×(\d+) +(before sending: )?(.*)$`).FindAllStringSubmatch(out, -1) {
		f.Causes = append(f.Causes, cause{Class: m[1], Count: atoi(m[2]), Message: m[4]})
	}
	if m := regexp.MustCompile(`(?m)^embedded index: holds (\d+) records`).FindStringSubmatch(out); m != nil {
		f.Stored = atoi(m[1])
	}
	if m := regexp.MustCompile(`(?m)^dead letters: (\d+) in `).FindStringSubmatch(out); m != nil {
		f.DeadLetters = atoi(m[1])
	}
	return f
}

func TestTheJSONReportHasTheFiguresOfTheHumanOne(t *testing.T) {
	// Two bad lines, a record refused before sending, one the index
	// refuses (found by bisection), and 503s to retry. One request at a
	// time, of a fixed size, and the index's faults drawn by request
	// number: the two runs send the same requests.
	input := records(t, 400) + "not json\n" + `{"id":"zero","values":[0,0,0]}` + "\n" + `{"id":"typed","values":"x"}` + "\n"
	args := []string{"--progress", "off", "--fault", "503=0.15,reject=r42", "--batch-size", "40", "--concurrency", "1"}

	human := runCmd(t, nil, strings.NewReader(input), append(args, "--dead-letter", deadLetterPath(t))...)
	require.Equal(t, exitFailed, human.status, "stderr:\n%s", human.stderr)
	js := runCmd(t, nil, strings.NewReader(input), append(args, "--dead-letter", deadLetterPath(t), "--json")...)
	require.Equal(t, exitFailed, js.status, "stderr:\n%s", js.stderr)
	s := jsonReport(t, js)

	got, want := humanFigures(t, human), jsonFigures(s)
	assert.Equal(t, want, got)
	// The run had something to show in each figure.
	assert.Equal(t, 2, want.BadLines)
	assert.Equal(t, map[string]int{"invalid": 2}, want.FailedByClass)
	assert.Positive(t, want.RetriesByClass["server"])
	assert.Positive(t, want.Splits)
	assert.Equal(t, 4, want.DeadLetters)
	assert.Equal(t, 399, want.Stored)
	assert.Equal(t, s.ExitStatus, js.status, "the JSON's exit status is the process's")
}

// A record the library refuses before sending is named on stderr by its
// input line, as a line that is not JSON is: "pcupsert: line N (id …): why".
func TestRecordsRefusedBeforeSendingAreNamedByTheirLineAsBadLinesAre(t *testing.T) {
	tests := []struct {
		name   string
		record string
		args   []string
		rule   string
	}{
		{"all-zero dense values", `{"id":"bad","values":[0,0,0]}`, nil,
			"dense values are all zero; Pinecone requires at least one non-zero value"},
		{"a dimension unlike --dimension's", `{"id":"bad","values":[1,2]}`, []string{"--dimension", "3"},
			"has 2 dense values; the index's dimension is 3"},
		{"nested metadata", `{"id":"bad","values":[1,2,3],"metadata":{"a":{"b":1}}}`, nil, `metadata field "a"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Line 2 is blank, so that lines and records are numbered
			// apart: the bad record is the library's record 2 (from 0) but
			// line 5.
			input := `{"id":"a","values":[1,2,3]}` + "\n\n" + `{"id":"typed","values":"x"}` + "\n" +
				`{"id":"b","values":[4,5,6]}` + "\n" + tt.record + "\n" + `{"id":"c","values":[7,8,9]}` + "\n"
			dl := deadLetterPath(t)
			res := runCmd(t, nil, strings.NewReader(input), append([]string{"--json", "--dead-letter", dl, "--progress", "off"}, tt.args...)...)
			require.Equal(t, exitFailed, res.status, "stderr:\n%s", res.stderr)

			named := regexp.MustCompile(`(?m)^pcupsert: line (\d+) \(id "([^"]*)"\): (.*)$`).FindAllStringSubmatch(res.stderr, -1)
			require.Len(t, named, 2, "the bad line and the invalid record, in one form; stderr:\n%s", res.stderr)
			assert.Equal(t, []string{"3", "typed"}, named[0][1:3])
			assert.True(t, strings.HasPrefix(named[0][3], "wrong type"), named[0][3])
			assert.Equal(t, []string{"5", "bad"}, named[1][1:3])
			assert.Contains(t, named[1][3], tt.rule)
			assert.NotRegexp(t, `record \d`, named[1][3], "not the library's numbering of the records")

			s := jsonReport(t, res)
			assert.Equal(t, 3, s.Upserted)
			assert.Equal(t, &embedded{Stored: 3, AsExpected: true}, s.Embedded)
			require.NotEmpty(t, s.Causes)
			last := s.Causes[len(s.Causes)-1]
			assert.Equal(t, cause{Class: "invalid", Count: 1, Message: last.Message}, last, "refused before sending: no host answered")
			assert.Contains(t, last.Message, tt.rule)
			byID, byLine := letterErrors(t, dl)
			assert.Equal(t, "invalid: line 5 (id \"bad\"): "+named[1][3], byID["bad"], "the dead letter names it the same way")
			assert.Equal(t, "line 3 (id \"typed\"): "+named[0][3], byLine[3])
		})
	}
}
