package keymemory

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestKeyMemoryBoundAndExpiry(t *testing.T) {
	var k Memory
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for i := range maxKeys {
		k.Remember(fmt.Sprint("k", i), Memo{}, now.Add(time.Duration(i)))
	}
	k.Remember("new", Memo{}, now.Add(maxKeys))
	assert.Len(t, k.m, maxKeys, "the memory stays within its bound")
	_, found := k.Lookup("k0", now.Add(maxKeys))
	assert.False(t, found, "the key that would expire first made room")
	_, found = k.Lookup("new", now.Add(maxKeys))
	assert.True(t, found)
	_, found = k.Lookup("new", now.Add(maxKeys+ttl))
	assert.False(t, found, "a key expires after ttl")
}

// Empty, read without the lock, follows what the memory holds: a key
// remembered, one expired on lookup, one forgotten.
func TestKeyMemoryEmptyFollowsItsKeys(t *testing.T) {
	var k Memory
	now := time.Unix(1000, 0)
	assert.True(t, k.Empty())
	k.Remember("a", Memo{}, now)
	k.Remember("b", Memo{Applied: true}, now)
	assert.False(t, k.Empty())
	k.Forget("a")
	assert.False(t, k.Empty(), "b is still held")
	_, found := k.Lookup("b", now.Add(ttl))
	assert.False(t, found, "b has expired")
	assert.True(t, k.Empty(), "the expired key was dropped on lookup")
}

// ForgetIf frees a key only for the Remember that holds it now: a later
// Remember's hold stands.
func TestForgetIfEndsOnlyTheHoldItNames(t *testing.T) {
	var k Memory
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	first := k.Remember("s k", Memo{}, now)
	if !k.ForgetIf("s k", first) {
		t.Fatal("ForgetIf of the hold in place: not freed")
	}
	if !k.ForgetIf("s k", first) {
		t.Error("ForgetIf of a free key: reported held")
	}
	second := k.Remember("s k", Memo{}, now)
	if second == first {
		t.Fatalf("two Remembers gave one Gen %d", first)
	}
	if k.ForgetIf("s k", first) {
		t.Error("ForgetIf of the first hold freed the second")
	}
	if m, ok := k.Lookup("s k", now); !ok || m.Gen() != second {
		t.Errorf("Lookup: %+v, %v; want the second hold", m, ok)
	}
}
