package ucx

import "fmt"

// The types below are shared by the cgo build and the stub.

// Config is how a Worker's context is configured.
type Config struct {
	// TLS is the UCX_TLS value for this context ("tcp", "sm", "rc,ud"...);
	// empty keeps UCX's default (the environment's UCX_TLS, else all).
	TLS string
	// NetDevices is UCX_NET_DEVICES for this context; empty keeps the
	// default.
	NetDevices string
	// Extra are further UCP configuration keys (without the UCX_ prefix).
	Extra [][2]string
	// ThreadMode of the worker; ThreadSingle unless several threads call it.
	ThreadMode ThreadMode
	// Slots is the number of operations that can be in flight at once.
	Slots int
}

// CreateError is a failure to create a Worker: the step and the status.
type CreateError struct {
	Step   string // "read config", "set TLS", "set NET_DEVICES", "init context", ...
	Status Status
	Text   string
	// Config is set when UCX rejected a configuration value (the step is
	// "set TLS", "set NET_DEVICES" or "set configuration").
	Config bool
}

func (e *CreateError) Error() string {
	return fmt.Sprintf("%s: %s (%s %d)", e.Step, e.Text, e.Status.Name(), int32(e.Status))
}

// Unwrap returns the status's sentinel (ErrUnavailable for
// UCS_ERR_NO_DEVICE: no transport matched the configuration).
func (e *CreateError) Unwrap() error { return e.Status.Sentinel() }

// EP is a UCP endpoint handle.
type EP uintptr

// Mem is a UCP memory handle (ucp_mem_map).
type Mem uintptr

// Rkey is an unpacked remote key.
type Rkey uintptr

// OpKind is what Post does.
type OpKind uint32

// Op kinds for Post.
const (
	OpPut   OpKind = 1
	OpGet   OpKind = 2
	OpFlush OpKind = 3
)

// Op is one operation for Post. Local is the address of local memory that
// must stay mapped until the op's completion; Status is set by Post: OK
// (done now), InProgress (its slot completes later) or an error.
type Op struct {
	Kind   OpKind
	Slot   uint32
	EP     EP
	Local  uintptr
	Remote uint64
	Rkey   Rkey
	Len    uint64
	Status Status
}

// Completion is a finished in-progress operation.
type Completion struct {
	Slot   uint32
	Status Status
}

// EPError is an endpoint failure reported by UCX's error handler.
type EPError struct {
	EP     EP
	Status Status
}

// MaxMessage is the largest control message a worker accepts.
const MaxMessage = 64 << 10

// MaxAddress is the largest worker address Connect accepts (UCX's are
// hundreds of bytes to a few KiB).
const MaxAddress = 64 << 10

// MaxRkey is the largest packed remote key UnpackRkey accepts.
const MaxRkey = 16 << 10
