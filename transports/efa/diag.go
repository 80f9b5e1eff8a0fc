package efa

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/kvconnect/kvconnect/plugins"
)

// What an EFA host needs, in the order people usually miss it. These are
// the hints of every diagnosis that says the efa provider is not usable.
var efaHints = []string{
	"EFA needs an EC2 instance type that supports it (e.g. p4d, p5, trn1, c5n, hpc7g) launched with an EFA network interface (InterfaceType=efa)",
	"the efa kernel driver must be loaded (lsmod | grep efa; the AWS EFA installer or the distribution's kernel ships it)",
	"the process must see the device: /dev/infiniband/uverbs* (in a container: docker run --device=/dev/infiniband/uverbs0, or the aws-efa-k8s-device-plugin resource vpc.amazonaws.com/efa)",
	"rdma-core's libefa must be installed (Debian/Ubuntu package ibverbs-providers, or the AWS EFA installer)",
	"libfabric must be built with the efa provider: `fi_info -p efa` must list it (the AWS EFA installer's is /opt/amazon/efa/lib64/libfabric.so.1; point transports.efa.library at it)",
	"or run without EFA: protocol tcp, or keep the fallback chain (the connector falls back to tcp)",
}

// libraryHints say how to get libfabric.
var libraryHints = []string{
	"install libfabric: Debian/Ubuntu `apt-get install libfabric1` (the efa provider also needs ibverbs-providers for libefa)",
	"on AWS, the EFA installer puts libfabric in /opt/amazon/efa/lib64: set transports.efa.library to /opt/amazon/efa/lib64/libfabric.so.1 or add that directory to the loader path",
	"or run without EFA: protocol tcp, or keep the fallback chain (the connector falls back to tcp)",
}

// hostFacts is what the host shows of RDMA/EFA, for diagnoses.
type hostFacts struct {
	EFAModule bool     // /sys/module/efa exists
	Uverbs    []string // /dev/infiniband/uverbs*
	IBDevices []string // /sys/class/infiniband/*
}

// sysRoot lets tests point the probe at a fake tree.
var sysRoot = "/"

func probeHost() hostFacts {
	var h hostFacts
	if _, err := os.Stat(filepath.Join(sysRoot, "sys/module/efa")); err == nil {
		h.EFAModule = true
	}
	h.Uverbs, _ = filepath.Glob(filepath.Join(sysRoot, "dev/infiniband/uverbs*"))
	if ents, err := os.ReadDir(filepath.Join(sysRoot, "sys/class/infiniband")); err == nil {
		for _, e := range ents {
			h.IBDevices = append(h.IBDevices, e.Name())
		}
	}
	sort.Strings(h.Uverbs)
	sort.Strings(h.IBDevices)
	return h
}

func (h hostFacts) String() string {
	var parts []string
	if h.EFAModule {
		parts = append(parts, "the efa kernel module is loaded")
	} else {
		parts = append(parts, "the efa kernel module is not loaded (no /sys/module/efa)")
	}
	if len(h.Uverbs) == 0 {
		parts = append(parts, "no /dev/infiniband/uverbs* device is visible")
	} else {
		parts = append(parts, "devices "+strings.Join(h.Uverbs, ", "))
	}
	if len(h.IBDevices) == 0 {
		parts = append(parts, "no RDMA devices in /sys/class/infiniband")
	} else {
		parts = append(parts, "RDMA devices "+strings.Join(h.IBDevices, ", "))
	}
	return strings.Join(parts, "; ")
}

// libraryError is the diagnosis of a libfabric that cannot be loaded.
func libraryError(path, reason string) *plugins.InitError {
	return &plugins.InitError{
		Transport: Name,
		Step:      plugins.StepLoadLibrary,
		Cause:     fmt.Sprintf("cannot load libfabric (%s): %s", path, reason),
		Hints:     libraryHints,
		Err:       fmt.Errorf("efa: libfabric %s not loadable: %w", path, plugins.ErrUnavailable),
	}
}

// getinfoError is the diagnosis of an fi_getinfo that found nothing (or
// failed): code is libfabric's negative return, text its fi_strerror.
// domains lists the provider's domains when it has some but not the one
// asked for.
func getinfoError(provider, domain string, code int, name, text string, domains []string, facts hostFacts) *plugins.InitError {
	ie := &plugins.InitError{
		Transport:  Name,
		Step:       plugins.StepProbeDevices,
		NativeCode: int64(code),
		NativeName: name,
	}
	what := fmt.Sprintf("fi_getinfo(FI_VERSION(1,17), provider %q, FI_EP_RDM with FI_RMA) returned %d %s (%s)", provider, code, name, text)
	switch {
	case domain != "" && len(domains) > 0:
		ie.Cause = fmt.Sprintf("%s: provider %q has no domain %q; its domains are %s", what, provider, domain, strings.Join(domains, ", "))
		ie.Hints = []string{
			fmt.Sprintf("set transports.efa.domain (or device_name) to one of: %s", strings.Join(domains, ", ")),
			fmt.Sprintf("`fi_info -p '%s' -t FI_EP_RDM -c FI_RMA` lists them", provider),
		}
	case provider == DefaultProvider:
		ie.Cause = fmt.Sprintf("%s: this host has no usable EFA device: %s", what, facts)
		if domain != "" {
			ie.Cause += fmt.Sprintf(" (domain %q was asked for)", domain)
		}
		ie.Hints = efaHints
	default:
		ie.Cause = fmt.Sprintf("%s: libfabric has no provider %q offering RDM endpoints with RMA here", what, provider)
		if domain != "" {
			ie.Cause += fmt.Sprintf(" (domain %q was asked for)", domain)
		}
		ie.Hints = []string{
			fmt.Sprintf("`fi_info -l` lists the providers this libfabric has; `fi_info -p '%s' -t FI_EP_RDM -c FI_RMA` what %s offers", provider, provider),
			`transports.efa.provider is "efa" on AWS; "tcp;ofi_rxm" and "shm" are software providers for tests`,
			"or run without EFA: protocol tcp, or keep the fallback chain (the connector falls back to tcp)",
		}
	}
	ie.Err = fmt.Errorf("efa: provider %q unavailable: %w", provider, plugins.ErrUnavailable)
	return ie
}
