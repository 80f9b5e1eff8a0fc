//go:build linux

package shm

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// File system magic numbers (statfs f_type) named in refusals.
var fsNames = map[int64]string{
	unix.TMPFS_MAGIC: "tmpfs", unix.HUGETLBFS_MAGIC: "hugetlbfs", unix.EXT4_SUPER_MAGIC: "ext4",
	unix.XFS_SUPER_MAGIC: "xfs", unix.BTRFS_SUPER_MAGIC: "btrfs", unix.OVERLAYFS_SUPER_MAGIC: "overlayfs",
	unix.NFS_SUPER_MAGIC: "nfs", 0x65735546: "fuse", unix.PROC_SUPER_MAGIC: "proc", unix.SYSFS_MAGIC: "sysfs",
	unix.RAMFS_MAGIC: "ramfs", 0x2fc12fc1: "zfs",
}

func fsName(t int64) string {
	if n, ok := fsNames[t]; ok {
		return n
	}
	return fmt.Sprintf("file system type 0x%x", t)
}

// CheckShareable says whether [offset, offset+size) of f can be shared
// between processes as a region: f must be shared memory (a memfd, or a
// file on tmpfs or hugetlbfs), a memfd must be sealed against shrinking
// (so no holder can shrink it under another's mapping), and the file must
// hold the range. The error says why not, and what to do.
func CheckShareable(f *os.File, offset uint64, size int) error {
	if err := checkSize(size); err != nil {
		return err
	}
	if offset > MaxOffset {
		return fmt.Errorf("shm: offset %d out of range", offset)
	}
	fd := int(f.Fd())
	var sfs unix.Statfs_t
	if err := unix.Fstatfs(fd, &sfs); err != nil {
		return fmt.Errorf("shm: fstatfs %s: %w", f.Name(), err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("shm: fstat %s: %w", f.Name(), err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return fmt.Errorf("shm: %s is not a regular file: only a memfd, or a file on tmpfs or hugetlbfs, can be shared memory", f.Name())
	}
	typ := int64(sfs.Type)
	if typ != unix.TMPFS_MAGIC && typ != unix.HUGETLBFS_MAGIC {
		return fmt.Errorf("shm: %s is on %s, not shared memory: a file on disk cannot be shared with a transport plugin (its pages are not pinned and writes would go to the disk); use memfd_create, a file in /dev/shm (tmpfs) or on hugetlbfs", f.Name(), fsName(typ))
	}
	seals, err := unix.FcntlInt(f.Fd(), unix.F_GET_SEALS, 0)
	memfd := isMemfd(f)
	switch {
	case err != nil && !errors.Is(err, unix.EINVAL):
		return fmt.Errorf("shm: F_GET_SEALS on %s: %w", f.Name(), err)
	case err == nil && seals&unix.F_SEAL_SHRINK != 0:
		// sealed against shrinking: safe
	case memfd && err == nil && seals&unix.F_SEAL_SEAL == 0:
		return fmt.Errorf("shm: %s is a memfd whose size is not sealed: a holder could shrink it under another process's mapping (SIGBUS); seal it first: fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK)", f.Name())
	case memfd:
		return fmt.Errorf("shm: %s is a memfd created without MFD_ALLOW_SEALING, so its size cannot be sealed and a holder could shrink it under another process's mapping (SIGBUS); create it with MFD_ALLOW_SEALING and seal it with F_SEAL_SHRINK", f.Name())
	default:
		// A named tmpfs or hugetlbfs file cannot be sealed: its owner
		// promises not to shrink it while it is registered.
	}
	if uint64(st.Size) < offset+uint64(size) {
		return fmt.Errorf("shm: %s is %d bytes, too small for %d bytes at offset %d (the range runs past its end)", f.Name(), st.Size, size, offset)
	}
	return nil
}

// isMemfd says whether f is a memfd (its /proc link reads /memfd:...).
func isMemfd(f *os.File) bool {
	target, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", f.Fd()))
	return err == nil && strings.HasPrefix(target, "/memfd:")
}
