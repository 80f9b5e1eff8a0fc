package units

import (
	"encoding/json"
	"testing"
	"time"
)

func TestParseSize(t *testing.T) {
	tests := []struct {
		in      string
		want    uint64
		wantErr bool
	}{
		{"4096", 4096, false},
		{"1e9", 1e9, false},
		{"64MiB", 64 << 20, false},
		{"64mib", 64 << 20, false},
		{"1GB", 1e9, false},
		{"1 GiB", 1 << 30, false},
		{"2M", 2 << 20, false},
		{"10B", 10, false},
		{"0.5KiB", 512, false},
		{"", 0, true},
		{"abc", 0, true},
		{"-1", 0, true},
		{"1.5", 0, true},
		{"99999999TiB", 0, true},
		{"NaN", 0, true},
	}
	for _, tt := range tests {
		got, err := ParseSize(tt.in)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d, err=%v", tt.in, got, err, tt.want, tt.wantErr)
		}
	}
}

func TestSizeJSON(t *testing.T) {
	var v struct{ S Size }
	if err := json.Unmarshal([]byte(`{"S":"1MiB"}`), &v); err != nil || v.S != 1<<20 {
		t.Fatalf("got %d %v", v.S, err)
	}
	if err := json.Unmarshal([]byte(`{"S":65536}`), &v); err != nil || v.S != 65536 {
		t.Fatalf("got %d %v", v.S, err)
	}
	if err := json.Unmarshal([]byte(`{"S":true}`), &v); err == nil {
		t.Fatal("bool accepted as size")
	}
	b, _ := json.Marshal(Size(3 << 20))
	if string(b) != `"3MiB"` {
		t.Fatalf("marshal: %s", b)
	}
}

func TestParseDuration(t *testing.T) {
	tests := []struct {
		in      string
		want    time.Duration
		wantErr bool
	}{
		{"30s", 30 * time.Second, false},
		{"500ms", 500 * time.Millisecond, false},
		{"2", 2 * time.Second, false},
		{"0.25", 250 * time.Millisecond, false},
		{"-1s", 0, true},
		{"soon", 0, true},
		{"NaN", 0, true}, // ParseFloat reads these; a NaN once became -2562047h47m
		{"nan", 0, true},
		{"Inf", 0, true},
		{"+inf", 0, true},
		{"-Inf", 0, true},
	}
	for _, tt := range tests {
		got, err := ParseDuration(tt.in)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("ParseDuration(%q) = %v, %v; want %v, err=%v", tt.in, got, err, tt.want, tt.wantErr)
		}
	}
	var d Duration
	if err := json.Unmarshal([]byte(`"1m"`), &d); err != nil || time.Duration(d) != time.Minute {
		t.Fatalf("got %v %v", d, err)
	}
}

func TestHumanSize(t *testing.T) {
	for n, want := range map[uint64]string{0: "0B", 17: "17B", 512 << 10: "512KiB", 1536: "1.5KiB", 24683656 << 10: "23.5GiB"} {
		if got := HumanSize(n); got != want {
			t.Errorf("HumanSize(%d) = %s, want %s", n, got, want)
		}
	}
}
