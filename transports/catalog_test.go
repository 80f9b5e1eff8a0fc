package transports_test

import (
	"slices"
	"testing"

	"github.com/kvconnect/kvconnect/plugins"
	"github.com/kvconnect/kvconnect/transports"
	"github.com/kvconnect/kvconnect/transports/names"
	"github.com/kvconnect/kvconnect/transports/tcp"
)

func TestBuiltinChains(t *testing.T) {
	c := transports.Builtin()
	for _, tc := range []struct {
		protocol string
		fallback []string
		want     []string
	}{
		{"rdma", nil, []string{"rdma", "tcp"}},
		{"tcp", nil, []string{"tcp"}},
		{"acme", nil, []string{"acme", "tcp"}}, // a third party's
		{"rdma", []string{}, []string{"rdma"}}, // strict
		{"rdma", []string{"ucx", "rdma", "tcp", "ucx"}, []string{"rdma", "ucx", "tcp"}},
	} {
		if got := c.Chain(tc.protocol, tc.fallback); !slices.Equal(got, tc.want) {
			t.Errorf("Chain(%s, %v) = %v, want %v", tc.protocol, tc.fallback, got, tc.want)
		}
	}
	if got := c.Names(); !slices.Equal(got, []string{"rdma", "ucx", "efa", "ascend", "tcp"}) || !slices.Equal(got, names.Builtin()) {
		t.Errorf("Names = %v, names.Builtin() = %v", got, names.Builtin())
	}
	for _, r := range c.Registrations() {
		if r.New != nil {
			t.Errorf("the builtin catalog links %s in-process (the connector registers tcp's factory where it runs it)", r.Name)
		}
	}
	if tcp.Name != names.TCP {
		t.Fatalf("tcp.Name = %q", tcp.Name)
	}
}

func TestCatalogIsImmutable(t *testing.T) {
	c := transports.Builtin()
	fb := c.Fallback("rdma")
	fb[0] = "mutated"
	if got := c.Fallback("rdma"); got[0] != "tcp" {
		t.Fatalf("a caller changed the catalog: %v", got)
	}
	var made bool
	d := c.WithFactory("acme", func() plugins.Transport { made = true; return nil })
	if _, ok := c.Lookup("acme"); ok {
		t.Fatal("WithFactory changed the original catalog")
	}
	r, ok := d.Lookup("acme")
	if !ok || r.New == nil || !slices.Equal(r.Fallback, []string{"tcp"}) {
		t.Fatalf("added registration: %+v", r)
	}
	r.New()
	if !made {
		t.Fatal("factory not kept")
	}
	u := c.WithFactory("ucx", func() plugins.Transport { return nil })
	if r, _ := u.Lookup("ucx"); r.New == nil || r.Needs == "" || !slices.Equal(u.Names(), c.Names()) {
		t.Fatalf("WithFactory lost ucx's registration or its place: %+v %v", r, u.Names())
	}
}
