package readme_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// assumed are the variables the README's code blocks use without declaring
// them, with their types; a block is given those it does not declare.
var assumed = []struct{ name, typ string }{
	{"ctx", "context.Context"},
	{"apiKey", "string"},
	{"host", "string"},
	{"idx", "*pinecone.IndexConnection"},
	{"vectors", "[]*pinecone.Vector"},
	{"vector", "*pinecone.Vector"},
	{"msg", "*kafkaMessage"},
}

// declaredAt matches a block's line that declares names at its top level.
var declaredAt = regexp.MustCompile(`^([A-Za-z_]\w*(?:, *[A-Za-z_]\w*)*) *:=`)

// goBlocks returns the bodies of the ```go blocks of a Markdown text.
func goBlocks(md string) []string {
	var blocks []string
	var cur []string
	in := false
	for line := range strings.SplitSeq(md, "\n") {
		switch {
		case !in && strings.TrimSpace(line) == "```go":
			in, cur = true, nil
		case in && strings.TrimSpace(line) == "```":
			in = false
			blocks = append(blocks, strings.Join(cur, "\n"))
		case in:
			cur = append(cur, line)
		}
	}
	return blocks
}

// blockFunc is block as the body of a function named name: what it
// declares is used after it (a README snippet need not use it), and the
// assumed variables it does not declare are its parameters.
func blockFunc(name, block string) string {
	var declared []string
	for line := range strings.SplitSeq(block, "\n") {
		if m := declaredAt.FindStringSubmatch(line); m != nil {
			for n := range strings.SplitSeq(m[1], ",") {
				if n = strings.TrimSpace(n); n != "_" && !slices.Contains(declared, n) {
					declared = append(declared, n)
				}
			}
		}
	}
	var params []string
	for _, v := range assumed {
		if !slices.Contains(declared, v.name) {
			params = append(params, v.name+" "+v.typ)
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "func %s(%s) {\n%s\n", name, strings.Join(params, ", "), block)
	for _, n := range declared {
		fmt.Fprintf(&b, "\t_ = %s\n", n)
	}
	b.WriteString("}\n")
	return b.String()
}

// snippetsPackage is a package of the README's code blocks, one function
// each.
func snippetsPackage(blocks []string) string {
	var b strings.Builder
	b.WriteString(`package snippets

import (
	"context"
	"errors"
	"log"

	"github.com/pinecone-io/go-pinecone/v5/pinecone"

	"github.com/upsertlib/upsert"
	"github.com/upsertlib/upsert/upsertotel"
)

var (
	_ context.Context
	_ = errors.Is
	_ = log.Print
	_ = upsert.All
	_ = upsertotel.New
)

type kafkaMessage struct{ Offset int64 }

`)
	for i, block := range blocks {
		b.WriteString(blockFunc(fmt.Sprintf("block%d", i+1), block))
	}
	return b.String()
}

// The README's ```go blocks compile as written, each the body of a
// function given the variables it assumes: the test reads them from the
// README, so an edit there that no longer compiles fails here. The package
// is built in place through an overlay (nothing is written to the module),
// with -race when this test has it, so that the build reuses the
// dependencies the test run compiled.
func TestTheREADMEsGoBlocksCompile(t *testing.T) {
	md, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	require.NoError(t, err)
	blocks := goBlocks(string(md))
	require.NotEmpty(t, blocks, "the README has ```go blocks")
	src := snippetsPackage(blocks)

	dir := t.TempDir()
	file := filepath.Join(dir, "snippets.go")
	require.NoError(t, os.WriteFile(file, []byte(src), 0o600))
	wd, err := os.Getwd()
	require.NoError(t, err)
	overlay, err := json.Marshal(map[string]map[string]string{"Replace": {filepath.Join(wd, "snippets", "snippets.go"): file}})
	require.NoError(t, err)
	overlayFile := filepath.Join(dir, "overlay.json")
	require.NoError(t, os.WriteFile(overlayFile, overlay, 0o600))

	args := []string{"build", "-overlay", overlayFile}
	if raceEnabled {
		args = append(args, "-race")
	}
	out, err := exec.Command("go", append(args, "./snippets")...).CombinedOutput()
	require.NoError(t, err, "the README's go blocks do not compile:\n%s\n%s", out, numbered(src))
}

// numbered is src with line numbers, to read a compiler's error against.
func numbered(src string) string {
	var b strings.Builder
	for i, line := range strings.Split(src, "\n") {
		fmt.Fprintf(&b, "%4d  %s\n", i+1, line)
	}
	return b.String()
}
