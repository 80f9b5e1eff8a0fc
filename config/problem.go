package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/kvconnect/kvconnect/errdefs"
	"github.com/kvconnect/kvconnect/internal/suggest"
)

// ErrInvalid is wrapped by every configuration error about a bad key or
// value (it is errdefs.ErrInvalidArgument). Settings that are well formed
// but not supported yet (buffer_device cuda, metadata etcd://...) wrap
// errdefs.ErrNotSupported instead.
var ErrInvalid = errdefs.ErrInvalidArgument

// Problem is one thing wrong with the configuration: a bad value, an
// unknown key, an unreadable file. Load and Config.Validate join every
// problem they find with errors.Join; Problems (or errors.As) gets them
// back.
type Problem struct {
	// Key is the setting (protocol, transports.tcp.connections, an unknown
	// key as written); empty for problems with a whole input (a file that
	// does not parse).
	Key string `json:"key,omitempty"`
	// Value is the value as written, nil when there is none.
	Value any `json:"value,omitempty"`
	// Source says where Key or Value came from: "file kvconnect.yaml",
	// "env MOONCAKE_PROTOCOL", "kv_transfer_config kv_role in flag
	// --kv-transfer-config", "flag --protocol".
	Source string `json:"source,omitempty"`
	// Reason says what is wrong when the allowed values alone do not
	// ("unknown key", "no entry for local_device_index 2").
	Reason string `json:"reason,omitempty"`
	// Allowed says what would be accepted.
	Allowed string `json:"allowed,omitempty"`
	// Suggestion is the closest valid value or key, if one is close.
	Suggestion string `json:"suggestion,omitempty"`
	// Warning marks a problem that does not stop loading (an unknown field
	// in a vLLM kv_transfer_config, a duplicate fallback entry).
	Warning bool `json:"warning,omitempty"`
	// Err is the sentinel: ErrInvalid (errdefs.ErrInvalidArgument) or
	// errdefs.ErrNotSupported.
	Err error `json:"-"`
}

// Error formats the problem on one line:
//
//	config: protocol = "rdam" (from file kvconnect.yaml): unknown transport; want tcp, rdma, ...; did you mean "rdma"?
func (p *Problem) Error() string { return "config: " + p.Text() }

// Text is Error without the "config: " prefix, for lists of problems.
func (p *Problem) Text() string {
	var b strings.Builder
	switch {
	case p.Key != "" && p.Value != nil:
		fmt.Fprintf(&b, "%s = %s", p.Key, showValue(p.Value))
	case p.Key != "":
		b.WriteString(p.Key)
	}
	if p.Source != "" {
		if b.Len() == 0 {
			b.WriteString(p.Source)
		} else {
			fmt.Fprintf(&b, " (from %s)", p.Source)
		}
	}
	sep := ": "
	if b.Len() == 0 {
		sep = ""
	}
	if p.Reason != "" {
		b.WriteString(sep + p.Reason)
		sep = "; "
	}
	if p.Allowed != "" {
		b.WriteString(sep + "want " + p.Allowed)
		sep = "; "
	}
	if p.Suggestion != "" {
		fmt.Fprintf(&b, "%sdid you mean %q?", sep, p.Suggestion)
	}
	return b.String()
}

// Unwrap returns the sentinel, so errors.Is(err, errdefs.ErrInvalidArgument)
// holds for a joined list of problems.
func (p *Problem) Unwrap() error {
	if p.Err == nil {
		return ErrInvalid
	}
	return p.Err
}

// Problems returns every *Problem inside err (a single problem, a joined
// list, or errors wrapping them), in order.
func Problems(err error) []*Problem {
	var out []*Problem
	var walk func(error)
	walk = func(e error) {
		if e == nil {
			return
		}
		if p, ok := e.(*Problem); ok {
			out = append(out, p)
			return
		}
		switch u := e.(type) {
		case interface{ Unwrap() []error }:
			for _, x := range u.Unwrap() {
				walk(x)
			}
		case interface{ Unwrap() error }:
			walk(u.Unwrap())
		}
	}
	walk(err)
	return out
}

// joinProblems joins problems into one error (nil for none).
func joinProblems(ps []*Problem) error {
	if len(ps) == 0 {
		return nil
	}
	errs := make([]error, len(ps))
	for i, p := range ps {
		errs[i] = p
	}
	return errors.Join(errs...)
}

// showValue formats a value as written: strings quoted, the rest as JSON.
func showValue(v any) string {
	switch x := v.(type) {
	case string:
		return strconv.Quote(x)
	case fmt.Stringer:
		return x.String()
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprintf("%v", v)
	}
	return string(b)
}

// closest returns the candidate near enough to s to be a typo of it (see
// suggest.Closest).
func closest(s string, candidates []string) string { return suggest.Closest(s, candidates) }
