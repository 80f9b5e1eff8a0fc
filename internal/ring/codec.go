package ring

import (
	"fmt"
	"strings"

	"github.com/kvconnect/kvconnect/errdefs"
)

// Kinds maps the sentinels' wire names (errdefs.KindNames) to the bits
// of a kinds mask, in the order the host named them at setup: bit i is
// names[i]. Both sides build it from the host's list, so a sentinel
// either side does not know is simply not carried. A Kinds is immutable
// and safe for concurrent use.
type Kinds struct {
	names []string
	bits  map[string]uint32
}

// NewKinds makes the table for names (at most MaxKinds are used; empty
// and repeated names get no bit).
func NewKinds(names []string) Kinds {
	k := Kinds{bits: map[string]uint32{}}
	for _, n := range names {
		if len(k.names) == MaxKinds {
			break
		}
		if _, dup := k.bits[n]; n == "" || dup {
			k.names = append(k.names, "")
			continue
		}
		k.bits[n] = 1 << len(k.names)
		k.names = append(k.names, n)
	}
	return k
}

// Mask is the kinds mask of every sentinel err wraps.
func (k Kinds) Mask(err error) uint32 {
	var m uint32
	for _, n := range errdefs.Kinds(err) {
		m |= k.bits[n]
	}
	return m
}

// Names are the wire names of mask's bits (unknown bits are ignored).
func (k Kinds) Names(mask uint32) []string {
	var out []string
	for i, n := range k.names {
		if mask&(1<<i) != 0 && n != "" {
			out = append(out, n)
		}
	}
	return out
}

// errorOf rebuilds an error from its mask and message; an empty message
// (none recorded, the message area was full) is replaced by one naming
// what and the sentinels.
func (k Kinds) errorOf(mask uint32, msg, what string) error {
	names := k.Names(mask)
	if msg == "" {
		msg = what + " failed (" + strings.Join(names, ", ") + "; the plugin recorded no message)"
		if len(names) == 0 {
			msg = what + " failed (the plugin recorded neither sentinel nor message)"
		}
	}
	return errdefs.Remote(strings.ToValidUTF8(msg, "\uFFFD"), names...)
}

// EncodeResults writes the outcome of a batch of n ops into its area: a
// record for each failed op (errAt(i) != nil) with its sentinels and
// message, and returns the completion to publish for batch id. batchErr
// is the batch-level error (Transfer's return), or nil.
func EncodeResults(a Area, id uint64, k Kinds, n int, errAt func(i int) error, batchErr error) Comp {
	c := Comp{ID: id, BatchMsg: NoMsg}
	msgs := a.Messages()
	for i := 0; i < min(n, a.Len()); i++ {
		err := errAt(i)
		if err == nil {
			continue
		}
		a.PutRecord(int(c.NRec), Record{Index: uint32(i), Kinds: k.Mask(err), Msg: msgs.Add(err.Error())})
		c.NRec++
	}
	if batchErr != nil {
		c.Flags |= FlagBatchError
		c.BatchKinds, c.BatchMsg = k.Mask(batchErr), msgs.Add(batchErr.Error())
	}
	return c
}

// DecodeResults reads the outcome of a batch of a.Len() ops completed by
// c from its area: it calls failed(i, err) for each failed op and returns
// the batch-level error (nil when none). Everything it reads is checked:
// more records than ops, an index out of range or repeated, a message
// outside the message area or too long make it return a protocol error
// (perr) instead, after which the results it reported must be discarded.
// who names the plugin in messages it makes up. It never panics,
// whatever the area holds.
func DecodeResults(a Area, c Comp, k Kinds, who string, failed func(i int, err error)) (batchErr, perr error) {
	if c.NRec == 0 && c.Flags&FlagBatchError == 0 {
		return nil, nil // every op completed: the common case, kept small
	}
	return decodeFailures(a, c, k, who, failed)
}

// decodeFailures is DecodeResults for a batch with failures. It is kept
// out of line: its frame is large, and the common case runs on fresh
// goroutine stacks that would otherwise be copied to grow.
//
//go:noinline
func decodeFailures(a Area, c Comp, k Kinds, who string, failed func(i int, err error)) (batchErr, perr error) {
	n := a.Len()
	if c.NRec > uint32(n) {
		return nil, fmt.Errorf("ring: %s completed a batch of %d ops with %d failed-op records: %w", who, n, c.NRec, errdefs.ErrProtocol)
	}
	var seen []uint64
	if c.NRec > 0 {
		seen = make([]uint64, (n+63)/64)
	}
	for j := 0; j < int(c.NRec); j++ {
		r := a.record(j)
		if r.Index >= uint32(n) {
			return nil, fmt.Errorf("ring: %s recorded a failure of op %d in a batch of %d: %w", who, r.Index, n, errdefs.ErrProtocol)
		}
		if seen[r.Index/64]&(1<<(r.Index%64)) != 0 {
			return nil, fmt.Errorf("ring: %s recorded op %d's failure twice: %w", who, r.Index, errdefs.ErrProtocol)
		}
		seen[r.Index/64] |= 1 << (r.Index % 64)
		msg, err := a.message(r.Msg)
		if err != nil {
			return nil, fmt.Errorf("ring: %s, op %d: %w", who, r.Index, err)
		}
		failed(int(r.Index), k.errorOf(r.Kinds, msg, fmt.Sprintf("%s: op %d", who, r.Index)))
	}
	if c.Flags&FlagBatchError != 0 {
		msg, err := a.message(c.BatchMsg)
		if err != nil {
			return nil, fmt.Errorf("ring: %s, batch error: %w", who, err)
		}
		batchErr = k.errorOf(c.BatchKinds, msg, who+": batch")
	}
	return batchErr, nil
}
