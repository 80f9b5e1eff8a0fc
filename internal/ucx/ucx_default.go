//go:build !linux || !cgo

package ucx

import (
	"fmt"
	"time"

	"github.com/kvconnect/kvconnect/errdefs"
)

// Load reports that this binary has no UCX support: UCX is reached
// through cgo on Linux only.
func Load() error {
	return &LoadError{Library: Library, Detail: "this binary was built without cgo (or not for Linux), so it cannot use UCX",
		Hints: []string{"rebuild with CGO_ENABLED=1 on Linux, with " + DebianPackage + " (and libucx-dev to build) installed", "or use the tcp transport"}}
}

// Version is "" without UCX.
func Version() string { return "" }

func statusText(Status) string { return "" }

// Available fails: no UCX in this build.
func Available() ([]Resource, error) { return nil, Load() }

// ConfigKeys is nil without UCX.
func ConfigKeys() (all, ucp map[string]bool) { return nil, nil }

// Worker cannot be created in this build.
type Worker struct{}

// NewWorker fails: no UCX in this build.
func NewWorker(Config) (*Worker, error) { return nil, Load() }

var errNoUCX = fmt.Errorf("ucx: built without UCX support: %w", errdefs.ErrUnavailable)

func (w *Worker) Slots() int                                { return 0 }
func (w *Worker) Destroy()                                  {}
func (w *Worker) Abandon()                                  {}
func (w *Worker) Address() ([]byte, error)                  { return nil, errNoUCX }
func (w *Worker) Resources() []Resource                     { return nil }
func (w *Worker) Lanes(EP) []Lane                           { return nil }
func (w *Worker) Wake()                                     {}
func (w *Worker) Wait(time.Duration) (bool, error)          { return false, errNoUCX }
func (w *Worker) Progress(int) int                          { return 0 }
func (w *Worker) Completions(dst []Completion) []Completion { return dst }
func (w *Worker) EndpointErrors(dst []EPError) []EPError    { return dst }
func (w *Worker) NextMessage([]byte) (int, bool)            { return 0, false }
func (w *Worker) DroppedMessages() uint64                   { return 0 }
func (w *Worker) Connect([]byte, bool) (EP, error)          { return 0, errNoUCX }
func (w *Worker) CloseEP(uint32, EP, bool) Status           { return ErrUnsupported }
func (w *Worker) SendMessage(uint32, EP, []byte) Status     { return ErrUnsupported }
func (w *Worker) Post(ops []Op) {
	for i := range ops {
		ops[i].Status = ErrUnsupported
	}
}
func (w *Worker) MemMap(uintptr, uint64) (Mem, error) { return 0, errNoUCX }
func (w *Worker) MemUnmap(Mem) error                  { return errNoUCX }
func (w *Worker) PackRkey(Mem) ([]byte, error)        { return nil, errNoUCX }
func (w *Worker) UnpackRkey(EP, []byte) (Rkey, error) { return 0, errNoUCX }
func (w *Worker) DestroyRkey(Rkey)                    {}
