package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/kvconnect/kvconnect/config"
	"github.com/kvconnect/kvconnect/connector"
	"github.com/kvconnect/kvconnect/transports"
)

// topology probes every transport of the catalog with the configuration
// the environment gives (device_name overridden when set), as `kvconnect
// doctor --json` does: what would start here, and why not the rest.
func topology(defaults config.Config, deviceName string) (string, error) {
	base := defaults
	if deviceName != "" {
		base.DeviceName = deviceName
	}
	loaded, err := config.Load(config.Options{Base: &base})
	if err != nil {
		return "", codeErr(codeInvalidArgument, fmt.Errorf("kvconnect: local topology: %w", err))
	}
	type result struct {
		r []connector.ProbeResult
	}
	done := make(chan result, 1)
	go func() { // plugin processes start from a Go thread (see initialize)
		var out []connector.ProbeResult
		for _, name := range transports.Builtin().Names() {
			ctx, cancel := context.WithTimeout(context.Background(), loaded.Config.PluginStartTimeout+10*time.Second)
			out = append(out, connector.ProbeTransport(ctx, loaded.Config, name))
			cancel()
		}
		done <- result{out}
	}()
	r := <-done
	b, err := json.Marshal(struct {
		DeviceName string                  `json:"device_name"`
		Transports []connector.ProbeResult `json:"transports"`
	}{deviceName, r.r})
	if err != nil {
		return "", codeErr(codeInternal, err)
	}
	return string(b), nil
}

// rpcPort is the port of the node's session id; a node named by a
// segment name of its own (a metadata service) reports it in its status.
func rpcPort(st connector.Status) (int, error) {
	_, port, err := net.SplitHostPort(st.Session)
	if err == nil {
		if p, err := strconv.Atoi(port); err == nil {
			return p, nil
		}
	}
	if st.RPCPort != 0 {
		return st.RPCPort, nil
	}
	return 0, codeErr(codeInternal, fmt.Errorf("kvconnect: no RPC port in session %q", st.Session))
}
