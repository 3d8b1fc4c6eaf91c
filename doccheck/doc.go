// Package doccheck holds no code of its own: its test compiles every Go
// block of the README and of the guides in docs/, against the modules of
// this commit (the core, otel, redis and sql), so that a renamed field or
// function breaks the build instead of a reader's program.
//
// A block is compiled as written. What it leaves to the reader (a request,
// a lookup function, the signature of the function it sits in) is declared
// in an HTML comment just above it, which a Markdown viewer does not show:
//
//	<!-- doccheck
//	var ctx context.Context
//	func lookUpOrder(context.Context, string) (*Order, bool) { return nil, false }
//	type Order struct{}
//	in: func() (*Order, error)
//	-->
//
// or, for declarations alone, on one line:
//
//	<!-- doccheck: var ctx context.Context; var url string -->
//
// The comment's lines are Go declarations placed beside the block; a line
// "in: func(...) ..." gives the signature of the function the block is the
// body of (func() when none). A block that is itself declarations (a func,
// a type) is placed at the top level. Imports are added for the packages a
// block names (retryfuse, budget, breaker, ledger, idempotency, sloghooks,
// decide, retryfusetest, debugpage, ledgertest, retryfuseredis, retryfusesql, retryfuseotel,
// otelhttp, redis, the standard library's, testing and synctest among
// them), and a variable a block declares and leaves unused is used for it. Errors are reported at the block's line in its Markdown file.
//
// A block whose opening fence is "```go nocheck" is not compiled (output,
// a signature quoted as text); there should be few.
package doccheck
