package callermem

import (
	"bufio"
	"bytes"
	"fmt"
	"strconv"
	"strings"
)

// vma is one line of /proc/self/maps: a mapping of this process.
type vma struct {
	start, end uint64
	read       bool
	write      bool
	exec       bool
	shared     bool   // 's' (MAP_SHARED) rather than 'p'
	offset     uint64 // in the file, for file mappings
	dev        string // major:minor, hex
	inode      uint64
	path       string // "" for anonymous memory; [heap], [stack], a file, "/memfd:x (deleted)"
}

// special says why the mapping cannot be registered, or "".
func (v vma) special() string {
	switch {
	case v.path == "[stack]" || strings.HasPrefix(v.path, "[stack:"):
		return "a thread's stack"
	case v.path == "[vvar]" || v.path == "[vdso]" || v.path == "[vsyscall]" || v.path == "[vvar_vclock]":
		return "kernel-provided memory (" + v.path + ")"
	case strings.HasPrefix(v.path, "/anon_hugepage") || strings.Contains(v.path, "hugepages"):
		return "hugetlb memory (register it with RegisterFile, or allocate managed memory)"
	}
	return ""
}

func (v vma) String() string {
	perms := []byte("---p")
	if v.read {
		perms[0] = 'r'
	}
	if v.write {
		perms[1] = 'w'
	}
	if v.exec {
		perms[2] = 'x'
	}
	if v.shared {
		perms[3] = 's'
	}
	name := v.path
	if name == "" {
		name = "anonymous"
	}
	return fmt.Sprintf("[0x%x, 0x%x) %s %s", v.start, v.end, perms, name)
}

// parseMaps decodes /proc/self/maps text and returns the mappings that
// intersect [start, end), in address order. It never fails on a line it
// does not understand in full: such a line is an error naming it.
func parseMaps(text []byte, start, end uint64) ([]vma, error) {
	var out []vma
	sc := bufio.NewScanner(bytes.NewReader(text))
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			continue
		}
		v, err := parseMapsLine(line)
		if err != nil {
			return nil, err
		}
		if v.end <= start || v.start >= end {
			continue
		}
		out = append(out, v)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading /proc/self/maps: %w", err)
	}
	return out, nil
}

// parseMapsLine decodes "start-end perms offset dev inode [path]".
func parseMapsLine(line string) (vma, error) {
	bad := func(why string) (vma, error) {
		return vma{}, fmt.Errorf("unexpected /proc/self/maps line %q: %s", line, why)
	}
	f := strings.Fields(line)
	if len(f) < 5 {
		return bad("fewer than 5 fields")
	}
	lo, hi, ok := strings.Cut(f[0], "-")
	if !ok {
		return bad("no address range")
	}
	var v vma
	var err error
	if v.start, err = strconv.ParseUint(lo, 16, 64); err != nil {
		return bad("start address")
	}
	if v.end, err = strconv.ParseUint(hi, 16, 64); err != nil || v.end <= v.start {
		return bad("end address")
	}
	if len(f[1]) != 4 {
		return bad("permissions")
	}
	v.read, v.write, v.exec, v.shared = f[1][0] == 'r', f[1][1] == 'w', f[1][2] == 'x', f[1][3] == 's'
	if v.offset, err = strconv.ParseUint(f[2], 16, 64); err != nil {
		return bad("offset")
	}
	v.dev = f[3]
	if v.inode, err = strconv.ParseUint(f[4], 10, 64); err != nil {
		return bad("inode")
	}
	if len(f) > 5 {
		// The path is the rest of the line after the inode, spaces kept.
		rest := line
		for i := 0; i < 5; i++ {
			rest = strings.TrimLeft(rest, " \t")
			j := strings.IndexAny(rest, " \t")
			if j < 0 {
				rest = ""
				break
			}
			rest = rest[j:]
		}
		v.path = strings.TrimLeft(rest, " \t")
	}
	return v, nil
}
