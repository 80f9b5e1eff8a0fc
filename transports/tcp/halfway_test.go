package tcp

import (
	"testing"
	"time"
)

// A registration's prefault may use half of the time left before its
// deadline, none once the deadline has passed.
func TestHalfway(t *testing.T) {
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		deadline, want time.Time
	}{
		{now.Add(30 * time.Second), now.Add(15 * time.Second)},
		{now.Add(time.Millisecond), now.Add(500 * time.Microsecond)},
		{now, now},
		{now.Add(-time.Second), now},
	} {
		if got := halfway(now, tc.deadline); !got.Equal(tc.want) {
			t.Errorf("halfway(now, now%+v) = now%+v, want now%+v", tc.deadline.Sub(now), got.Sub(now), tc.want.Sub(now))
		}
	}
}
