//go:build ignore

// The program behind scripts/get-order, in two steps.
//
//	go run main.go instrument TREE DIR < NUL-separated paths (git ls-files -z)
//
// copies the core module of TREE into DIR (the nested modules, each
// directory with a go.mod of its own, left out), adds the package
// internal/pathtrace, makes every function and function literal of the
// module's non-test files tell pathtrace the file it is in as its first
// statement, and adds a test of the root package, TestGetOrder, that writes
// the files one warm GET enters, in order, to the file named by
// $GETORDER_OUT.
//
//	go run main.go report TRACE
//
// reads that file and prints the sequence, file by file and stage by stage,
// with its rooms and its returns.
package main

import (
	"bytes"
	"errors"
	"fmt"
	"go/ast"
	"go/format"
	"go/parser"
	"go/token"
	"io"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

func main() {
	var err error
	switch {
	case len(os.Args) == 4 && os.Args[1] == "instrument":
		err = instrument(os.Args[2], os.Args[3], os.Stdin)
	case len(os.Args) == 3 && os.Args[1] == "report":
		err = report(os.Args[2], os.Stdout)
	default:
		err = errors.New("usage: main.go instrument TREE DIR < paths | main.go report TRACE")
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "getorder:", err)
		os.Exit(1)
	}
}

const pathtraceGo = `// Package pathtrace records the files a traced call enters, in order.
package pathtrace

import (
	"sync"
	"sync/atomic"
)

var (
	on   atomic.Bool
	mu   sync.Mutex
	seen []string
)

// Enter records that a function of file was entered, while tracing is on.
func Enter(file string) {
	if !on.Load() {
		return
	}
	mu.Lock()
	seen = append(seen, file)
	mu.Unlock()
}

// Start switches tracing on.
func Start() { on.Store(true) }

// Stop switches tracing off and returns the files entered since Start.
func Stop() []string {
	on.Store(false)
	mu.Lock()
	defer mu.Unlock()
	s := seen
	seen = nil
	return s
}
`

// testGo is TestWarmGETPath's Transport (the defaults, an instant base
// answering 200) and its GETs: one to warm it, one traced.
const testGo = `package retryfuse

import (
	"context"
	"net/http"
	"os"
	"strings"
	"testing"

	pathtrace %q
)

type getOrderBase struct{}

func (getOrderBase) RoundTrip(req *http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: http.StatusOK, Body: http.NoBody, Request: req}, nil
}

func TestGetOrder(t *testing.T) {
	tr := &Transport{Base: getOrderBase{}}
	get := func(i int) {
		req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, "http://dependency.test/items", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := tr.RoundTrip(req)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %%d: %%v, %%v", i, resp, err)
		}
		_ = resp.Body.Close()
	}
	get(1)
	pathtrace.Start()
	get(2)
	files := pathtrace.Stop()
	if len(files) == 0 {
		t.Fatal("the traced GET entered no file")
	}
	if err := os.WriteFile(os.Getenv("GETORDER_OUT"), []byte(strings.Join(files, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}
`

func instrument(tree, dir string, list io.Reader) error {
	raw, err := io.ReadAll(list)
	if err != nil {
		return err
	}
	var files, nested []string
	for _, p := range strings.Split(string(raw), "\x00") {
		if p == "" {
			continue
		}
		files = append(files, p)
		if strings.HasSuffix(p, "/go.mod") {
			nested = append(nested, strings.TrimSuffix(p, "go.mod"))
		}
	}
	modPath, err := modulePath(filepath.Join(tree, "go.mod"))
	if err != nil {
		return err
	}
	traceImport := modPath + "/internal/pathtrace"
	n := 0
	for _, p := range files {
		if under(p, nested) || p == "go.work" || p == "go.work.sum" {
			continue
		}
		src, err := os.ReadFile(filepath.Join(tree, filepath.FromSlash(p)))
		if errors.Is(err, os.ErrNotExist) {
			continue // deleted in the work tree, not yet from the index
		}
		if err != nil {
			return err
		}
		if instrumentable(p) {
			out, changed, err := addEnters(p, src, traceImport)
			if err != nil {
				return fmt.Errorf("%s: %w", p, err)
			}
			if changed {
				src = out
				n++
			}
		}
		if err := write(dir, p, src); err != nil {
			return err
		}
	}
	if n == 0 {
		return errors.New("no file instrumented")
	}
	if err := write(dir, "internal/pathtrace/pathtrace.go", []byte(pathtraceGo)); err != nil {
		return err
	}
	return write(dir, "getorder_trace_test.go", []byte(fmt.Sprintf(testGo, traceImport)))
}

// instrumentable is a Go source file of a package of the module: not a
// test, nor under a directory the go command ignores.
func instrumentable(p string) bool {
	if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
		return false
	}
	for _, elem := range strings.Split(path.Dir(p), "/") {
		if elem == "testdata" || strings.HasPrefix(elem, "_") || (strings.HasPrefix(elem, ".") && elem != ".") {
			return false
		}
	}
	return true
}

// addEnters inserts the pathtrace import after the package clause and
// pathtrace.Enter(file) at the start of every function body. A file
// without a function body, or built only on request (//go:build ignore),
// is left as it is.
func addEnters(file string, src []byte, traceImport string) ([]byte, bool, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, file, src, parser.ParseComments)
	if err != nil {
		return nil, false, err
	}
	for _, cg := range f.Comments {
		if cg.Pos() > f.Package {
			break
		}
		for _, c := range cg.List {
			if strings.TrimSpace(c.Text) == "//go:build ignore" {
				return nil, false, nil
			}
		}
	}
	for _, imp := range f.Imports {
		if imp.Name != nil && imp.Name.Name == "pathtrace" || strings.HasSuffix(imp.Path.Value, `/pathtrace"`) {
			return nil, false, errors.New("already imports a pathtrace")
		}
	}
	type edit struct {
		off  int
		text string
	}
	var edits []edit
	enter := "pathtrace.Enter(" + strconv.Quote(file) + ");"
	ast.Inspect(f, func(n ast.Node) bool {
		var body *ast.BlockStmt
		switch fn := n.(type) {
		case *ast.FuncDecl:
			body = fn.Body
		case *ast.FuncLit:
			body = fn.Body
		}
		if body != nil {
			edits = append(edits, edit{fset.Position(body.Lbrace).Offset + 1, enter})
		}
		return true
	})
	if len(edits) == 0 {
		return nil, false, nil
	}
	// The import goes at the end of the package clause's line.
	off := fset.Position(f.Name.End()).Offset
	if nl := bytes.IndexByte(src[off:], '\n'); nl >= 0 {
		off += nl
	} else {
		off = len(src)
	}
	edits = append(edits, edit{off, "\nimport pathtrace " + strconv.Quote(traceImport) + "\n"})
	sort.SliceStable(edits, func(i, j int) bool { return edits[i].off > edits[j].off })
	out := append([]byte(nil), src...)
	for _, e := range edits {
		out = append(out[:e.off], append([]byte(e.text), out[e.off:]...)...)
	}
	formatted, err := format.Source(out)
	if err != nil {
		return nil, false, fmt.Errorf("instrumented, it does not parse: %w", err)
	}
	return formatted, true, nil
}

func modulePath(goMod string) (string, error) {
	b, err := os.ReadFile(goMod)
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "module "); ok {
			return strings.Trim(strings.TrimSpace(rest), `"`), nil
		}
	}
	return "", fmt.Errorf("%s: no module line", goMod)
}

func under(p string, dirs []string) bool {
	for _, d := range dirs {
		if strings.HasPrefix(p, d) {
			return true
		}
	}
	return false
}

func write(dir, p string, b []byte) error {
	dst := filepath.Join(dir, filepath.FromSlash(p))
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	return os.WriteFile(dst, b, 0o644)
}

// stages maps a file of the module to the stage of the pipeline it belongs
// to (docs/ARCHITECTURE.md, "The pipeline in the folders"): a root file by
// its name, a package's file by its directory. A file of neither is
// "shared", a service every stage uses rather than a stage: the clock, the
// hooks, the errors, and the decision core (package decide), which the
// facts ask what a method is and the retry asks for its verdict.
var stages = map[string]string{
	"transport.go": "outer", "outer.go": "outer",
	"internal/fallback/": "outer", "internal/share/": "outer",
	"idempotency_key.go": "facts",
	"call.go":            "loop",
	"scopes.go":          "scopes",
	"overload.go":        "throttle", "internal/throttle/": "throttle",
	"retry.go": "retry", "budget/": "retry", "internal/backoff/": "retry",
	"ledger_gate.go": "ledger", "reconcile.go": "ledger", "ledger/": "ledger",
	"internal/keymemory/": "ledger", "internal/honour/": "ledger", "internal/fingerprint/": "ledger",
	"hedge.go": "hedge", "internal/latency/": "hedge",
	"admission.go": "admission", "breaker/": "admission",
	"internal/bulkhead/": "bulkhead", "internal/alarm/": "bulkhead",
	"attempt.go": "attempt", "trace.go": "attempt", "resend.go": "attempt", "classify.go": "attempt",
	"internal/evidence/": "attempt", "internal/reqbody/": "attempt",
}

const shared = "shared"

func stageOf(file string) string {
	if s, ok := stages[file]; ok {
		return s
	}
	if s, ok := stages[path.Dir(file)+"/"]; ok {
		return s
	}
	return shared
}

func report(trace string, w io.Writer) error {
	b, err := os.ReadFile(trace)
	if err != nil {
		return err
	}
	entries := strings.Fields(string(b))
	files := collapse(entries)
	fmt.Fprintf(w, "One warm GET, file by file (%d function entries; consecutive repeats collapsed):\n", len(entries))
	rooms, returns := list(w, files, nil)
	fmt.Fprintf(w, "rooms: %d files\nreturns: %d (entries of a file the GET had entered before)\n", rooms, returns)

	var stageSeq, sharedFiles []string
	sharedSeen := map[string]bool{}
	for _, file := range files {
		s := stageOf(file)
		if s == shared {
			if !sharedSeen[file] {
				sharedSeen[file] = true
				sharedFiles = append(sharedFiles, file)
			}
			continue
		}
		stageSeq = append(stageSeq, s)
	}
	stageSeq = collapse(stageSeq)
	fmt.Fprintf(w, "\nStage by stage (the shared files left out: %s):\n", strings.Join(sharedFiles, ", "))
	rooms, returns = list(w, stageSeq, nil)
	_, returnsNoLoop := list(nil, stageSeq, map[string]bool{"loop": true})
	fmt.Fprintf(w, "rooms: %d stages\nreturns: %d with the loop's; %d without them (the loop is the driver every stage returns to)\n",
		rooms, returns, returnsNoLoop)
	return nil
}

func collapse(seq []string) []string {
	var out []string
	for _, s := range seq {
		if len(out) == 0 || out[len(out)-1] != s {
			out = append(out, s)
		}
	}
	return out
}

// list prints seq numbered, marking each return (an entry of a room seen
// before), to w unless it is nil, and counts its rooms and the returns to
// rooms not in skip.
func list(w io.Writer, seq []string, skip map[string]bool) (rooms, returns int) {
	seen := map[string]bool{}
	for i, s := range seq {
		mark := ""
		if seen[s] && !skip[s] {
			returns++
			mark = "  <- return"
		}
		seen[s] = true
		if w != nil {
			fmt.Fprintln(w, strings.TrimRight(fmt.Sprintf("%3d  %-38s%s", i+1, s, mark), " "))
		}
	}
	return len(seen), returns
}
