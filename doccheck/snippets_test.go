package doccheck

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// block is one Go block of a Markdown file, with what it leaves to the reader.
type block struct {
	file string // the Markdown file, absolute
	line int    // the line of the block's first line of code
	pre  string // Go declarations from the doccheck comment above it
	in   string // the signature of the function it is the body of
	code string
}

// extract returns the Go blocks of a Markdown file.
func extract(path string) ([]block, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var (
		blocks  []block
		pre     []string
		in      string
		inPre   bool
		inCode  bool
		skip    bool
		cur     block
		code    []string
		pending bool // a doccheck comment waits for its block
	)
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		switch {
		case inPre:
			if trimmed == "-->" {
				inPre, pending = false, true
				continue
			}
			if s, ok := strings.CutPrefix(trimmed, "in:"); ok {
				in = strings.TrimSpace(s)
				continue
			}
			pre = append(pre, line)
		case inCode:
			if strings.HasPrefix(trimmed, "```") {
				inCode = false
				if !skip {
					cur.code = strings.Join(code, "\n")
					blocks = append(blocks, cur)
				}
				pre, in, code = nil, "", nil
				continue
			}
			code = append(code, line)
		case trimmed == "<!-- doccheck":
			inPre, pre, in = true, nil, ""
		case strings.HasPrefix(trimmed, "<!-- doccheck:") && strings.HasSuffix(trimmed, "-->"):
			// The one-line form: declarations alone.
			pre = []string{strings.TrimSpace(strings.TrimSuffix(strings.TrimPrefix(trimmed, "<!-- doccheck:"), "-->"))}
			in, pending = "", true
		case strings.HasPrefix(trimmed, "```"):
			info := strings.Fields(strings.TrimPrefix(trimmed, "```"))
			inCode, skip = true, true
			if len(info) > 0 && info[0] == "go" {
				skip = len(info) > 1 && info[1] == "nocheck"
			}
			if !pending {
				pre, in = nil, ""
			}
			pending = false
			cur = block{file: path, line: n + 1, pre: strings.Join(pre, "\n"), in: in}
			code = nil
		case trimmed != "" && pending:
			return nil, fmt.Errorf("%s:%d: a doccheck comment must be followed by its block", path, n)
		}
	}
	if inCode || inPre {
		return nil, fmt.Errorf("%s: a block or a doccheck comment is not closed", path)
	}
	return blocks, sc.Err()
}

// packages names the import path of each package a block may name.
var packages = map[string]string{
	"retryfuse":      "github.com/retryfuse/retryfuse",
	"budget":         "github.com/retryfuse/retryfuse/budget",
	"breaker":        "github.com/retryfuse/retryfuse/breaker",
	"ledger":         "github.com/retryfuse/retryfuse/ledger",
	"decide":         "github.com/retryfuse/retryfuse/decide",
	"idempotency":    "github.com/retryfuse/retryfuse/idempotency",
	"sloghooks":      "github.com/retryfuse/retryfuse/sloghooks",
	"retryfuseredis": "github.com/retryfuse/retryfuse/redis",
	"retryfusesql":   "github.com/retryfuse/retryfuse/sql",
	"retryfuseotel":  "github.com/retryfuse/retryfuse/otel",
	"retryfusetest":  "github.com/retryfuse/retryfuse/retryfusetest",
	"debugpage":      "github.com/retryfuse/retryfuse/debugpage",
	"ledgertest":     "github.com/retryfuse/retryfuse/ledger/ledgertest",
	"redis":          "github.com/redis/go-redis/v9",
	"sql":            "database/sql",
	"http":           "net/http",
	"httptest":       "net/http/httptest",
	"context":        "context",
	"errors":         "errors",
	"time":           "time",
	"bytes":          "bytes",
	"strings":        "strings",
	"fmt":            "fmt",
	"log":            "log",
	"slog":           "log/slog",
	"os":             "os",
	"io":             "io",
	"math":           "math",
	"json":           "encoding/json",
	"url":            "net/url",
	"atomic":         "sync/atomic",
	"sync":           "sync",
	"testing":        "testing",
	"synctest":       "testing/synctest",
	"otelhttp":       "go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp",
}

// source returns the Go file that compiles b: the declarations, then the
// block at the top level or as the body of a function, with the imports it
// names and a line directive that reports errors at the Markdown's lines.
func source(b block, pkg string) ([]byte, error) {
	var body string
	decls := b.pre
	topLevel := b.in == "" && parses("package p\n"+b.pre+"\n"+b.code)
	directive := fmt.Sprintf("\n//line %s:%d\n", b.file, b.line)
	if topLevel {
		decls += directive + b.code + "\n"
	} else {
		code, err := useDeclared(b.code)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %v", b.file, b.line, err)
		}
		sig := "func()"
		if b.in != "" {
			sig = b.in
		}
		// A block in a function with results may end before its return,
		// as a snippet does: the function ends for it.
		end := "\n}\n"
		if !strings.HasSuffix(strings.TrimSpace(sig), ")") || strings.Count(sig, "(") > 1 {
			end = "\npanic(\"the block ends here\")\n}\n"
		}
		body = "\nfunc _" + strings.TrimPrefix(sig, "func") + " {" + directive + code + end
	}
	src := "package " + pkg + "\n\n" + decls + "\n" + body
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "", src, parser.SkipObjectResolution)
	if err != nil {
		return nil, fmt.Errorf("%s:%d: the block does not parse: %v", b.file, b.line, err)
	}
	var imports []string
	for _, name := range namedPackages(f) {
		if path, ok := packages[name]; ok {
			imports = append(imports, fmt.Sprintf("\t%s %q", name, path))
		}
	}
	sort.Strings(imports)
	head := "package " + pkg + "\n\n"
	if len(imports) > 0 {
		head += "import (\n" + strings.Join(imports, "\n") + "\n)\n"
	}
	return []byte(head + strings.TrimPrefix(src, "package "+pkg+"\n")), nil
}

func parses(src string) bool {
	_, err := parser.ParseFile(token.NewFileSet(), "", src, parser.SkipObjectResolution)
	return err == nil
}

// namedPackages returns the identifiers used as the left of a selector that
// nothing in the file declares: the packages the file names.
func namedPackages(f *ast.File) []string {
	declared := map[string]bool{}
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.Ident:
			// Any identifier in a declaring position is a local name;
			// collected below by kind.
		case *ast.AssignStmt:
			if n.Tok == token.DEFINE {
				for _, l := range n.Lhs {
					if id, ok := l.(*ast.Ident); ok {
						declared[id.Name] = true
					}
				}
			}
		case *ast.ValueSpec:
			for _, id := range n.Names {
				declared[id.Name] = true
			}
		case *ast.Field:
			for _, id := range n.Names {
				declared[id.Name] = true
			}
		case *ast.FuncDecl:
			declared[n.Name.Name] = true
		case *ast.TypeSpec:
			declared[n.Name.Name] = true
		case *ast.RangeStmt:
			for _, e := range []ast.Expr{n.Key, n.Value} {
				if id, ok := e.(*ast.Ident); ok {
					declared[id.Name] = true
				}
			}
		}
		return true
	})
	seen := map[string]bool{}
	var names []string
	ast.Inspect(f, func(n ast.Node) bool {
		if sel, ok := n.(*ast.SelectorExpr); ok {
			if id, ok := sel.X.(*ast.Ident); ok && !declared[id.Name] && !seen[id.Name] {
				seen[id.Name] = true
				names = append(names, id.Name)
			}
		}
		return true
	})
	return names
}

// useDeclared adds "_ = name" after each statement of a block that declares
// names, so that a block may end on a variable it leaves to the reader.
func useDeclared(code string) (string, error) {
	const head = "package p\nfunc _() {\n"
	src := head + code + "\n}\n"
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "", src, parser.SkipObjectResolution)
	if err != nil {
		return "", fmt.Errorf("the block does not parse as statements: %v", err)
	}
	type insert struct {
		at   int
		text string
	}
	var inserts []insert
	add := func(list []ast.Stmt) {
		for _, s := range list {
			var names []string
			switch s := s.(type) {
			case *ast.AssignStmt:
				if s.Tok == token.DEFINE {
					for _, l := range s.Lhs {
						if id, ok := l.(*ast.Ident); ok && id.Name != "_" {
							names = append(names, id.Name)
						}
					}
				}
			case *ast.DeclStmt:
				if g, ok := s.Decl.(*ast.GenDecl); ok && g.Tok == token.VAR {
					for _, sp := range g.Specs {
						for _, id := range sp.(*ast.ValueSpec).Names {
							if id.Name != "_" {
								names = append(names, id.Name)
							}
						}
					}
				}
			}
			if len(names) > 0 {
				var text strings.Builder
				for _, name := range names {
					text.WriteString("; _ = " + name)
				}
				inserts = append(inserts, insert{fset.Position(s.End()).Offset, text.String()})
			}
		}
	}
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.BlockStmt:
			add(n.List)
		case *ast.CaseClause:
			add(n.Body)
		case *ast.CommClause:
			add(n.Body)
		}
		return true
	})
	sort.Slice(inserts, func(i, j int) bool { return inserts[i].at > inserts[j].at })
	for _, in := range inserts {
		src = src[:in.at] + in.text + src[in.at:]
	}
	return strings.TrimSuffix(strings.TrimPrefix(src, head), "\n}\n"), nil
}

var unsafeChars = regexp.MustCompile(`[^a-z0-9]+`)

// build compiles the blocks, each as a package of its own under snip/ (in
// an overlay: nothing is written to the module), and returns the go
// command's output when any fails.
func build(dir string, blocks []block) (string, error) {
	tmp, err := os.MkdirTemp("", "doccheck")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	overlay := map[string]string{}
	var pkgs []string
	for i, b := range blocks {
		rel, _ := filepath.Rel(filepath.Dir(dir), b.file)
		name := fmt.Sprintf("s%03d_%s_%d", i, strings.Trim(unsafeChars.ReplaceAllString(strings.ToLower(rel), "_"), "_"), b.line)
		src, err := source(b, name)
		if err != nil {
			return "", err
		}
		gen := filepath.Join(tmp, name+".go")
		if err := os.WriteFile(gen, src, 0o644); err != nil {
			return "", err
		}
		overlay[filepath.Join(dir, "snip", name, "snippet.go")] = gen
		pkgs = append(pkgs, "./snip/"+name)
	}
	js, err := json.Marshal(map[string]any{"Replace": overlay})
	if err != nil {
		return "", err
	}
	ov := filepath.Join(tmp, "overlay.json")
	if err := os.WriteFile(ov, js, 0o644); err != nil {
		return "", err
	}
	cmd := exec.Command("go", append([]string{"build", "-overlay=" + ov}, pkgs...)...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	return string(out), err
}
