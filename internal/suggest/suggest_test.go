package suggest

import "testing"

func TestClosest(t *testing.T) {
	cands := []string{"rdma", "tcp", "npu_id", "dev_root", "device_name", "devices"}
	for _, tt := range []struct{ in, want string }{
		{"rdam", "rdma"}, {"TPC", "tcp"}, {"devcie_name", "device_name"},
		{"npu", "npu_id"}, // a unique prefix
		{"dev", ""},       // a prefix of three: ambiguous
		{"tcp", ""}, {"xyz", ""}, {"ab", ""},
	} {
		if got := Closest(tt.in, cands); got != tt.want {
			t.Errorf("Closest(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}
