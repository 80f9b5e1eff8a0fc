package connector

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/kvconnect/kvconnect/errdefs"
	"github.com/kvconnect/kvconnect/plugins"
	"github.com/kvconnect/kvconnect/plugins/host"
	"github.com/kvconnect/kvconnect/transports"
)

// Chain is the ordered list of transports New tries for cfg, with the
// builtin catalog's default chains: protocol, then each fallback entry,
// each once. A nil cfg.Fallback means the protocol's default chain (tcp
// for a protocol the catalog does not know); an empty one is strict mode.
// It is transports.Builtin().Chain with cfg's defaults filled in.
func Chain(cfg Config) []string {
	cfg = cfg.WithDefaults()
	return transports.Builtin().Chain(cfg.Protocol, cfg.Fallback)
}

// Attempt is one try at bringing a transport up.
type Attempt struct {
	Transport string        `json:"transport"`
	OK        bool          `json:"ok"`
	Duration  time.Duration `json:"duration_ns"`
	// Err is the diagnosis of a failed attempt (an *plugins.InitError).
	Err error `json:"-"`
	// Diagnosis is Err's fields, for JSON and people.
	Diagnosis *Diagnosis `json:"diagnosis,omitempty"`
}

// Diagnosis is the serialisable form of a *plugins.InitError.
type Diagnosis struct {
	Step       string   `json:"step"`
	NativeCode int64    `json:"native_code,omitempty"`
	NativeName string   `json:"native_name,omitempty"`
	Cause      string   `json:"cause"`
	Hints      []string `json:"hints,omitempty"`
	Kind       string   `json:"kind,omitempty"` // sentinel kind, e.g. "unavailable"
	Message    string   `json:"message"`
}

func diagnosisOf(err error) *Diagnosis {
	if err == nil {
		return nil
	}
	d := &Diagnosis{Message: err.Error(), Kind: errdefs.Kind(err)}
	var ie *plugins.InitError
	if errors.As(err, &ie) {
		d.Step, d.NativeCode, d.NativeName, d.Cause, d.Hints = ie.Step, ie.NativeCode, ie.NativeName, ie.Cause, ie.Hints
	} else {
		d.Cause = err.Error()
	}
	return d
}

// ChainError is returned by New when no transport of the chain came up.
// It lists every attempt; errors.Is/As look into each.
type ChainError struct {
	Attempts []Attempt
	Strict   bool // fallback: [] was configured
	// Untried lists the transports of the chain after the last attempt,
	// which its failure stopped (a configuration mistake, which falling
	// back would hide, or the start canceled).
	Untried []string
}

func (e *ChainError) Error() string {
	var b strings.Builder
	names := make([]string, len(e.Attempts))
	for i, a := range e.Attempts {
		names[i] = a.Transport
	}
	switch {
	case e.Strict:
		fmt.Fprintf(&b, "connector: transport %s failed to initialise and fallback is disabled (fallback: [])", names[0])
	case len(e.Untried) > 0:
		fmt.Fprintf(&b, "connector: the fallback chain stopped at %s: its failure is a mistake to fix (or the start was canceled), not a reason to run on another transport; not tried: %s",
			names[len(names)-1], strings.Join(e.Untried, ", "))
	default:
		fmt.Fprintf(&b, "connector: no transport could start (tried %s)", strings.Join(names, ", "))
	}
	for _, a := range e.Attempts {
		fmt.Fprintf(&b, "\n  - %s: %v", a.Transport, a.Err)
		var ie *plugins.InitError
		if errors.As(a.Err, &ie) {
			for _, h := range ie.Hints {
				fmt.Fprintf(&b, "\n      hint: %s", h)
			}
		}
	}
	return b.String()
}

// Unwrap gives errors.Is/As every attempt's error.
func (e *ChainError) Unwrap() []error {
	out := make([]error, 0, len(e.Attempts))
	for _, a := range e.Attempts {
		out = append(out, a.Err)
	}
	return out
}

// fallsBack reports whether a failed attempt lets the chain move on: the
// transport cannot run here (or its plugin cannot). A configuration
// mistake (ErrInvalidArgument) stops the chain: falling back would hide it.
func fallsBack(err error) bool {
	if errors.Is(err, ErrInvalidArgument) && !errors.Is(err, ErrUnavailable) {
		return false
	}
	return true
}

// asInitError makes every failure a diagnosis with a transport and a step.
func asInitError(name string, p *host.Plugin, err error) error {
	var ie *plugins.InitError
	if errors.As(err, &ie) {
		if ie.Transport == "" {
			ie.Transport = name
		}
		return err
	}
	step, cause := "init", err.Error()
	if errors.Is(err, ErrTransportCrashed) {
		step = errdefs.StepInitPluginCrash
		if p != nil {
			if tail := p.StderrTail(); tail != "" {
				cause += "; its stderr ends with:\n" + tail
			}
		}
	}
	return &plugins.InitError{Transport: name, Step: step, Cause: cause, Err: err}
}

// initTimeout bounds one transport's Init (device probing, library
// loading, binding), so a transport wedged in a native library cannot hold
// the chain: its attempt fails and the chain moves on.
const initTimeout = 60 * time.Second

// startTransport launches (or builds, in-process) transport name and
// initialises it.
func (c *Connector) startTransport(ctx context.Context, name string) (*activeTransport, error) {
	at := &activeTransport{name: name}
	var tr plugins.Transport
	if c.opts.inProcess[name] {
		reg, ok := c.opts.catalog.Lookup(name)
		if !ok || reg.New == nil {
			return nil, &errdefs.InitError{Transport: name, Step: errdefs.StepConfigure,
				Cause: fmt.Sprintf("asked to run %s in-process, but the transport catalog has no in-process factory for it", name),
				Hints: []string{"add one with transports.Catalog.WithFactory and connector.WithCatalog, or let it run as a plugin"},
				Err:   ErrInvalidArgument}
		}
		tr = reg.New()
	} else {
		lc := host.LaunchConfig{Name: name, PluginDir: c.cfg.PluginDir, Logger: c.log, StartTimeout: c.cfg.PluginStartTimeout}
		if c.opts.launchHook != nil {
			c.opts.launchHook(&lc)
		}
		p, err := host.Launch(ctx, lc)
		if err != nil {
			return nil, asInitError(name, nil, err)
		}
		c.observe().PluginStarted(name)
		at.plugin = p
		tr = p
	}
	at.tr = tr
	info, err := tr.Info(ctx)
	if err == nil && info.Name != name {
		err = &errdefs.InitError{Transport: name, Step: errdefs.StepHandshake,
			Cause: fmt.Sprintf("the plugin for %s says it is transport %q", name, info.Name),
			Hints: []string{fmt.Sprintf("check that %s%s is the right binary", host.BinaryPrefix, name)},
			Err:   fmt.Errorf("%w: %w", ErrUnavailable, ErrProtocol)}
	}
	if err == nil {
		var optsJSON []byte
		o := c.cfg.Transports[name]
		if _, set := o["mooncake"]; name == "tcp" && !c.mooncake() && !set {
			// mooncake_interop: false turns the tcp transport's Mooncake
			// data protocol off too.
			o = maps.Clone(o)
			if o == nil {
				o = map[string]any{}
			}
			o["mooncake"] = false
		}
		if len(o) > 0 {
			if optsJSON, err = json.Marshal(o); err != nil {
				err = fmt.Errorf("connector: transports.%s: %v: %w", name, err, ErrInvalidArgument)
			}
		}
		if err == nil {
			ictx, cancel := context.WithTimeout(ctx, initTimeout)
			at.res, err = tr.Init(ictx, plugins.InitRequest{
				Hostname: c.cfg.Hostname, Metadata: c.cfg.Metadata, Protocol: c.cfg.Protocol,
				DeviceName: c.cfg.DeviceName, BindAddress: c.cfg.BindAddress, Options: optsJSON, Logger: c.log.Named(name),
				Auth: c.auth,
			})
			cancel()
		}
	}
	if err == nil {
		// Capabilities can depend on what Init selected (a ucx transport
		// on shared-memory lanes only reaches peers on this host).
		info, err = tr.Info(ctx)
	}
	if err != nil {
		err = asInitError(name, at.plugin, err)
		closeBounded(ctx, tr)
		return nil, err
	}
	at.info = info
	if c.auth != nil && info.Capabilities&plugins.CapAuthenticates == 0 {
		c.log.Warn("authentication is on, but this transport does not authenticate its data connections; its peers still learn its memory keys only over the authenticated handshake (docs/SECURITY.md)",
			zap.String("transport", name))
	}
	return at, nil
}

// startChain brings up the first transport of the chain that works, then,
// unless it is tcp already or keep_tcp is off, tcp as well so peers that
// fell back can still reach this node.
func (c *Connector) startChain(ctx context.Context) error {
	chain := c.opts.catalog.Chain(c.cfg.Protocol, c.cfg.Fallback)
	strict := c.cfg.Fallback != nil && len(c.cfg.Fallback) == 0
	var untried []string
	for i, name := range chain {
		start := time.Now()
		at, err := c.startTransport(ctx, name)
		a := Attempt{Transport: name, OK: err == nil, Duration: time.Since(start), Err: err, Diagnosis: diagnosisOf(err)}
		c.attempts = append(c.attempts, a)
		if err == nil {
			c.transports = append(c.transports, at)
			if i > 0 {
				c.log.Warn("kvconnect is running on a fallback transport", zap.String("transport", name),
					zap.String("wanted", chain[0]), zap.Int("attempt", i+1))
			}
			break
		}
		stop := !fallsBack(err) || ctx.Err() != nil
		next := ""
		if i+1 < len(chain) && !stop {
			next = chain[i+1]
		}
		c.logAttempt(a, next)
		if stop {
			untried = chain[i+1:]
			break
		}
	}
	if len(c.transports) == 0 {
		return &ChainError{Attempts: append([]Attempt(nil), c.attempts...), Strict: strict, Untried: untried}
	}
	// Strict mode (fallback: []) means "this transport or nothing": no tcp
	// beside it either.
	if c.transports[0].name != "tcp" && c.opts.keepTCP && !strict {
		if c.triedTCP() {
			// Each transport is tried once: tcp failed above, its reason
			// logged and in Status().Attempts.
			c.log.Warn("tcp is not kept up beside "+c.transports[0].name+" for peers that fell back: it failed to start earlier in the chain",
				zap.String("transport", c.transports[0].name))
		} else if at, err := c.startTransport(ctx, "tcp"); err != nil {
			c.log.Warn("could not also keep tcp up for peers that fell back", zap.Error(err))
		} else {
			c.transports = append(c.transports, at)
		}
	}
	for _, at := range c.transports {
		if at.plugin != nil {
			c.wg.Add(1)
			go c.watchPlugin(at)
		}
	}
	return nil
}

// triedTCP says whether the chain tried tcp (and so it failed).
func (c *Connector) triedTCP() bool {
	for _, a := range c.attempts {
		if a.Transport == "tcp" {
			return true
		}
	}
	return false
}

// logAttempt writes the one warn line a failed attempt gets.
func (c *Connector) logAttempt(a Attempt, next string) {
	fields := []zap.Field{zap.String("transport", a.Transport), zap.Duration("took", a.Duration)}
	if d := a.Diagnosis; d != nil {
		fields = append(fields, zap.String("step", d.Step), zap.String("cause", d.Cause))
		if d.NativeCode != 0 {
			fields = append(fields, zap.Int64("native_code", d.NativeCode))
		}
		if d.NativeName != "" {
			fields = append(fields, zap.String("native_name", d.NativeName))
		}
		if len(d.Hints) > 0 {
			fields = append(fields, zap.Strings("hints", d.Hints))
		}
		if d.Kind != "" {
			fields = append(fields, zap.String("kind", d.Kind))
		}
	}
	if next != "" {
		c.log.Warn("transport failed to initialise; falling back to "+next, append(fields, zap.String("fallback", next))...)
	} else {
		c.log.Warn("transport failed to initialise", fields...)
	}
}
