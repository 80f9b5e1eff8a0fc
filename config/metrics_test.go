package config

import (
	"errors"
	"strings"
	"testing"
)

// TestMetricsAddress: metrics_address takes host:port, :port or a port,
// the host defaulting to bind_address; anything else is a problem naming
// the key, the value, its source and what is allowed.
func TestMetricsAddress(t *testing.T) {
	for _, tc := range []struct {
		addr, bind, want string
	}{
		{"", "", ""},
		{"127.0.0.1:9464", "", "127.0.0.1:9464"},
		{"127.0.0.1:0", "10.0.0.5", "127.0.0.1:0"},
		{":9464", "", ":9464"},
		{":9464", "10.0.0.5", "10.0.0.5:9464"},
		{"9464", "10.0.0.5", "10.0.0.5:9464"},
		{"[::1]:9464", "", "[::1]:9464"},
		{":9464", "::1", "[::1]:9464"},
	} {
		got, err := Config{MetricsAddress: tc.addr, BindAddress: tc.bind}.MetricsListenAddress()
		if err != nil || got != tc.want {
			t.Errorf("metrics_address %q, bind_address %q: %q, %v; want %q", tc.addr, tc.bind, got, err, tc.want)
		}
	}
	for _, bad := range []string{"localhost", "host:", ":99999", "1.2.3.4:http", "a:b:c", "-1"} {
		_, ps := loadErr(t, Options{Environ: []string{"KVCONNECT_METRICS_ADDRESS=" + bad}})
		p := findProblem(ps, "metrics_address")
		if p == nil || p.Value != bad || p.Source != "env KVCONNECT_METRICS_ADDRESS" || !strings.Contains(p.Allowed, "host:port") || !errors.Is(p, ErrInvalid) {
			t.Errorf("metrics_address %q: problems %v", bad, ps)
		}
		if _, err := (Config{MetricsAddress: bad}).MetricsListenAddress(); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "metrics_address") {
			t.Errorf("MetricsListenAddress(%q): %v, want an error naming metrics_address", bad, err)
		}
	}
	l := mustLoad(t, Options{Flags: flags(t, "--metrics-address", ":0", "--metrics-peer-labels", "true")})
	if l.Config.MetricsAddress != ":0" || !l.Config.MetricsPeerLabels || l.Source("metrics_address") != "flag --metrics-address" {
		t.Errorf("flags: %+v from %s", l.Config, l.Source("metrics_address"))
	}
	if err := (Config{MetricsAddress: "nope"}).Validate(); findProblem(Problems(err), "metrics_address") == nil {
		t.Errorf("Validate of metrics_address nope: %v", err)
	}
}
