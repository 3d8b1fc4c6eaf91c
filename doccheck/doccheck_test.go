package doccheck

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// docs returns the README and the guides, the files whose Go blocks a
// reader copies.
func docs(t *testing.T) []string {
	t.Helper()
	guides, err := filepath.Glob("../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	files := append([]string{"../README.md"}, guides...)
	for i, f := range files {
		abs, err := filepath.Abs(f)
		if err != nil {
			t.Fatal(err)
		}
		files[i] = abs
	}
	return files
}

// TestEveryGoBlockOfTheDocsCompiles builds each Go block of README.md and
// docs/*.md against the modules of this commit.
func TestEveryGoBlockOfTheDocsCompiles(t *testing.T) {
	var blocks []block
	for _, f := range docs(t) {
		bs, err := extract(f)
		if err != nil {
			t.Fatal(err)
		}
		blocks = append(blocks, bs...)
	}
	if len(blocks) < 10 {
		t.Fatalf("found %d Go blocks in the README and the guides, want at least 10: is the extraction broken?", len(blocks))
	}
	wd, _ := os.Getwd()
	if out, err := build(wd, blocks); err != nil {
		t.Fatalf("%d Go blocks of the docs, some do not compile: %v\n%s", len(blocks), err, out)
	}
	t.Logf("%d Go blocks compiled", len(blocks))
}

// TestABlockNamingAMissingFieldFailsAtItsLine pins that the check can fail:
// a block naming a field the Transport does not have is refused, and the
// error points at the block's line in its Markdown file.
func TestABlockNamingAMissingFieldFailsAtItsLine(t *testing.T) {
	md := filepath.Join(t.TempDir(), "guide.md")
	text := "# A guide\n\nSome prose.\n\n<!-- doccheck\nvar ctx context.Context\n-->\n```go\ntr := &retryfuse.Transport{Retry: retryfuse.RetryPolicy{MaxTries: 5}}\n_ = ctx\n```\n"
	if err := os.WriteFile(md, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	blocks, err := extract(md)
	if err != nil {
		t.Fatal(err)
	}
	if len(blocks) != 1 || blocks[0].line != 9 || !strings.Contains(blocks[0].pre, "var ctx") {
		t.Fatalf("extract: got %+v, want one block at line 9 with its declarations", blocks)
	}
	wd, _ := os.Getwd()
	out, err := build(wd, blocks)
	if err == nil {
		t.Fatal("a block naming RetryPolicy.MaxTries compiled; want a build error")
	}
	if !strings.Contains(out, "guide.md:9") || !strings.Contains(out, "MaxTries") {
		t.Fatalf("the error does not point at guide.md:9 and name MaxTries:\n%s", out)
	}
}

// TestDeclarationsAndSignaturesOfBlocks pins the two forms a block takes: a
// block of declarations is compiled at the top level, and a block of
// statements in the function its comment names, with its unused variables
// used for it.
func TestDeclarationsAndSignaturesOfBlocks(t *testing.T) {
	md := filepath.Join(t.TempDir(), "forms.md")
	text := "<!-- doccheck\nin: func() error\n-->\n```go\nshared, err := budget.NewRatio(budget.RatioConfig{Ratio: 0.2})\nif err != nil {\n\treturn err\n}\ntr := &retryfuse.Transport{Retry: retryfuse.RetryPolicy{Budget: shared}}\nreturn nil\n```\n\n" +
		"```go\nfunc newClient() *http.Client {\n\treturn &http.Client{Transport: &retryfuse.Transport{}}\n}\n```\n\n```go nocheck\nthis is not Go\n```\n"
	if err := os.WriteFile(md, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	blocks, err := extract(md)
	if err != nil {
		t.Fatal(err)
	}
	if len(blocks) != 2 || blocks[0].in != "func() error" || blocks[1].in != "" {
		t.Fatalf("extract: got %+v, want two blocks, the first in func() error", blocks)
	}
	wd, _ := os.Getwd()
	if out, err := build(wd, blocks); err != nil {
		t.Fatalf("the two forms do not compile: %v\n%s", err, out)
	}
}

// TestOneLineDeclarations pins the one-line form of a block's declarations.
func TestOneLineDeclarations(t *testing.T) {
	md := filepath.Join(t.TempDir(), "one.md")
	text := "<!-- doccheck: var ctx context.Context; var url string -->\n```go\nreq, err := http.NewRequestWithContext(ctx, \"GET\", url, nil)\n```\n"
	if err := os.WriteFile(md, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	blocks, err := extract(md)
	if err != nil {
		t.Fatal(err)
	}
	if len(blocks) != 1 || blocks[0].pre != "var ctx context.Context; var url string" {
		t.Fatalf("extract: got %+v, want one block with the one-line declarations", blocks)
	}
	wd, _ := os.Getwd()
	if out, err := build(wd, blocks); err != nil {
		t.Fatalf("a block with one-line declarations does not compile: %v\n%s", err, out)
	}
}
