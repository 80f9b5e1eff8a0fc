// Package fdlimit explains failures caused by running out of file
// descriptors or memory mappings: it adds to such an error how many this
// process has open, the limit (getrlimit RLIMIT_NOFILE, fs.file-max,
// vm.max_map_count) and what to do, so "too many open files" never
// reaches a user without the numbers behind it.
//
// The errors it returns wrap the original error with %w: errors.Is with
// the errno (unix.EMFILE, ...) still works.
package fdlimit

import "fmt"

// annotated is err with an explanation appended.
type annotated struct {
	err  error
	note string
}

func (a *annotated) Error() string { return a.err.Error() + " (" + a.note + ")" }
func (a *annotated) Unwrap() error { return a.err }

func annotate(err error, format string, args ...any) error {
	return &annotated{err: err, note: fmt.Sprintf(format, args...)}
}
