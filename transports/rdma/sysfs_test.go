package rdma

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestParseState(t *testing.T) {
	for _, c := range []struct {
		in   string
		want State
		err  string
	}{
		{"4: ACTIVE\n", State{4, "ACTIVE"}, ""},
		{"1: DOWN", State{1, "DOWN"}, ""},
		{"  5:  LinkUp  \n", State{5, "LinkUp"}, ""},
		{"4: PortConfigurationTraining", State{4, "PortConfigurationTraining"}, ""},
		{"7: Phy Test", State{7, "Phy Test"}, ""},
		{"ACTIVE", State{}, `"ACTIVE" is not "<number>: <name>"`},
		{"x: ACTIVE", State{}, `"x" is not a state number`},
		{"-1: DOWN", State{}, "not a state number"},
		{"256: DOWN", State{}, "not a state number"},
		{"4:", State{}, "has no state name"},
		{"", State{}, "is not"},
	} {
		got, err := parseState(c.in)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("parseState(%q) error = %v, want %q", c.in, err, c.err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("parseState(%q) = %+v, %v; want %+v", c.in, got, err, c.want)
		}
	}
}

func TestParseGID(t *testing.T) {
	for _, c := range []struct {
		in   string
		want string
		err  string
	}{
		{"fe80:0000:0000:0000:0c42:a103:00b4:5e20\n", "fe80::c42:a103:b4:5e20", ""},
		{"0000:0000:0000:0000:0000:ffff:0a00:0a07", "::ffff:10.0.10.7", ""},
		{"0:0:0:0:0:ffff:a00:a07", "::ffff:10.0.10.7", ""},
		{"0000:0000:0000:0000:0000:0000:0000:0000", "::", ""},
		{"FE80:0000:0000:0000:0C42:A103:00B4:5E20", "fe80::c42:a103:b4:5e20", ""},
		{"fe80::1", "", "want 8 colon-separated groups"},
		{"fe80:0000:0000:0000:0c42:a103:00b4", "", "want 8"},
		{"fe80:0000:0000:0000:0c42:a103:00b4:5e20:0000", "", "want 8"},
		{"fe80:0000:0000:0000:0c42:a103:00b4:5e2g", "", `group 8 is "5e2g"`},
		{"fe80:0000:0000:0000:0c42:a103:00b4:15e20", "", `group 8 is "15e20"`},
		{"fe80:0000:0000::0c42:a103:00b4:5e20", "", `group 4 is ""`},
		{"+e80:0000:0000:0000:0c42:a103:00b4:5e20", "", "group 1"},
		{"", "", "want 8"},
	} {
		got, err := parseGID(c.in)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("parseGID(%q) error = %v, want %q", c.in, err, c.err)
			}
			continue
		}
		if err != nil || got.String() != c.want {
			t.Errorf("parseGID(%q) = %v, %v; want %s", c.in, got, err, c.want)
		}
	}
}

func TestParseGIDType(t *testing.T) {
	for in, want := range map[string]string{
		"IB/RoCE v1\n": GIDTypeIBRoCEv1,
		"RoCE v2\n":    GIDTypeRoCEv2,
		"roce V2":      GIDTypeRoCEv2,
		" something ":  "something",
		"":             "",
	} {
		if got := parseGIDType(in); got != want {
			t.Errorf("parseGIDType(%q) = %q, want %q", in, got, want)
		}
	}
	if got := parseGIDType(strings.Repeat("x", 1000)); len(got) != 64 {
		t.Errorf("long type not cut: %d bytes", len(got))
	}
}

func TestParseCapEff(t *testing.T) {
	status := "Name:\tx\nCapInh:\t0000000000000000\nCapPrm:\t000001fffeffffff\nCapEff:\t%s\nCapBnd:\t000001fffeffffff\n"
	for _, c := range []struct {
		capEff string
		want   bool
		err    bool
	}{
		{"000001fffeffffff", true, false},  // root with every capability
		{"00000000a80425fb", false, false}, // docker's default set: no CAP_IPC_LOCK
		{"00000000a80465fb", true, false},  // docker --cap-add IPC_LOCK
		{"0000000000000000", false, false},
		{"zz", false, true},
	} {
		got, err := parseCapEff(strings.Replace(status, "%s", c.capEff, 1))
		if (err != nil) != c.err || got != c.want {
			t.Errorf("CapEff %s: %v, %v; want %v (error %v)", c.capEff, got, err, c.want, c.err)
		}
	}
	if _, err := parseCapEff("Name:\tx\n"); err == nil {
		t.Error("no CapEff line: no error")
	}
}

func TestParseDeviceNames(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []string
		err  string
	}{
		{"", nil, ""},
		{"  ", nil, ""},
		{"mlx5_0", []string{"mlx5_0"}, ""},
		{"mlx5_0,mlx5_1", []string{"mlx5_0", "mlx5_1"}, ""},
		{" mlx5_0 , mlx5_1 ,, mlx5_0", []string{"mlx5_0", "mlx5_1"}, ""},
		{`{"0":"mlx5_0","1":"mlx5_1"}`, nil, "per-device map"},
		{"/etc/kvconnect/devices.json", nil, "per-device map"},
		{"mlx5_0,../../etc", nil, `"../../etc" is not an RDMA device name`},
		{"mlx5 0", nil, "is not an RDMA device name"},
	} {
		got, err := parseDeviceNames(c.in)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("parseDeviceNames(%q) error = %v, want %q", c.in, err, c.err)
			}
			continue
		}
		if err != nil || !slices.Equal(got, c.want) {
			t.Errorf("parseDeviceNames(%q) = %q, %v; want %q", c.in, got, err, c.want)
		}
	}
}

func TestReadPortFixture(t *testing.T) {
	sys, _ := fixture(t, "roce-healthy")
	p := readPort(filepath.Join(sys, "class", "infiniband", "mlx5_0", "ports", "1"), 1)
	if len(p.Errors) > 0 {
		t.Fatalf("errors: %v", p.Errors)
	}
	if p.State != (State{4, "ACTIVE"}) || p.PhysState != (State{5, "LinkUp"}) || p.LinkLayer != LinkEthernet || p.Rate != "100 Gb/sec (2X HDR)" || p.GIDTableLen != 16 {
		t.Errorf("port = %+v", p)
	}
	want := []GID{
		{0, netip.MustParseAddr("fe80::ba3f:d2ff:fea1:7c5e"), GIDTypeIBRoCEv1, "ens1f0np0"},
		{1, netip.MustParseAddr("fe80::ba3f:d2ff:fea1:7c5e"), GIDTypeRoCEv2, "ens1f0np0"},
		{2, netip.MustParseAddr("::ffff:10.0.10.7"), GIDTypeIBRoCEv1, "ens1f0np0"},
		{3, netip.MustParseAddr("::ffff:10.0.10.7"), GIDTypeRoCEv2, "ens1f0np0"},
	}
	if !slices.Equal(p.GIDs, want) {
		t.Errorf("gids = %v\nwant %v", p.GIDs, want)
	}
}

func TestPickGID(t *testing.T) {
	v1 := GID{Index: 0, Addr: netip.MustParseAddr("fe80::1"), Type: GIDTypeIBRoCEv1}
	v2ll := GID{Index: 1, Addr: netip.MustParseAddr("fe80::1"), Type: GIDTypeRoCEv2}
	v2v6 := GID{Index: 2, Addr: netip.MustParseAddr("2001:db8::7"), Type: GIDTypeRoCEv2}
	v2v4 := GID{Index: 5, Addr: netip.MustParseAddr("::ffff:10.0.0.7"), Type: GIDTypeRoCEv2}
	untyped := GID{Index: 0, Addr: netip.MustParseAddr("fe80::1")}
	for _, c := range []struct {
		name string
		ll   string
		gids []GID
		want int
		ok   bool
	}{
		{"roce prefers v2 ipv4", LinkEthernet, []GID{v1, v2ll, v2v6, v2v4}, 5, true},
		{"roce v2 without ipv4", LinkEthernet, []GID{v1, v2ll, v2v6}, 1, true},
		{"roce without types", LinkEthernet, []GID{untyped}, 0, true},
		{"ib first set", LinkInfiniBand, []GID{v1, v2v4}, 0, true},
		{"empty", LinkEthernet, nil, -1, false},
	} {
		p := Port{LinkLayer: c.ll, GIDs: c.gids}
		g, ok := p.pickGID(-1)
		if ok != c.ok || (ok && g.Index != c.want) {
			t.Errorf("%s: got %v %v, want %d %v", c.name, g, ok, c.want, c.ok)
		}
	}
	p := Port{LinkLayer: LinkEthernet, GIDs: []GID{v1, v2v4}}
	if g, ok := p.pickGID(0); !ok || g.Index != 0 {
		t.Errorf("explicit 0: %v %v", g, ok)
	}
	if _, ok := p.pickGID(3); ok {
		t.Error("explicit empty index 3 accepted")
	}
}

// writePort writes a port directory with the given attribute contents.
func writePort(t testing.TB, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestReadPortOddContents(t *testing.T) {
	dir := t.TempDir()
	writePort(t, dir, map[string]string{
		"state":              "ACTIVE but not as the kernel prints it",
		"phys_state":         "\x00\xff",
		"link_layer":         strings.Repeat("E", 3*maxAttrSize),
		"gids/0":             "fe80::1",
		"gids/1":             "zzzz:0000:0000:0000:0000:0000:0000:0001",
		"gids/2":             "fe80:0000:0000:0000:0000:0000:0000:0002",
		"gids/007":           "fe80:0000:0000:0000:0000:0000:0000:0007",
		"gids/abc":           "fe80:0000:0000:0000:0000:0000:0000:0009",
		"gids/99999/x":       "a directory where a GID should be",
		"gid_attrs/types/2":  "RoCE v3",
		"gid_attrs/ndevs/2":  strings.Repeat("n", 100),
		"gid_attrs/types/99": "RoCE v2",
	})
	p := readPort(dir, 1)
	if p.Active() || p.State != (State{}) {
		t.Errorf("odd state parsed as %+v", p.State)
	}
	if len(p.LinkLayer) != maxAttrSize {
		t.Errorf("link_layer read %d bytes, want the %d-byte cap", len(p.LinkLayer), maxAttrSize)
	}
	if len(p.GIDs) != 1 || p.GIDs[0].Index != 2 || p.GIDs[0].Type != "RoCE v3" || p.GIDs[0].NetDev != "" {
		t.Errorf("gids = %+v", p.GIDs)
	}
	joined := strings.Join(p.Errors, "\n")
	for _, want := range []string{"state: \"ACTIVE but not", "gids/0: \"fe80::1\" is not a GID", `gids/1: "zzzz:`, "gids/99999"} {
		if !strings.Contains(joined, want) {
			t.Errorf("errors lack %q:\n%s", want, joined)
		}
	}
	// A port directory that is not there at all.
	p = readPort(filepath.Join(dir, "missing"), 2)
	if p.Active() || len(p.Errors) == 0 {
		t.Errorf("missing port: %+v", p)
	}
}

func FuzzParseState(f *testing.F) {
	for _, s := range []string{"4: ACTIVE\n", "1: DOWN\n", "5: LinkUp\n", "2: INIT", "3: Disabled", ":", "4:", "x: y", "\xff: \x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		st, err := parseState(s)
		if err == nil {
			if st.Name == "" || st.Code < 0 || st.Code > 255 {
				t.Fatalf("parseState(%q) = %+v without error", s, st)
			}
			_ = st.String()
		}
	})
}

func FuzzParseGID(f *testing.F) {
	for _, s := range []string{
		"fe80:0000:0000:0000:0c42:a103:00b4:5e20\n",
		"0000:0000:0000:0000:0000:ffff:0a00:0a07",
		"0000:0000:0000:0000:0000:0000:0000:0000",
		"fe80::1", ":::::::", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		a, err := parseGID(s)
		if err != nil {
			return
		}
		if !a.Is6() {
			t.Fatalf("parseGID(%q) = %v, not IPv6", s, a)
		}
		// What the kernel prints for the parsed GID parses back to it.
		b := a.As16()
		var groups []string
		for i := 0; i < 16; i += 2 {
			groups = append(groups, fmt.Sprintf("%02x%02x", b[i], b[i+1]))
		}
		back, err := parseGID(strings.Join(groups, ":"))
		if err != nil || back != a {
			t.Fatalf("round trip of %q: %v, %v", s, back, err)
		}
		_ = parseGIDType(s)
	})
}

// FuzzReadPort writes arbitrary attribute contents into a port directory
// and runs the reader, the GID choice and the diagnosis texts over it.
func FuzzReadPort(f *testing.F) {
	f.Add("4: ACTIVE\n", "5: LinkUp\n", "Ethernet\n", "0000:0000:0000:0000:0000:ffff:0a00:0a07\n", "RoCE v2\n", int8(-1))
	f.Add("1: DOWN\n", "3: Disabled\n", "InfiniBand\n", "fe80:0000:0000:0000:0c42:a103:00b4:5e20\n", "IB/RoCE v1\n", int8(0))
	f.Add("", "", "", "", "", int8(5))
	f.Fuzz(func(t *testing.T, state, phys, ll, gid, typ string, want int8) {
		dir := t.TempDir()
		writePort(t, dir, map[string]string{
			"state": state, "phys_state": phys, "link_layer": ll,
			"gids/0": gid, "gids/1": gid, "gid_attrs/types/0": typ, "gid_attrs/ndevs/0": typ,
		})
		p := readPort(dir, 1)
		o := DefaultOptions()
		o.GIDIndex = max(int(want), -1)
		d := &Device{Name: "mlx5_0", Path: dir, Ports: []Port{p}, NetDevs: []string{"eth0"}}
		r := &Report{Options: o, Devices: []Device{*d}}
		if _, ok := p.pickGID(o.GIDIndex); !ok {
			_ = diagNoGID(o, d, &p)
		}
		if !p.Active() {
			_ = diagPortNotActive(r, d, &p)
		}
		_ = r.String()
	})
}
