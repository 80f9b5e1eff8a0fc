package main

import "testing"

func TestParseHostname(t *testing.T) {
	for _, tc := range []struct {
		in        string
		host      string
		port, npu int
		wantErr   bool
	}{
		{"", "", 0, -1, false},
		{"10.0.0.1", "10.0.0.1", 0, -1, false},
		{"10.0.0.1:12345", "10.0.0.1", 12345, -1, false},
		{"node-7.cluster", "node-7.cluster", 0, -1, false},
		{"[fd00::1]:99", "fd00::1", 99, -1, false},
		{"fd00::1", "fd00::1", 0, -1, false},
		{"10.0.0.1:15000:npu_3", "10.0.0.1", 15000, 3, false},
		{"10.0.0.1:x", "", 0, -1, true},
		{"10.0.0.1:99999", "", 0, -1, true},
		{":80", "", 0, -1, true},
		{"not a host!", "", 0, -1, true},
		{"10.0.0.1:1:npu_x", "", 0, -1, true},
		{"http://x", "", 0, -1, true},
	} {
		h, err := parseHostname(tc.in)
		if (err != nil) != tc.wantErr {
			t.Errorf("%q: err %v, want error %v", tc.in, err, tc.wantErr)
			continue
		}
		if err == nil && (h.host != tc.host || h.port != tc.port || h.npu != tc.npu) {
			t.Errorf("%q: got %+v, want host %q port %d npu %d", tc.in, h, tc.host, tc.port, tc.npu)
		}
	}
}

func TestConnString(t *testing.T) {
	for _, tc := range []struct{ server, typ, want string }{
		{"", "", "P2PHANDSHAKE"},
		{"P2PHANDSHAKE", "etcd", "P2PHANDSHAKE"},
		{"10.0.0.1:2379", "", "etcd://10.0.0.1:2379"},
		{"10.0.0.1:2379", "etcd", "etcd://10.0.0.1:2379"},
		{"10.0.0.1:8080/metadata", "http", "http://10.0.0.1:8080/metadata"},
		{"10.0.0.1:6379", "redis", "redis://10.0.0.1:6379"},
		{"http://h:1/metadata", "etcd", "http://h:1/metadata"},
	} {
		got, err := connString(tc.server, tc.typ)
		if err != nil || got != tc.want {
			t.Errorf("connString(%q, %q) = %q, %v; want %q", tc.server, tc.typ, got, err, tc.want)
		}
	}
	if _, err := connString("h:1", "zookeeper"); err == nil {
		t.Error("an unknown metadata type was accepted")
	}
}

func FuzzParseHostname(f *testing.F) {
	for _, s := range []string{"10.0.0.1", "10.0.0.1:1", "[::1]:2:npu_0", "a:b:c", "::::"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		h, err := parseHostname(s)
		if err == nil && (h.port < 0 || h.port > 65535) {
			t.Fatalf("%q: port %d accepted", s, h.port)
		}
	})
}
