package regions_test

import (
	"errors"
	"fmt"
	"log"

	"github.com/kvconnect/kvconnect/errdefs"
	"github.com/kvconnect/kvconnect/plugins/regions"
)

// A memory owner resolves every incoming op through its Table before it
// touches memory: by region id, or by absolute address when the id is 0.
func ExampleTable_Resolve() {
	var t regions.Table
	mem := make([]byte, 4096)
	t.Add(1, 0x7f0000000000, mem)

	e, b, err := t.Resolve(0, 0x7f0000000000+100, 16) // Mooncake-style absolute address
	fmt.Println(e.ID, len(b), err)
	e.Release() // DeregisterRegion waits for every Resolve to be released

	_, _, err = t.Resolve(1, 4090, 16)
	fmt.Println(errors.Is(err, errdefs.ErrOutOfBounds))
	// Output:
	// 1 16 <nil>
	// true
}

// An Index looks up the regions a peer published, so an initiator can
// refuse an op before it goes on the wire.
func ExampleIndex() {
	type published struct {
		id, addr, size uint64
		key            string
	}
	x, err := regions.NewIndex([]published{{1, 0x1000, 4096, "k1"}, {2, 0x9000, 4096, "k2"}},
		func(p published) regions.Span { return regions.Span{ID: p.id, Addr: p.addr, Size: p.size} })
	if err != nil {
		log.Fatal(err)
	}
	p, _, off, err := x.Resolve(0, 0x9010, 64)
	fmt.Println(p.key, off, err)
	// Output: k2 16 <nil>
}
