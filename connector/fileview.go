package connector

import (
	"fmt"
	"os"
	"sync"

	"github.com/kvconnect/kvconnect/internal/fdlimit"
	"github.com/kvconnect/kvconnect/internal/shm"
)

// viewKey identifies a file by device and inode, however many
// descriptors the caller opened for it.
type viewKey struct{ dev, ino uint64 }

// fileView is the node's one mapping of a caller's file, shared by every
// region RegisterFile made of it: one descriptor (a duplicate of the
// caller's) and one mapping of the whole file, whatever the number of
// regions. The view is unmapped and its descriptor closed when its last
// region is released. refs is guarded by fileViews.mu.
type fileView struct {
	key  viewKey
	seg  *shm.Segment // [0, size) of the file
	refs int
}

// fileViews are the node's views of caller files. Its methods are safe
// for concurrent use.
type fileViews struct {
	mu      sync.Mutex
	current map[viewKey]*fileView // the view new ranges of a file go into
}

// acquire returns a view of f holding [offset, offset+length) with one
// more reference, mapping f anew when no view of it holds the range (a
// first registration, or a file that grew since).
func (fv *fileViews) acquire(f *os.File, offset uint64, length int) (*fileView, error) {
	key, size, err := fileIdentity(f)
	if err != nil {
		return nil, err
	}
	end := offset + uint64(length)
	fv.mu.Lock()
	defer fv.mu.Unlock()
	if v := fv.current[key]; v != nil && end <= uint64(len(v.seg.Bytes())) {
		v.refs++
		return v, nil
	}
	dup, err := dupFile(f)
	if err != nil {
		return nil, fmt.Errorf("duplicating its descriptor: %w: %w", fdlimit.Explain(err), ErrUnavailable)
	}
	seg, err := shm.MapView(dup, int(size))
	if err != nil {
		dup.Close()
		return nil, err
	}
	v := &fileView{key: key, seg: seg, refs: 1}
	if fv.current == nil {
		fv.current = map[viewKey]*fileView{}
	}
	fv.current[key] = v // a smaller view stays until its regions go
	return v, nil
}

// release drops a reference to v, closing it at the last.
func (fv *fileViews) release(v *fileView) {
	fv.mu.Lock()
	v.refs--
	last := v.refs == 0
	if last && fv.current[v.key] == v {
		delete(fv.current, v.key)
	}
	fv.mu.Unlock()
	if last {
		v.seg.Close()
	}
}
