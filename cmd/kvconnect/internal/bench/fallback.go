package bench

import (
	"context"
	"errors"
	"time"

	"go.uber.org/zap"

	"github.com/kvconnect/kvconnect/connector"
	"github.com/kvconnect/kvconnect/errdefs"
	"github.com/kvconnect/kvconnect/plugins/host"
	"github.com/kvconnect/kvconnect/transports/names"
)

// timeFallback times connector.New with protocol rdma, fallback [tcp], and
// connector.New with protocol tcp, FallbackSamples times each.
func timeFallback(ctx context.Context, o *SuiteOptions, f *FallbackTiming) {
	cfg := withoutMetrics(o.Config)
	cfg.Protocol, cfg.Fallback, cfg.RPCPort = names.RDMA, []string{names.TCP}, 0
	f.Config = "protocol: rdma, fallback: [tcp] (plugin processes)"
	if p, _, err := host.FindPlugin(names.RDMA, cfg.PluginDir); err == nil {
		f.RDMAPlugin = p
	}
	plain := cfg
	plain.Protocol, plain.Fallback = names.TCP, []string{}
	for range o.FallbackSamples {
		start := time.Now()
		c, err := connector.New(ctx, cfg, connector.WithLogger(zap.NewNop()))
		took := time.Since(start)
		if err != nil {
			f.Errors = append(f.Errors, firstLine(err.Error()))
			continue
		}
		st := c.Status()
		c.Close()
		f.samples = append(f.samples, ms(took))
		f.EndedOn = append(f.EndedOn, st.Transport)
		for _, a := range st.Attempts {
			switch {
			case a.Transport == names.RDMA:
				f.rdma = append(f.rdma, ms(a.Duration))
				if a.Diagnosis != nil && f.FirstStep == "" {
					f.FirstStep, f.FirstCause = a.Diagnosis.Step, firstLine(a.Diagnosis.Cause)
					if errors.Is(a.Err, errdefs.ErrPluginNotFound) {
						f.FirstCause = host.BinaryPrefix + names.RDMA + " not found"
					}
				}
			case a.Transport == names.TCP && a.OK:
				f.tcp = append(f.tcp, ms(a.Duration))
			}
		}

		start = time.Now()
		c, err = connector.New(ctx, plain, connector.WithLogger(zap.NewNop()))
		took = time.Since(start)
		if err != nil {
			f.Errors = append(f.Errors, firstLine(err.Error()))
			continue
		}
		c.Close()
		f.plain = append(f.plain, ms(took))
	}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
