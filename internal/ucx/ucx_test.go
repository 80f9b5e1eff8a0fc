//go:build linux && cgo

package ucx

import (
	"bytes"
	"errors"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kvconnect/kvconnect/errdefs"
)

func needUCX(t *testing.T) {
	t.Helper()
	if err := Load(); err != nil {
		t.Fatalf("UCX must be installed for these tests (make deps installs libucx-dev): %v", err)
	}
}

func TestAvailable(t *testing.T) {
	needUCX(t)
	res, err := Available()
	if err != nil {
		t.Fatal(err)
	}
	var tcp, shm bool
	for _, r := range res {
		tcp = tcp || r.Transport == "tcp" && r.DeviceType == DeviceNet
		shm = shm || r.IsSharedMemory() && r.DeviceType == DeviceShm
	}
	if !tcp || !shm {
		t.Fatalf("want a tcp and a shared-memory resource, got %v", res)
	}
	t.Logf("UCX %s: %v", Version(), res)
}

// A nil dereference must still be a recoverable Go panic after UCX is
// loaded: libucs installs its own SIGSEGV handler, which Load undoes.
func TestGoSignalsSurviveLoad(t *testing.T) {
	needUCX(t)
	defer func() {
		if r := recover(); r == nil {
			t.Fatal("no panic")
		}
	}()
	var p *int
	*p = 1 //nolint
}

type pair struct {
	a, b *Worker
	ab   EP
}

func newPair(t *testing.T, tls string) *pair {
	runtime.LockOSThread()
	t.Cleanup(runtime.UnlockOSThread)
	mk := func() *Worker {
		w, err := NewWorker(Config{TLS: tls, Slots: 64})
		if err != nil {
			t.Fatalf("NewWorker(%s): %v", tls, err)
		}
		t.Cleanup(w.Destroy)
		return w
	}
	p := &pair{a: mk(), b: mk()}
	addrB, err := p.b.Address()
	if err != nil {
		t.Fatal(err)
	}
	peerErrors := tls == "tcp"
	if p.ab, err = p.a.Connect(addrB, peerErrors); err != nil {
		t.Fatal(err)
	}
	return p
}

func (p *pair) progress() {
	p.a.Progress(16)
	p.b.Progress(16)
}

func (p *pair) wait(t *testing.T, slot uint32) Status {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		p.progress()
		for _, c := range p.a.Completions(nil) {
			if c.Slot == slot {
				return c.Status
			}
		}
	}
	t.Fatalf("slot %d did not complete", slot)
	return 0
}

func TestPutGet(t *testing.T) {
	needUCX(t)
	for _, tls := range []string{"tcp", "sm", "posix,cma"} {
		t.Run(tls, func(t *testing.T) {
			p := newPair(t, tls)
			src := bytes.Repeat([]byte("kvconnect"), 100000)
			dst, err := unix.Mmap(-1, 0, len(src), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_ANONYMOUS)
			if err != nil {
				t.Fatal(err)
			}
			defer unix.Munmap(dst)
			back, _ := unix.Mmap(-1, 0, len(src), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_ANONYMOUS)
			defer unix.Munmap(back)
			srcm, _ := unix.Mmap(-1, 0, len(src), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_ANONYMOUS)
			defer unix.Munmap(srcm)
			copy(srcm, src)
			mem, err := p.b.MemMap(addrOf(dst), uint64(len(dst)))
			if err != nil {
				t.Fatal(err)
			}
			defer p.b.MemUnmap(mem)
			key, err := p.b.PackRkey(mem)
			if err != nil {
				t.Fatal(err)
			}
			rk, err := p.a.UnpackRkey(p.ab, key)
			if err != nil {
				t.Fatal(err)
			}
			defer p.a.DestroyRkey(rk)
			ops := []Op{{Kind: OpPut, Slot: 1, EP: p.ab, Local: addrOf(srcm), Remote: uint64(addrOf(dst)), Rkey: rk, Len: uint64(len(src))},
				{Kind: OpFlush, Slot: 2, EP: p.ab}}
			p.a.Post(ops)
			for _, o := range ops {
				if o.Status == InProgress {
					if st := p.wait(t, o.Slot); st != OK {
						t.Fatalf("slot %d: %v", o.Slot, st.Error("op"))
					}
				} else if o.Status != OK {
					t.Fatalf("post: %v", o.Status.Error("post"))
				}
			}
			if !bytes.Equal(dst, src) {
				t.Fatal("PUT: data differs")
			}
			ops = []Op{{Kind: OpGet, Slot: 3, EP: p.ab, Local: addrOf(back), Remote: uint64(addrOf(dst)), Rkey: rk, Len: uint64(len(src))}}
			p.a.Post(ops)
			if ops[0].Status == InProgress {
				if st := p.wait(t, 3); st != OK {
					t.Fatal(st.Error("get"))
				}
			} else if ops[0].Status != OK {
				t.Fatal(ops[0].Status.Error("get"))
			}
			if !bytes.Equal(back, src) {
				t.Fatal("GET: data differs")
			}
			t.Logf("context resources %v; lanes %v", p.a.Resources(), p.a.Lanes(p.ab))
			st := p.a.CloseEP(9, p.ab, false)
			if st == InProgress {
				st = p.wait(t, 9)
			}
			if st != OK {
				t.Fatal(st.Error("close"))
			}
		})
	}
}

func TestCreateErrors(t *testing.T) {
	needUCX(t)
	_, err := NewWorker(Config{TLS: "no_such_transport", Slots: 4})
	var ce *CreateError
	if !errors.As(err, &ce) || ce.Status != ErrNoDevice || !errors.Is(err, errdefs.ErrUnavailable) {
		t.Fatalf("unknown transport: got %v, want a CreateError with UCS_ERR_NO_DEVICE wrapping ErrUnavailable", err)
	}
	t.Log(err)
}

func addrOf(b []byte) uintptr { return uintptr(unsafePointer(b)) }

func TestConfigKeys(t *testing.T) {
	needUCX(t)
	all, ucp := ConfigKeys()
	for _, k := range []string{"TLS", "NET_DEVICES", "TCP_TX_SEG_SIZE", "POSIX_SEG_SIZE", "SYSV_SEG_SIZE", "CMA_SEG_SIZE", "RNDV_THRESH"} {
		if !all[k] {
			t.Errorf("UCX configuration keys lack %s (%d keys)", k, len(all))
		}
	}
	if !ucp["RNDV_THRESH"] || !ucp["TLS"] || ucp["TCP_TX_SEG_SIZE"] || len(ucp) >= len(all) {
		t.Errorf("UCP keys (%d) should be the UCP table only", len(ucp))
	}
	if all["BOGUS"] || all["UCX_TLS"] {
		t.Error("keys are names without the UCX_ prefix")
	}
}
