// Package netns builds small test networks of "hosts" on one Linux
// machine: each host is a network namespace with one interface on a
// shared L2 switch (a bridge in a namespace of its own), an address on
// one /24, and a default route, so that a node's outward address there is
// its own. The test process's namespace can join as a host too. It is
// for tests; it runs ip(8) and needs CAP_NET_ADMIN.
//
// Names carry the creating process's pid, so concurrent test binaries do
// not collide, and New removes what a crashed run left behind.
package netns

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// prefix starts every namespace and interface name this package makes.
const prefix = "kvct"

// Net is one switch and the hosts on it.
type Net struct {
	id     string // prefix + pid
	subnet string // "10.213.<n>."
	sw     string // the switch namespace

	mu     sync.Mutex
	hosts  []*Host
	next   int
	closed bool
}

// Host is one namespace (or the test's own, for Root) on the switch.
type Host struct {
	n      *Net
	Name   string // its namespace, "" for the root namespace
	Addr   string // its address on the switch
	link   string // its interface, in its namespace
	swPort string // the switch's end of its link
}

// Available reports why networks cannot be built here, or nil.
func Available() error {
	if _, err := exec.LookPath("ip"); err != nil {
		return fmt.Errorf("ip(8) is not installed (apt-get install iproute2): %w", err)
	}
	name := fmt.Sprintf("%s%dprobe", prefix, os.Getpid())
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		return fmt.Errorf("cannot create a network namespace (needs root or CAP_NET_ADMIN): %v: %s", err, bytes.TrimSpace(out))
	}
	exec.Command("ip", "netns", "del", name).Run()
	return nil
}

func run(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

// New makes a switch. Close removes it and every host.
func New() (*Net, error) {
	cleanStale()
	pid := os.Getpid()
	n := &Net{id: fmt.Sprintf("%s%d", prefix, pid), subnet: fmt.Sprintf("10.213.%d.", pid%250+1), next: 1}
	n.sw = n.id + "sw"
	if err := run("netns", "add", n.sw); err != nil {
		return nil, err
	}
	for _, args := range [][]string{
		{"-n", n.sw, "link", "add", "br0", "type", "bridge"},
		{"-n", n.sw, "link", "set", "br0", "up"},
		{"-n", n.sw, "link", "set", "lo", "up"},
	} {
		if err := run(args...); err != nil {
			n.Close()
			return nil, err
		}
	}
	return n, nil
}

// cleanStale removes namespaces and links of runs whose process is gone.
func cleanStale() {
	out, _ := exec.Command("ip", "netns", "list").Output()
	for _, line := range strings.Split(string(out), "\n") {
		name, _, _ := strings.Cut(strings.TrimSpace(line), " ")
		if !strings.HasPrefix(name, prefix) {
			continue
		}
		digits := strings.TrimLeft(name[len(prefix):], "0123456789")
		pid, err := strconv.Atoi(name[len(prefix) : len(name)-len(digits)])
		if err != nil || alive(pid) {
			continue
		}
		exec.Command("ip", "netns", "del", name).Run()
	}
	links, _ := exec.Command("ip", "-o", "link", "show").Output()
	for _, line := range strings.Split(string(links), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		name, _, _ := strings.Cut(strings.TrimSuffix(f[1], ":"), "@")
		if !strings.HasPrefix(name, prefix) {
			continue
		}
		digits := strings.TrimLeft(name[len(prefix):], "0123456789")
		pid, err := strconv.Atoi(name[len(prefix) : len(name)-len(digits)])
		if err != nil || alive(pid) {
			continue
		}
		exec.Command("ip", "link", "del", name).Run()
	}
}

func alive(pid int) bool {
	return syscall.Kill(pid, 0) == nil || errors.Is(syscall.Kill(pid, 0), syscall.EPERM)
}

// Subnet is the switch's /24, as "10.213.n.0/24".
func (n *Net) Subnet() string { return n.subnet + "0/24" }

// AddHost makes a host namespace on the switch.
func (n *Net) AddHost(name string) (*Host, error) { return n.add(name, false) }

// AddRoot puts the test process's own namespace on the switch (an
// interface and an address on the subnet, no default route). Only one
// root host per Net.
func (n *Net) AddRoot() (*Host, error) { return n.add("root", true) }

func (n *Net) add(name string, root bool) (*Host, error) {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return nil, errors.New("netns: Net is closed")
	}
	i := n.next
	n.next++
	n.mu.Unlock()
	h := &Host{n: n, Addr: n.subnet + strconv.Itoa(i), swPort: fmt.Sprintf("p%d", i)}
	hostEnd := fmt.Sprintf("%sh%d", n.id, i) // unique in the root namespace until moved
	if len(hostEnd) > 15 {
		return nil, fmt.Errorf("netns: interface name %q is too long", hostEnd)
	}
	steps := [][]string{{"link", "add", hostEnd, "type", "veth", "peer", "name", h.swPort, "netns", n.sw}}
	if root {
		h.link = hostEnd
	} else {
		h.Name = n.id + name
		h.link = "eth0"
		steps = append([][]string{{"netns", "add", h.Name}}, steps...)
		steps = append(steps,
			[]string{"link", "set", hostEnd, "netns", h.Name},
			[]string{"-n", h.Name, "link", "set", hostEnd, "name", "eth0"},
			[]string{"-n", h.Name, "link", "set", "lo", "up"},
		)
	}
	steps = append(steps,
		[]string{"-n", n.sw, "link", "set", h.swPort, "master", "br0"},
		[]string{"-n", n.sw, "link", "set", h.swPort, "up"},
		h.ip("addr", "add", h.Addr+"/24", "dev", h.link),
		h.ip("link", "set", h.link, "up"),
	)
	if !root {
		steps = append(steps, h.ip("route", "add", "default", "dev", h.link))
	}
	n.mu.Lock()
	n.hosts = append(n.hosts, h)
	n.mu.Unlock()
	for _, s := range steps {
		if err := run(s...); err != nil {
			return nil, err
		}
	}
	return h, nil
}

// ip is an ip(8) command line run in the host's namespace.
func (h *Host) ip(args ...string) []string {
	if h.Name == "" {
		return args
	}
	return append([]string{"-n", h.Name}, args...)
}

// Command returns a command that runs in the host's namespace.
func (h *Host) Command(name string, args ...string) *exec.Cmd {
	if h.Name == "" {
		return exec.Command(name, args...)
	}
	return exec.Command("ip", append([]string{"netns", "exec", h.Name, name}, args...)...)
}

// LinkDown cuts the host off the switch (ip link set down), as a pulled
// cable would; LinkUp plugs it back.
func (h *Host) LinkDown() error { return run(h.ip("link", "set", h.link, "down")...) }

// LinkUp plugs the host back in, with its address and default route.
func (h *Host) LinkUp() error {
	if err := run(h.ip("link", "set", h.link, "up")...); err != nil {
		return err
	}
	if h.Name != "" {
		// The kernel drops the default route with the link.
		exec.Command("ip", h.ip("route", "replace", "default", "dev", h.link)...).Run()
	}
	return nil
}

// Close removes every host and the switch. It is idempotent.
func (n *Net) Close() error {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return nil
	}
	n.closed = true
	hosts := n.hosts
	n.mu.Unlock()
	var errs []error
	for _, h := range hosts {
		if h.Name == "" {
			if err := run("link", "del", h.link); err != nil {
				errs = append(errs, err)
			}
			continue
		}
		if err := run("netns", "del", h.Name); err != nil {
			errs = append(errs, err)
		}
	}
	if err := run("netns", "del", n.sw); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
