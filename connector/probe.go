package connector

import (
	"context"
	"time"

	"github.com/kvconnect/kvconnect/plugins/host"
)

// ProbeResult is what ProbeTransport learned about one transport.
type ProbeResult struct {
	Transport string        `json:"transport"`
	Available bool          `json:"available"`
	Mode      string        `json:"mode,omitempty"`    // plugin or in-process
	Plugin    string        `json:"plugin,omitempty"`  // binary path
	Version   string        `json:"version,omitempty"` // the transport's own version
	Summary   string        `json:"summary,omitempty"` // its endpoint when up
	Duration  time.Duration `json:"duration_ns"`
	Err       error         `json:"-"`
	Diagnosis *Diagnosis    `json:"diagnosis,omitempty"`
}

// ProbeTransport brings transport name up the way New would (plugin
// launch, handshake, Init with cfg's settings and options), records the
// outcome, and closes it again. It is what `kvconnect doctor` runs.
func ProbeTransport(ctx context.Context, cfg Config, name string, opts ...Option) ProbeResult {
	o := newOptions(opts)
	c := &Connector{cfg: cfg.WithDefaults(), opts: o, log: o.log}
	start := time.Now()
	at, err := c.startTransport(ctx, name)
	r := ProbeResult{Transport: name, Duration: time.Since(start), Err: err, Diagnosis: diagnosisOf(err)}
	if path, _, ferr := host.FindPlugin(name, cfg.PluginDir); ferr == nil {
		r.Plugin = path
	}
	if err != nil {
		return r
	}
	r.Available, r.Mode, r.Version, r.Summary = true, at.mode(), at.info.Version, at.res.Summary
	if at.plugin != nil {
		r.Plugin = at.plugin.Path()
	}
	closeBounded(ctx, at.tr)
	return r
}
