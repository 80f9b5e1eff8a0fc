package callermem

import (
	"reflect"
	"testing"
)

func TestSpans(t *testing.T) {
	type step struct {
		add        bool
		start, end uint64
		want       [][2]uint64 // fresh (add) or gone (remove)
		held       [][2]uint64 // ranges() afterwards
	}
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"one range", []step{
			{true, 10, 20, [][2]uint64{{10, 20}}, [][2]uint64{{10, 20}}},
			{false, 10, 20, [][2]uint64{{10, 20}}, nil},
		}},
		{"neighbours sharing a page", []step{
			{true, 10, 20, [][2]uint64{{10, 20}}, [][2]uint64{{10, 20}}},
			{true, 19, 30, [][2]uint64{{20, 30}}, [][2]uint64{{10, 30}}},
			{false, 10, 20, [][2]uint64{{10, 19}}, [][2]uint64{{19, 30}}},
			{false, 19, 30, [][2]uint64{{19, 30}}, nil},
		}},
		{"a range over two held ones", []step{
			{true, 10, 20, [][2]uint64{{10, 20}}, nil},
			{true, 30, 40, [][2]uint64{{30, 40}}, nil},
			{true, 5, 45, [][2]uint64{{5, 10}, {20, 30}, {40, 45}}, [][2]uint64{{5, 45}}},
			{false, 5, 45, [][2]uint64{{5, 10}, {20, 30}, {40, 45}}, [][2]uint64{{10, 20}, {30, 40}}},
			{false, 10, 20, [][2]uint64{{10, 20}}, [][2]uint64{{30, 40}}},
			{false, 30, 40, [][2]uint64{{30, 40}}, nil},
		}},
		{"the same range twice", []step{
			{true, 10, 20, [][2]uint64{{10, 20}}, nil},
			{true, 10, 20, nil, nil},
			{false, 10, 20, nil, [][2]uint64{{10, 20}}},
			{false, 10, 20, [][2]uint64{{10, 20}}, nil},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var s spans
			for i, st := range tc.steps {
				var got [][2]uint64
				if st.add {
					got = s.add(st.start, st.end)
				} else {
					got = s.remove(st.start, st.end)
				}
				if !reflect.DeepEqual(got, st.want) {
					t.Fatalf("step %d (add=%v [%d, %d)): got %v, want %v", i, st.add, st.start, st.end, got, st.want)
				}
				if st.held != nil && !reflect.DeepEqual(s.ranges(), st.held) {
					t.Fatalf("step %d: held %v, want %v", i, s.ranges(), st.held)
				}
			}
			if !s.empty() {
				t.Fatalf("not empty at the end: %v", s.ranges())
			}
		})
	}
}

func TestSpansHeld(t *testing.T) {
	var s spans
	s.add(10, 20)
	for _, tc := range []struct {
		start, end uint64
		want       bool
	}{{0, 10, false}, {0, 11, true}, {19, 25, true}, {20, 30, false}, {12, 13, true}} {
		if got := s.held(tc.start, tc.end); got != tc.want {
			t.Errorf("held(%d, %d) = %v, want %v", tc.start, tc.end, got, tc.want)
		}
	}
}
