package metadata

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/kvconnect/kvconnect/errdefs"
)

func TestParse(t *testing.T) {
	tests := []struct {
		in   string
		want Target
	}{
		{"etcd://10.0.0.1:2379", Target{Backend: Etcd, Endpoints: []string{"10.0.0.1:2379"}}},
		{"etcd://a:1,b:2;c:3", Target{Backend: Etcd, Endpoints: []string{"a:1", "b:2", "c:3"}}},
		{"ETCD://a:1", Target{Backend: Etcd, Endpoints: []string{"a:1"}}},
		{"  etcd://[::1]:2379 ", Target{Backend: Etcd, Endpoints: []string{"[::1]:2379"}}},
		{"10.0.0.1:2379", Target{Backend: Etcd, Endpoints: []string{"10.0.0.1:2379"}}},
		{"etcd-0.etcd:2379,etcd-1.etcd:2379", Target{Backend: Etcd, Endpoints: []string{"etcd-0.etcd:2379", "etcd-1.etcd:2379"}}},
		{"http://10.0.0.1:8080/metadata", Target{Backend: HTTP, Endpoints: []string{"10.0.0.1:8080"}, URL: "http://10.0.0.1:8080/metadata"}},
		{"https://meta.example:8443/v1/metadata", Target{Backend: HTTP, Endpoints: []string{"meta.example:8443"}, URL: "https://meta.example:8443/v1/metadata", TLS: true}},
		{"http://u:p@h/metadata", Target{Backend: HTTP, Endpoints: []string{"h"}, URL: "http://h/metadata", Username: "u", Password: "p"}},
		{"http://[::1]/m", Target{Backend: HTTP, Endpoints: []string{"[::1]"}, URL: "http://[::1]/m"}},
		{"redis://10.0.0.1:6379", Target{Backend: Redis, Endpoints: []string{"10.0.0.1:6379"}}},
		{"redis://10.0.0.1", Target{Backend: Redis, Endpoints: []string{"10.0.0.1:6379"}}},
		{"redis://:s3cret@10.0.0.1:6379/2", Target{Backend: Redis, Endpoints: []string{"10.0.0.1:6379"}, Password: "s3cret", DB: 2, HasDB: true}},
		{"redis://kv:pw@h:1/0", Target{Backend: Redis, Endpoints: []string{"h:1"}, Username: "kv", Password: "pw", HasDB: true}},
		{"rediss://h:6380/", Target{Backend: Redis, Endpoints: []string{"h:6380"}, TLS: true}},
	}
	for _, tt := range tests {
		got, err := Parse(tt.in)
		if err != nil {
			t.Errorf("Parse(%q): %v", tt.in, err)
			continue
		}
		if !reflect.DeepEqual(got, tt.want) {
			t.Errorf("Parse(%q) = %+v, want %+v", tt.in, got, tt.want)
		}
		again, err := Parse(got.format(false))
		if err != nil || !reflect.DeepEqual(again, got) {
			t.Errorf("Parse(%q) round trip through %q = %+v, %v", tt.in, got.format(false), again, err)
		}
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct{ in, want string }{
		{"", "empty"},
		{"P2PHANDSHAKE", "no metadata service"},
		{"p2phandshake", `spelled "P2PHANDSHAKE"`},
		{"10.0.0.1", "not host:port"},
		{"etcd://", "no endpoints"},
		{"etcd://a:1,,b:2", "empty endpoint"},
		{"etcd://a:1,", "empty endpoint"},
		{"etcd://a:99999", `port "99999"`},
		{"etcd://a:x", `port "x"`},
		{"etcd://:2379", "no host"},
		{"etcd://http://a:1", "has a scheme"},
		{"etcd://a:1/path", `port "1/path"`},
		{"etcds://a:1", `unknown scheme "etcds"`},
		{"consul://a:1", `unknown scheme "consul"`},
		{"http://", "no host"},
		{"http://h:1/m?key=x", "a query"},
		{"http://h:1/m#f", "a fragment"},
		{"http://h:0/m", `port "0"`},
		{"redis://h:1/x", `database "x"`},
		{"redis://h:1/-1", `database "-1"`},
		{"redis://h:1/?db=2", "a query"},
		{"redis://h:1\n", ""}, // trimmed: fine
		{"etcd://a:1\x00", "control character"},
		{"redis://:pw@h:70000", `port "70000"`},
		{strings.Repeat("a", 5000), "longer than"},
		{"http://h\xc3\xa9:1/m", `host "hé" is not ASCII`},
		{"etcd://\xff:2379", `is not ASCII`},
		{"http://h/" + strings.Repeat("\xff", 2000), "longer than 4096 bytes once percent-escaped"},
		{"redis://u:" + strings.Repeat(":", 1400) + "@h", "once percent-escaped"}, // a password's colons are escaped
	}
	for _, tt := range tests {
		_, err := Parse(tt.in)
		if tt.want == "" {
			if err != nil {
				t.Errorf("Parse(%q): %v", tt.in, err)
			}
			continue
		}
		if err == nil {
			t.Errorf("Parse(%q) succeeded, want an error about %q", tt.in, tt.want)
			continue
		}
		if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), "want P2PHANDSHAKE, etcd://") {
			t.Errorf("Parse(%q) = %v, want ErrInvalidArgument about %q listing what is allowed", tt.in, err, tt.want)
		}
		if strings.Contains(err.Error(), "pw@") {
			t.Errorf("Parse(%q) error shows the password: %v", tt.in, err)
		}
	}
}

func TestTargetStringHidesPassword(t *testing.T) {
	for _, in := range []string{"redis://:s3cret@h:1/2", "redis://u:s3cret@h:1", "http://u:s3cret@h/m", "rediss://:s3cret@h"} {
		tg, err := Parse(in)
		if err != nil {
			t.Fatal(err)
		}
		if s := tg.String(); strings.Contains(s, "s3cret") || !strings.Contains(s, "xxxxx") {
			t.Errorf("%q: String() = %q", in, s)
		}
	}
	if got := redactString("redis://u:pw@h:1/x@y"); got != "redis://u:xxxxx@h:1/x@y" {
		t.Errorf("redactString = %q", got)
	}
}

func TestKeys(t *testing.T) {
	tests := []struct {
		cluster, segment, seg, rpc string
	}{
		{"", "10.0.0.1:15001", "mooncake/ram/10.0.0.1:15001", "mooncake/rpc_meta/10.0.0.1:15001"},
		{"prod", "node-a", "mooncake/prod/ram/node-a", "mooncake/prod/rpc_meta/node-a"},
		{"prod/", "node-a", "mooncake/prod/ram/node-a", "mooncake/prod/rpc_meta/node-a"},
		{"a/b", "x", "mooncake/a/b/ram/x", "mooncake/a/b/rpc_meta/x"},
		{"", "custom/seg", "mooncake/custom/seg", "mooncake/rpc_meta/custom/seg"}, // Mooncake: a name with / is used as is
		{"c", "custom/seg", "mooncake/c/custom/seg", "mooncake/c/rpc_meta/custom/seg"},
	}
	for _, tt := range tests {
		k := NewKeys(tt.cluster)
		if got := k.Segment(tt.segment); got != tt.seg {
			t.Errorf("NewKeys(%q).Segment(%q) = %q, want %q", tt.cluster, tt.segment, got, tt.seg)
		}
		if got := k.RPC(tt.segment); got != tt.rpc {
			t.Errorf("NewKeys(%q).RPC(%q) = %q, want %q", tt.cluster, tt.segment, got, tt.rpc)
		}
	}
	if (Keys{}).Prefix() != "mooncake/" {
		t.Errorf("zero Keys prefix %q", Keys{}.Prefix())
	}
}

func TestEscapeKey(t *testing.T) {
	// Mooncake's client: curl_easy_escape(key), e.g. from its docs.
	if got := EscapeKey("mooncake/ram/10.0.0.1:15432"); got != "mooncake%2Fram%2F10.0.0.1%3A15432" {
		t.Errorf("EscapeKey = %q", got)
	}
	if got := EscapeKey("a b+c~d_e-f.g"); got != "a%20b%2Bc~d_e-f.g" {
		t.Errorf("EscapeKey = %q", got)
	}
}

func TestRPCLocation(t *testing.T) {
	r := RPCLocation{Host: "10.0.0.1", Port: 15432}
	if got := string(r.Encode()); got != `{"ip_or_host_name":"10.0.0.1","rpc_port":15432}` {
		t.Errorf("Encode = %s", got)
	}
	back, err := DecodeRPCLocation([]byte(`{"ip_or_host_name":"10.0.0.1","rpc_port":15432}` + "\n"))
	if err != nil || back != r {
		t.Errorf("Decode = %+v, %v", back, err)
	}
	for _, bad := range []string{``, `[]`, `null`, `{}`, `{"ip_or_host_name":"h"}`, `{"ip_or_host_name":"h","rpc_port":"15432"}`,
		`{"ip_or_host_name":"h","rpc_port":0}`, `{"ip_or_host_name":"h","rpc_port":1.5}`, `{"ip_or_host_name":"","rpc_port":1}`,
		`{"ip_or_host_name":"a b","rpc_port":1}`, `{"ip_or_host_name":7,"rpc_port":1}`, `{"ip_or_host_name":"h","rpc_port":70000}`} {
		if _, err := DecodeRPCLocation([]byte(bad)); !errors.Is(err, errdefs.ErrProtocol) {
			t.Errorf("Decode(%s) = %v, want ErrProtocol", bad, err)
		}
	}
}

func TestDescriptorName(t *testing.T) {
	name, err := DescriptorName([]byte(mooncakeDescriptor))
	if err != nil || name != "127.0.0.1:15093" {
		t.Errorf("DescriptorName = %q, %v", name, err)
	}
	for _, bad := range []string{``, `garbage`, `[1]`, `"x"`, `{}`, `{"name":""}`, `{"name":7}`, `{"name":"x"`, `null`} {
		if _, err := DescriptorName([]byte(bad)); !errors.Is(err, errdefs.ErrProtocol) {
			t.Errorf("DescriptorName(%s) = %v, want ErrProtocol", bad, err)
		}
	}
}

// mooncakeDescriptor is a segment descriptor as an unmodified Mooncake
// Transfer Engine (transfer_engine_bench, TCP) answered a Metadata
// handshake on this machine: jsoncpp's FastWriter output with its trailing
// newline, which is also what Mooncake puts under mooncake/ram/<segment>.
const mooncakeDescriptor = `{"buffers":[{"addr":140664136269824,"length":67108864,"name":"127.0.0.1:15093"}],"name":"127.0.0.1:15093","protocol":"tcp","tcp_data_port":16383,"tcp_proto_version":2,"timestamp":"2026-12-01 08:49:41.103862"}` + "\n"

func FuzzParse(f *testing.F) {
	for _, s := range []string{"etcd://a:1,b:2", "a:1;b:2", "http://h:1/m", "https://u:p@h/m", "redis://:p@h:1/2", "rediss://h",
		"P2PHANDSHAKE", "etcd://[::1]:1", "http://[::1]/", "redis://[::1]", "x://", "://", "etcd://a:1,", "http://h:1/m?key=1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tg, err := Parse(s)
		if err != nil {
			if !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Fatalf("Parse(%q): error %v does not wrap ErrInvalidArgument", s, err)
			}
			return
		}
		if len(tg.Endpoints) == 0 {
			t.Fatalf("Parse(%q) = %+v without endpoints", s, tg)
		}
		again, err := Parse(tg.format(false))
		if err != nil {
			t.Fatalf("Parse(%q) = %+v, but its formatted form %q does not parse: %v", s, tg, tg.format(false), err)
		}
		if !reflect.DeepEqual(again, tg) {
			t.Fatalf("Parse(%q) = %+v, Parse(%q) = %+v", s, tg, tg.format(false), again)
		}
		if red, err := Parse(tg.String()); tg.Password != "" && (err != nil || red.Password != "xxxxx") {
			t.Fatalf("String() of %q = %q does not hide the password (%+v, %v)", s, tg.String(), red, err)
		}
	})
}

func FuzzDecodeRPCLocation(f *testing.F) {
	f.Add([]byte(`{"ip_or_host_name":"10.0.0.1","rpc_port":15432}`))
	f.Add([]byte(`{"ip_or_host_name":"h","rpc_port":1e3}`))
	f.Add([]byte(`{"ip_or_host_name":"h","rpc_port":-1}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := DecodeRPCLocation(b)
		if err != nil {
			if !errors.Is(err, errdefs.ErrProtocol) {
				t.Fatalf("error %v does not wrap ErrProtocol", err)
			}
			return
		}
		if r.check() != "" {
			t.Fatalf("accepted %+v: %s", r, r.check())
		}
		back, err := DecodeRPCLocation(r.Encode())
		if err != nil || back != r {
			t.Fatalf("round trip %+v: %+v, %v", r, back, err)
		}
	})
}

func FuzzDescriptorName(f *testing.F) {
	f.Add([]byte(mooncakeDescriptor))
	f.Add([]byte(`{"name":"x","kvconnect":{"version":2}}`))
	f.Add([]byte(`{"name":null}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		name, err := DescriptorName(b)
		if err != nil {
			if !errors.Is(err, errdefs.ErrProtocol) {
				t.Fatalf("error %v does not wrap ErrProtocol", err)
			}
			return
		}
		if name == "" {
			t.Fatal("accepted an empty name")
		}
	})
}

// TestPasswordWithURLDelimitersStaysHidden: a password holding '/', '?'
// or '#' that was not percent-encoded makes the string parse as
// something else (user:pa taken for host:port); the error names the
// cause and shows no part of the password, and Redact hides all of it.
func TestPasswordWithURLDelimitersStaysHidden(t *testing.T) {
	for _, in := range []string{
		"redis://u:k7/Zq@h:6379",
		"redis://:k7?Zq@h",
		"rediss://u:k7#Zq@h:6380/1",
		"http://u:k7/Zq@h:8080/metadata",
	} {
		_, err := Parse(in)
		if err == nil {
			t.Errorf("Parse(%q) succeeded", in)
			continue
		}
		if msg := err.Error(); strings.Contains(msg, "k7") || strings.Contains(msg, "Zq") || !strings.Contains(msg, "percent-encode") || !strings.Contains(msg, "xxxxx") {
			t.Errorf("Parse(%q) = %v: want the password hidden and the cause named", in, err)
		}
		if r := Redact(in); strings.Contains(r, "k7") || strings.Contains(r, "Zq") {
			t.Errorf("Redact(%q) = %q", in, r)
		}
	}
	// Percent-encoded, the same password parses and is the password.
	tg, err := Parse("redis://u:k7%2FZq@h:6379")
	if err != nil || tg.Password != "k7/Zq" || tg.Endpoints[0] != "h:6379" {
		t.Fatalf("Parse(encoded) = %+v, %v", tg, err)
	}
}

// TestEtcdCredentialsInTheStringStayHidden: etcd takes its user and
// password from settings; a connection string holding them is refused
// without repeating them (the error used to quote the endpoint whole).
func TestEtcdCredentialsInTheStringStayHidden(t *testing.T) {
	for _, in := range []string{"etcd://kv:S3cretPw@10.0.0.5:2379", "kv:S3cretPw@10.0.0.5:2379", "10.0.0.4:2379,kv:S3cretPw@10.0.0.5:2379"} {
		_, err := Parse(in)
		if err == nil {
			t.Errorf("Parse(%q) succeeded", in)
			continue
		}
		if msg := err.Error(); strings.Contains(msg, "S3cretPw") || !strings.Contains(msg, "metadata_password") {
			t.Errorf("Parse(%q) = %v: want the password hidden and metadata_password named", in, err)
		}
	}
}
