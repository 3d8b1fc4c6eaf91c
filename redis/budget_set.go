package retryfuseredis

import (
	"context"
	"errors"
	"sync"

	"github.com/redis/go-redis/v9"
	"github.com/retryfuse/retryfuse/budget"
)

// Budgets makes one Redis budget per scope, for retryfuse.RetryPolicy's
// NewBudget, and closes them all. Create it with RatioBudgets or
// TokenBuckets. This type is concurrency safe.
type Budgets struct {
	make func(scope string) (closingBudget, error)

	mu     sync.Mutex
	made   []closingBudget
	closed bool
}

// closingBudget is a Redis budget: RatioBudget or TokenBucket.
type closingBudget interface {
	budget.Budget
	Close(ctx context.Context) error
}

// errBudgetsClosed is the error of New after Close.
var errBudgetsClosed = errors.New("retryfuseredis: Budgets closed")

// New returns the budget of scope, named after it: pass it as
// retryfuse.RetryPolicy.NewBudget (the transport calls it once per scope),
// so that every process using the same Redis shares one budget per
// dependency. After Close it returns an error.
func (f *Budgets) New(scope string) (budget.Budget, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil, errBudgetsClosed
	}
	b, err := f.make(scope)
	if err != nil {
		return nil, err
	}
	f.made = append(f.made, b)
	return b, nil
}

// Close closes every budget New made (see RatioBudget.Close), within
// ctx's deadline, and joins their errors. Later calls to New fail.
func (f *Budgets) Close(ctx context.Context) error {
	f.mu.Lock()
	made := f.made
	f.made, f.closed = nil, true
	f.mu.Unlock()
	errs := make([]error, len(made))
	var wg sync.WaitGroup
	for i, b := range made {
		wg.Go(func() { errs[i] = b.Close(ctx) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// RatioBudgets returns the Budgets that give each scope the RatioBudget
// named after it. client, cfg and opts are checked at once, as
// NewRatioBudget checks them.
func RatioBudgets(client redis.UniversalClient, cfg budget.RatioConfig, opts BudgetOptions) (*Budgets, error) {
	if _, err := newRatioBudget(client, "check", cfg, opts); err != nil {
		return nil, err
	}
	return &Budgets{make: func(scope string) (closingBudget, error) {
		return NewRatioBudget(client, scope, cfg, opts)
	}}, nil
}

// TokenBuckets returns the Budgets that give each scope the TokenBucket
// named after it. client, cfg and opts are checked at once, as
// NewTokenBucket checks them.
func TokenBuckets(client redis.UniversalClient, cfg budget.TokenBucketConfig, opts BudgetOptions) (*Budgets, error) {
	if _, err := newTokenBucket(client, "check", cfg, opts); err != nil {
		return nil, err
	}
	return &Budgets{make: func(scope string) (closingBudget, error) {
		return NewTokenBucket(client, scope, cfg, opts)
	}}, nil
}
