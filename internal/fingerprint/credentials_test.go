package fingerprint

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"net/http"
	"sync"
	"testing"

	"github.com/retryfuse/retryfuse/internal/sentinel"
)

func count(n int) string {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(n))
	return string(b[:])
}

func mustCredentials(t *testing.T, headers, cookies []string, key []byte, previous ...[]byte) *Credentials {
	t.Helper()
	c, err := NewCredentials("Credentials", headers, cookies, key, previous)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// uv is s preceded by its length as a uvarint.
func uv(s string) string { return string(binary.AppendUvarint(nil, uint64(len(s)))) + s }

func hmacSHA256(key []byte, msg string) []byte {
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(msg))
	return mac.Sum(nil)
}

// TestBindFormat pins the value: ledgers keep it across releases, and a
// fleet's processes of two releases must agree on it.
func TestBindFormat(t *testing.T) {
	fp := Of("POST", "/refunds", "", []byte(`{}`))
	h := http.Header{"Authorization": {"Bearer A"}, "Cookie": {`theme=dark; sid="s1"`, "sid=s2"}}
	for _, tt := range []struct {
		name string
		key  []byte
		want string // the key given to the derivation
	}{
		{"the public key", nil, PublicCredentialsKey},
		{"a secret key", []byte("0123456789abcdef"), "0123456789abcdef"},
	} {
		c := mustCredentials(t, []string{"authorization", "X-Tenant"}, []string{"sid"}, tt.key)
		derived := hmacSHA256([]byte(tt.want), CredentialsPrefix+"\x02"+uv("Authorization")+uv("X-Tenant")+"\x01"+uv("sid"))
		want := [32]byte(hmacSHA256(derived, string(fp[:])+
			"\x01"+uv("Bearer A")+ // Authorization: one value
			"\x00"+ // X-Tenant: none
			"\x02"+uv("s1")+uv("s2"))) // sid: two cookies
		if got := c.Bind(fp, h, 0); got != want {
			t.Errorf("%s: got %x, want %x", tt.name, got, want)
		}
	}
}

// The names bound are part of the key: the same values under another
// rule give another fingerprint.
func TestBindTellsRulesApart(t *testing.T) {
	h := http.Header{"Authorization": {"v"}, "X-Token": {"v"}}
	a := mustCredentials(t, []string{"Authorization"}, nil, nil)
	b := mustCredentials(t, []string{"X-Token"}, nil, nil)
	if a.Bind([32]byte{}, h, 0) == b.Bind([32]byte{}, h, 0) {
		t.Error("two rules give one fingerprint for the same value")
	}
}

func TestBindWithoutCredentialsKeepsTheFingerprint(t *testing.T) {
	fp := Of("POST", "/refunds", "", []byte(`{}`))
	c := mustCredentials(t, []string{"Authorization"}, []string{"sid"}, nil)
	for _, h := range []http.Header{nil, {}, {"Cookie": {"theme=dark; sidx=1"}}, {"X-Other": {"v"}}} {
		if got := c.Bind(fp, h, 0); got != fp {
			t.Errorf("%v: got %x, want the fingerprint itself", h, got)
		}
	}
	var none *Credentials
	if got := none.Bind(fp, http.Header{"Authorization": {"Bearer A"}}, 0); got != fp || none.Keys() != 0 {
		t.Errorf("nil Credentials: got %x and %d keys, want the fingerprint and none", got, none.Keys())
	}
}

func TestBindTellsCredentialsApart(t *testing.T) {
	fp := Of("POST", "/refunds", "", nil)
	c := mustCredentials(t, []string{"Authorization", "Stripe-Account"}, []string{"sid"}, nil)
	seen := map[[32]byte]string{}
	for name, h := range map[string]http.Header{
		"A":                   {"Authorization": {"Bearer A"}},
		"B":                   {"Authorization": {"Bearer B"}},
		"A twice":             {"Authorization": {"Bearer A", "Bearer A"}},
		"A, account 1":        {"Authorization": {"Bearer A"}, "Stripe-Account": {"acct_1"}},
		"A, account 2":        {"Authorization": {"Bearer A"}, "Stripe-Account": {"acct_2"}},
		"account split":       {"Authorization": {"Bearer Aacct_1"}},
		"session only":        {"Cookie": {"sid=s1"}},
		"other session":       {"Cookie": {"sid=s2"}},
		"empty Authorization": {"Authorization": {""}},
	} {
		got := c.Bind(fp, h, 0)
		if other, ok := seen[got]; ok {
			t.Errorf("%s and %s share a bound fingerprint", name, other)
		}
		seen[got] = name
		if got == fp {
			t.Errorf("%s: bound fingerprint equals the unbound one", name)
		}
	}
}

func TestBindUnderEachKeyDiffers(t *testing.T) {
	fp := Of("POST", "/refunds", "", nil)
	h := http.Header{"Authorization": {"Bearer A"}}
	c := mustCredentials(t, []string{"Authorization"}, nil, []byte("0123456789abcdef-new"), []byte("0123456789abcdef-old"))
	old := mustCredentials(t, []string{"Authorization"}, nil, []byte("0123456789abcdef-old"))
	if c.Keys() != 2 {
		t.Fatalf("%d keys, want 2", c.Keys())
	}
	if c.Bind(fp, h, 0) == c.Bind(fp, h, 1) || c.Bind(fp, h, 1) != old.Bind(fp, h, 0) {
		t.Error("the previous key does not give the fingerprint it gave as the current one")
	}
}

func TestNewCredentialsRefusesBadSettings(t *testing.T) {
	for name, tt := range map[string]struct {
		headers, cookies []string
		key              []byte
		previous         [][]byte
	}{
		"empty header":   {headers: []string{""}},
		"header, space":  {headers: []string{"X Tenant"}},
		"header, colon":  {headers: []string{"X-Tenant:"}},
		"cookie, =":      {cookies: []string{"a=b"}},
		"short key":      {headers: []string{"Authorization"}, key: []byte("15 bytes, short")},
		"short previous": {headers: []string{"Authorization"}, previous: [][]byte{{}}},
	} {
		if _, err := NewCredentials("Credentials", tt.headers, tt.cookies, tt.key, tt.previous); !errors.Is(err, sentinel.ErrInvalidPolicy) {
			t.Errorf("%s: %v, want ErrInvalidPolicy", name, err)
		}
	}
	if c, err := NewCredentials("Credentials", []string{}, nil, nil, nil); c != nil || err != nil {
		t.Errorf("nothing named: %v, %v; want nil, nil", c, err)
	}
}

// The caller's key may change after the rule is made: the rule keeps its
// own copy.
func TestNewCredentialsCopiesTheKey(t *testing.T) {
	key := []byte("0123456789abcdef")
	c := mustCredentials(t, []string{"Authorization"}, nil, key)
	h := http.Header{"Authorization": {"Bearer A"}}
	before := c.Bind([32]byte{}, h, 0)
	key[0] = 'X'
	if c.Bind([32]byte{}, h, 0) != before {
		t.Error("changing the caller's key changed the bound fingerprint")
	}
}

func TestBindIsSafeForConcurrentUse(t *testing.T) {
	c := mustCredentials(t, []string{"Authorization"}, nil, nil)
	want := c.Bind([32]byte{}, http.Header{"Authorization": {"Bearer A"}}, 0)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				if c.Bind([32]byte{}, http.Header{"Authorization": {"Bearer A"}}, 0) != want {
					t.Error("a concurrent Bind gave another value")
					return
				}
			}
		})
	}
	wg.Wait()
}

// BenchmarkBind: binding a request's Authorization into its fingerprint,
// the middleware's and the client Ledger's cost per keyed request, beside
// Of, the fingerprint it binds, in the same run.
func BenchmarkBind(b *testing.B) {
	c, err := NewCredentials("Credentials", []string{"Authorization"}, nil, nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	h := http.Header{"Authorization": {"Bearer sk_test_4eC39HqLyjWDarjtT1zdp7dc"}}
	body := []byte(`{"amount":4200,"currency":"EUR","customer":"cus_123"}`)
	b.Run("fingerprint", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			Of("POST", "/v1/charges", "", body)
		}
	})
	b.Run("bind", func(b *testing.B) {
		b.ReportAllocs()
		fp := Of("POST", "/v1/charges", "", body)
		for b.Loop() {
			c.Bind(fp, h, 0)
		}
	})
	b.Run("bind_nothing_carried", func(b *testing.B) {
		b.ReportAllocs()
		fp := Of("POST", "/v1/charges", "", body)
		none := http.Header{"Content-Type": {"application/json"}}
		for b.Loop() {
			c.Bind(fp, none, 0)
		}
	})
}

// FuzzBind: any header, cookies included, binds without a panic, the same
// way twice, and the named cookies found are those of the Cookie fields.
func FuzzBind(f *testing.F) {
	f.Add("Bearer A", `sid=s1; theme=dark`, `sid="s2"`)
	f.Add("", ";;=;sid;sid=", "")
	c, err := NewCredentials("Credentials", []string{"Authorization"}, []string{"sid"}, nil, nil)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, auth, cookie1, cookie2 string) {
		h := http.Header{"Authorization": {auth}, "Cookie": {cookie1, cookie2}}
		fp := [32]byte{1}
		got := c.Bind(fp, h, 0)
		if got != c.Bind(fp, h.Clone(), 0) {
			t.Fatal("Bind gave two values for one header")
		}
		if got == fp {
			t.Fatal("a header carrying Authorization kept the unbound fingerprint")
		}
	})
}
