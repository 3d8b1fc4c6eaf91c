package retryfuseredis

import (
	"encoding/binary"
	"errors"
	"net/http"
	"sort"

	"github.com/retryfuse/retryfuse/ledger"
)

// This file encodes a stored result for Redis in a small binary format:
//
//	version  1 byte, codecVersion
//	status   uvarint
//	headers  uvarint count of names, then per name (sorted):
//	           uvarint length, name bytes,
//	           uvarint count of values, then per value: uvarint length, bytes
//	body     every remaining byte
//
// It is compact (no base64, no field names) and its decoder checks every
// length against what remains, so a damaged record is an error, never a
// panic or a huge allocation.

const codecVersion = 1

// errCorrupt: a stored record could not be decoded.
var errCorrupt = errors.New("retryfuseredis: stored result undecodable")

func encodeResponse(r *ledger.StoredResponse) []byte {
	n := 1 + binary.MaxVarintLen64*2 + len(r.Body)
	names := make([]string, 0, len(r.Header))
	for k, vs := range r.Header {
		names = append(names, k)
		n += 2*binary.MaxVarintLen64 + len(k)
		for _, v := range vs {
			n += binary.MaxVarintLen64 + len(v)
		}
	}
	sort.Strings(names)
	b := make([]byte, 0, n)
	b = append(b, codecVersion)
	b = binary.AppendUvarint(b, uint64(r.StatusCode))
	b = binary.AppendUvarint(b, uint64(len(names)))
	for _, k := range names {
		b = appendString(b, k)
		vs := r.Header[k]
		b = binary.AppendUvarint(b, uint64(len(vs)))
		for _, v := range vs {
			b = appendString(b, v)
		}
	}
	return append(b, r.Body...)
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func decodeResponse(b []byte) (*ledger.StoredResponse, error) {
	d := decoder{b: b}
	if v := d.byte(); v != codecVersion {
		return nil, errCorrupt
	}
	status := d.uvarint()
	if status > 999 {
		return nil, errCorrupt
	}
	nh := d.count()
	var h http.Header
	if nh > 0 {
		h = make(http.Header, nh)
	}
	for range nh {
		k := d.string()
		nv := d.count()
		vs := make([]string, 0, nv)
		for range nv {
			vs = append(vs, d.string())
		}
		h[k] = vs
	}
	if d.bad {
		return nil, errCorrupt
	}
	res := &ledger.StoredResponse{StatusCode: int(status), Header: h}
	if len(d.b) > 0 {
		res.Body = append([]byte(nil), d.b...)
	}
	return res, nil
}

// decoder reads from b; after any read past its end, bad is set and every
// later read gives zero.
type decoder struct {
	b   []byte
	bad bool
}

func (d *decoder) byte() byte {
	if d.bad || len(d.b) == 0 {
		d.bad = true
		return 0
	}
	c := d.b[0]
	d.b = d.b[1:]
	return c
}

func (d *decoder) uvarint() uint64 {
	if d.bad {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.bad = true
		return 0
	}
	d.b = d.b[n:]
	return v
}

// count reads a count of items that each take at least one byte, so that
// it can be no more than the bytes left.
func (d *decoder) count() int {
	v := d.uvarint()
	if v > uint64(len(d.b)) {
		d.bad = true
		return 0
	}
	return int(v)
}

func (d *decoder) string() string {
	n := d.uvarint()
	if d.bad || n > uint64(len(d.b)) {
		d.bad = true
		return ""
	}
	s := string(d.b[:n])
	d.b = d.b[n:]
	return s
}
