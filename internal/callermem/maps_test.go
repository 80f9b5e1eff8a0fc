package callermem

import (
	"strings"
	"testing"
)

func TestParseMaps(t *testing.T) {
	text := `55d0c0a00000-55d0c0a21000 rw-p 00000000 00:00 0                          [heap]
7f0000000000-7f0000010000 rw-s 7f0000000000 00:01 4242                       /memfd:kvconnect:caller-memory (deleted)
7f0000010000-7f0000020000 r--p 00001000 08:01 1234                       /usr/lib/x86_64-linux-gnu/lib with space.so
7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0                          [stack]
`
	vmas, err := parseMaps([]byte(text), 0x7f0000008000, 0x7f0000018000)
	if err != nil {
		t.Fatal(err)
	}
	if len(vmas) != 2 {
		t.Fatalf("got %d mappings, want 2: %v", len(vmas), vmas)
	}
	m := vmas[0]
	if m.start != 0x7f0000000000 || m.end != 0x7f0000010000 || !m.shared || !m.write || m.offset != 0x7f0000000000 || m.inode != 4242 || m.dev != "00:01" || m.path != "/memfd:kvconnect:caller-memory (deleted)" {
		t.Errorf("memfd line decoded as %+v", m)
	}
	if vmas[1].path != "/usr/lib/x86_64-linux-gnu/lib with space.so" || vmas[1].write || vmas[1].shared {
		t.Errorf("library line decoded as %+v", vmas[1])
	}
	all, _ := parseMaps([]byte(text), 0, ^uint64(0))
	if all[3].special() == "" || all[0].special() != "" {
		t.Errorf("special: stack %q, heap %q", all[3].special(), all[0].special())
	}
	for _, bad := range []string{"x", "1-0 rw-p 0 00:00 0", "zz-10 rw-p 0 00:00 0", "0-10 rw 0 00:00 0", "0-10 rw-p q 00:00 0", "0-10 rw-p 0 00:00 -1"} {
		if _, err := parseMaps([]byte(bad+"\n"), 0, ^uint64(0)); err == nil || !strings.Contains(err.Error(), "unexpected") {
			t.Errorf("%q: err %v, want an error naming the line", bad, err)
		}
	}
}

func FuzzParseMaps(f *testing.F) {
	f.Add([]byte("55d0c0a00000-55d0c0a21000 rw-p 00000000 00:00 0 [heap]\n"))
	f.Add([]byte("7f0000000000-7f0000010000 rw-s 7f0000000000 00:01 4242 /memfd:x (deleted)\n"))
	f.Add([]byte("0-1 ---- 0 0 0\n\n"))
	f.Fuzz(func(t *testing.T, text []byte) {
		vmas, err := parseMaps(text, 0, ^uint64(0))
		if err != nil {
			return
		}
		for _, v := range vmas {
			if v.end <= v.start {
				t.Fatalf("decoded an empty or inverted mapping %+v", v)
			}
		}
	})
}
