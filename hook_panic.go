package retryfuse

import "fmt"

// This file is how a panic of the user's code that a call runs (a hook,
// the Classifier) is reported rather than swallowed: recovered where it is
// called (emit, safeClassify), so that it cannot break the call, and
// reported once per Transport.

// The names of PolicyInfo.Policy and PolicyInfo.Action for a panic.
const (
	policyHook     = "hook"
	actionPanicked = "panicked"
)

// hookPanicked reports, once per Transport, that user code it called (a
// hook, or the Classifier) panicked with v: through Hooks.Policy, as
// policy "hook", action "panicked", its Err naming the code and the
// value. The panic was recovered and the call went on; later panics are
// recovered without a report (a hook that panics on every call would
// report on every call). Nothing is reported when v is nil, or when
// Hooks.Policy is nil or is what panicked.
func (c *call) hookPanicked(name string, v any) {
	if v == nil || !c.t.hookPanic.CompareAndSwap(false, true) {
		return
	}
	if h := c.t.Hooks.Policy; h != nil && name != "Hooks.Policy" {
		emit(h, PolicyInfo{CallInfo: c.info(), Scope: c.scopeName(), Policy: policyHook, Action: actionPanicked,
			Err: fmt.Errorf("retryfuse: %s panicked: %v", name, v)})
	}
}
