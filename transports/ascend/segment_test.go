package ascend

import (
	"errors"
	"strings"
	"testing"

	"github.com/kvconnect/kvconnect/plugins"
)

func TestParseSegmentName(t *testing.T) {
	tests := []struct {
		in   string
		host string
		port int
		npu  int
	}{
		{"10.0.0.1:15000:npu_3", "10.0.0.1", 15000, 3},
		{"127.0.0.1:1:npu_0", "127.0.0.1", 1, 0},
		{"prefill-0.cluster.local:65535:npu_15", "prefill-0.cluster.local", 65535, 15},
		{"node_7:15432:npu_7", "node_7", 15432, 7},
		{"localhost:8998:npu_2147483647", "localhost", 8998, 2147483647},
		{"[::1]:1234:npu_0", "::1", 1234, 0},
		{"[fd00::a:1]:15000:npu_8", "fd00::a:1", 15000, 8},
		{"[fe80::1%eth0]:15000:npu_1", "fe80::1%eth0", 15000, 1},
		{"[::ffff:10.0.0.1]:15000:npu_1", "::ffff:10.0.0.1", 15000, 1},
		{"10.0.0.1:015000:npu_03", "10.0.0.1", 15000, 3},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			host, port, npu, err := ParseSegmentName(tt.in)
			if err != nil {
				t.Fatalf("ParseSegmentName(%q): %v", tt.in, err)
			}
			if host != tt.host || port != tt.port || npu != tt.npu {
				t.Fatalf("ParseSegmentName(%q) = %q, %d, %d; want %q, %d, %d", tt.in, host, port, npu, tt.host, tt.port, tt.npu)
			}
		})
	}
}

func TestParseSegmentNameErrors(t *testing.T) {
	tests := []struct {
		in   string
		want string // the part of the message naming what is wrong
	}{
		{"", "empty"},
		{"10.0.0.1", "no port and no npu_N part"},
		{"10.0.0.1:15000", `missing the npu_N part`},
		{"10.0.0.1:15000:npu3", `last part "npu3" must be npu_N`},
		{"10.0.0.1:15000:gpu_3", `last part "gpu_3" must be npu_N`},
		{"10.0.0.1:15000:NPU_3", `last part "NPU_3" must be npu_N`},
		{"10.0.0.1:15000:npu_", `NPU id "" in "npu_" is empty`},
		{"10.0.0.1:15000:npu_-1", `NPU id "-1" in "npu_-1" is not a decimal number`},
		{"10.0.0.1:15000:npu_+1", `NPU id "+1" in "npu_+1" is not a decimal number`},
		{"10.0.0.1:15000:npu_x", `NPU id "x" in "npu_x" is not a decimal number`},
		{"10.0.0.1:15000:npu_2147483648", `is out of range`},
		{"10.0.0.1:15000:npu_99999999999999999999999", `is out of range`},
		{":npu_3", `no host:port before "npu_3"`},
		{"10.0.0.1:npu_3", `no port in "10.0.0.1"`},
		{"10.0.0.1::npu_3", `port "" is empty`},
		{"10.0.0.1:0:npu_3", `port "0" is 0`},
		{"10.0.0.1:65536:npu_3", `port "65536" is out of range`},
		{"10.0.0.1:-1:npu_3", `port "-1" is not a decimal number`},
		{"10.0.0.1:+80:npu_3", `port "+80" is not a decimal number`},
		{"10.0.0.1:http:npu_3", `port "http" is not a decimal number`},
		{":15000:npu_3", `host "" is empty`},
		{"::1:1234:npu_0", `IPv6 host in "::1:1234" must be in brackets`},
		{"fd00::1:15000:npu_0", `must be in brackets`},
		{"[10.0.0.1]:15000:npu_0", `host [10.0.0.1] is not an IPv6 address`},
		{"[node1]:15000:npu_0", `host [node1] is not an IPv6 address`},
		{"[fe80::1%eth 0]:15000:npu_0", `has zone "eth 0" with ' '`},
		{"[fe80::1%a/b]:15000:npu_0", `has zone "a/b" with '/'`},
		{"[::1:15000:npu_0", `host:port "[::1:15000"`},
		{"10.0.0.256:15000:npu_0", `host "10.0.0.256" is not a valid IPv4 address`},
		{"10.0.0:15000:npu_0", `host "10.0.0" is not a valid IPv4 address`},
		{"my host:15000:npu_0", `host "my host" contains ' '`},
		{"host/1:15000:npu_0", `contains '/'`},
		{"-node:15000:npu_0", `starts or ends with '-'`},
		{"node..x:15000:npu_0", `has an empty label`},
		{"node.:15000:npu_0", `has an empty label`},
		{strings.Repeat("a", 64) + ":15000:npu_0", `label longer than 63`},
		{strings.Repeat("a.", 127) + "a:15000:npu_0", `longer than 253`},
		{"10.0.0.1:15000:npu_3:npu_4", `IPv6 host in "10.0.0.1:15000:npu_3" must be in brackets`},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			host, port, npu, err := ParseSegmentName(tt.in)
			if err == nil {
				t.Fatalf("ParseSegmentName(%q) = %q, %d, %d; want an error", tt.in, host, port, npu)
			}
			if !errors.Is(err, plugins.ErrInvalidArgument) {
				t.Errorf("error does not wrap ErrInvalidArgument: %v", err)
			}
			msg := err.Error()
			for _, want := range []string{tt.want, "expected host:port:npu_N, e.g. 10.0.0.1:15000:npu_3", `segment name "` + tt.in + `"`} {
				if !strings.Contains(msg, want) {
					t.Errorf("error %q does not contain %q", msg, want)
				}
			}
		})
	}
}

func TestFormatSegmentName(t *testing.T) {
	tests := []struct {
		host      string
		port, npu int
		want      string
	}{
		{"10.0.0.1", 15000, 3, "10.0.0.1:15000:npu_3"},
		{"prefill-0", 1, 0, "prefill-0:1:npu_0"},
		{"::1", 1234, 0, "[::1]:1234:npu_0"},
		{"fe80::1%eth0", 15000, 7, "[fe80::1%eth0]:15000:npu_7"},
	}
	for _, tt := range tests {
		if got := FormatSegmentName(tt.host, tt.port, tt.npu); got != tt.want {
			t.Errorf("FormatSegmentName(%q, %d, %d) = %q; want %q", tt.host, tt.port, tt.npu, got, tt.want)
		}
		h, p, n, err := ParseSegmentName(tt.want)
		if err != nil || h != tt.host || p != tt.port || n != tt.npu {
			t.Errorf("ParseSegmentName(%q) = %q, %d, %d, %v; want %q, %d, %d", tt.want, h, p, n, err, tt.host, tt.port, tt.npu)
		}
	}
}

// FuzzParseSegmentName checks that the parser never panics, that every
// name it accepts round-trips through FormatSegmentName, and that what it
// rejects it rejects with ErrInvalidArgument and the expected form.
func FuzzParseSegmentName(f *testing.F) {
	for _, s := range []string{
		"10.0.0.1:15000:npu_3", "[::1]:1234:npu_0", "[fe80::1%eth0]:1:npu_1", "host:1:npu_0",
		"", ":", "::", "a:b:c", "[::1]:1234", "10.0.0.1:15000:npu_", "[]:1:npu_1", "[%]:1:npu_1",
		"10.0.0.1:15000:npu_3:npu_4", "1.2.3.4:65535:npu_2147483647",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		host, port, npu, err := ParseSegmentName(s)
		if err != nil {
			if !errors.Is(err, plugins.ErrInvalidArgument) || !strings.Contains(err.Error(), SegmentNameForm) {
				t.Fatalf("ParseSegmentName(%q): error without ErrInvalidArgument or the expected form: %v", s, err)
			}
			return
		}
		if port < 1 || port > 65535 || npu < 0 || npu > MaxNPUID || host == "" {
			t.Fatalf("ParseSegmentName(%q) = %q, %d, %d: out of range", s, host, port, npu)
		}
		name := FormatSegmentName(host, port, npu)
		h2, p2, n2, err := ParseSegmentName(name)
		if err != nil {
			t.Fatalf("ParseSegmentName(%q) accepted, but its formatted form %q is rejected: %v", s, name, err)
		}
		if h2 != host || p2 != port || n2 != npu {
			t.Fatalf("round trip %q -> %q: got %q, %d, %d; want %q, %d, %d", s, name, h2, p2, n2, host, port, npu)
		}
	})
}

// FuzzFormatSegmentName checks parse(format(x)) == x for every valid x, and
// that format never produces a name the parser accepts for invalid x.
func FuzzFormatSegmentName(f *testing.F) {
	f.Add("10.0.0.1", 15000, 3)
	f.Add("::1", 1, 0)
	f.Add("fe80::1%eth0", 65535, 7)
	f.Add("node-1.example", 8998, 0)
	f.Add("", 0, -1)
	f.Add("::%]", 65509, 11) // a zone with ']' formatted a name the parser cannot split
	f.Fuzz(func(t *testing.T, host string, port, npu int) {
		name := FormatSegmentName(host, port, npu)
		h, p, n, err := ParseSegmentName(name)
		hostOK := ValidHost(host) == nil || strings.Contains(host, ":") && validIPv6(host) == nil
		valid := hostOK && port >= 1 && port <= 65535 && npu >= 0 && npu <= MaxNPUID
		switch {
		case valid && err != nil:
			t.Fatalf("FormatSegmentName(%q, %d, %d) = %q, rejected: %v", host, port, npu, name, err)
		case valid && (h != host || p != port || n != npu):
			t.Fatalf("round trip %q: got %q, %d, %d; want %q, %d, %d", name, h, p, n, host, port, npu)
		case !valid && err == nil:
			t.Fatalf("FormatSegmentName(%q, %d, %d) = %q accepted as %q, %d, %d, but the input is not valid", host, port, npu, name, h, p, n)
		}
	})
}
