package connector

import (
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/kvconnect/kvconnect/plugins"
	"github.com/kvconnect/kvconnect/plugins/host"
)

// activeTransport is a transport that came up.
type activeTransport struct {
	name   string
	tr     plugins.Transport
	plugin *host.Plugin // nil when in-process
	info   plugins.Info
	res    plugins.InitResult

	crashed  error // guarded by Connector.mu
	restarts int   // how many times this transport's plugin was restarted
}

func (at *activeTransport) mode() string {
	if at.plugin != nil {
		return "plugin"
	}
	return "in-process"
}

// watchPlugin notices a plugin process that dies while the node runs.
func (c *Connector) watchPlugin(at *activeTransport) {
	defer c.wg.Done()
	<-at.plugin.Exited() // its fd channel ended: the process is going
	// How it ended, and the whole of its stderr, once it is reaped.
	ended := at.plugin.Ended(2 * time.Second)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return
	}
	if ended == "" {
		ended = "exited"
	}
	why := fmt.Sprintf("plugin process %s %s", at.plugin.Path(), ended)
	tail := at.plugin.StderrTail()
	if tail != "" {
		why += "; its stderr ends with:\n" + tail
	}
	at.crashed = fmt.Errorf("connector: transport %s: %s: %w", at.name, why, ErrTransportCrashed)
	c.observe().PluginCrashed(at.name)
	c.log.Error("transport plugin died; restarting it",
		zap.String("transport", at.name), zap.String("plugin", at.plugin.Path()), zap.String("ended", ended), zap.String("stderr_tail", tail))
	c.wg.Add(1)
	go c.restart(at)
	c.republish() // the transport is down until it restarts
}
