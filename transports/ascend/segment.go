package ascend

import (
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"

	"github.com/kvconnect/kvconnect/plugins"
)

// SegmentNameForm is the form of an Ascend segment name, with an example,
// as error messages show it.
const SegmentNameForm = "host:port:npu_N, e.g. 10.0.0.1:15000:npu_3"

// npuPrefix starts the last part of a segment name.
const npuPrefix = "npu_"

// MaxNPUID is the largest NPU id a segment name or option may carry. Real
// hosts have at most a few dozen NPUs; the bound only keeps ids in an int32.
const MaxNPUID = 1<<31 - 1

// FormatSegmentName writes the name SGLang and Mooncake give an Ascend
// node: host:port:npu_N, with an IPv6 host in brackets
// ([fd00::1]:15000:npu_0). It does not validate its arguments;
// ParseSegmentName does.
func FormatSegmentName(host string, port, npu int) string {
	return net.JoinHostPort(host, strconv.Itoa(port)) + ":" + npuPrefix + strconv.Itoa(npu)
}

// ParseSegmentName splits an Ascend segment name host:port:npu_N into its
// parts. host is an IPv4 address, a host name, or an IPv6 address in
// brackets ([::1]:1234:npu_0, returned without the brackets); port is
// 1-65535; N is a non-negative decimal NPU id. Errors name the part that is
// wrong and show the expected form; they wrap plugins.ErrInvalidArgument.
func ParseSegmentName(s string) (host string, port int, npu int, err error) {
	bad := func(format string, args ...any) (string, int, int, error) {
		return "", 0, 0, fmt.Errorf("ascend: segment name %q: %s; expected %s: %w",
			s, fmt.Sprintf(format, args...), SegmentNameForm, plugins.ErrInvalidArgument)
	}
	if s == "" {
		return bad("empty")
	}
	i := strings.LastIndexByte(s, ':')
	if i < 0 {
		return bad("no port and no npu_N part")
	}
	hostPort, npuPart := s[:i], s[i+1:]
	if !strings.HasPrefix(npuPart, npuPrefix) {
		if _, perr := strconv.Atoi(npuPart); perr == nil && !strings.Contains(hostPort, ":") {
			return bad("missing the npu_N part after %q", s)
		}
		return bad("last part %q must be npu_N", npuPart)
	}
	digits := npuPart[len(npuPrefix):]
	if npu, err = parseDecimal(digits, MaxNPUID); err != nil {
		return bad("NPU id %q in %q %v (want 0-%d)", digits, npuPart, err, MaxNPUID)
	}
	if hostPort == "" {
		return bad("no host:port before %q", npuPart)
	}
	h, p, serr := net.SplitHostPort(hostPort)
	if serr != nil {
		switch {
		case strings.Count(hostPort, ":") == 0:
			return bad("no port in %q", hostPort)
		case strings.Count(hostPort, ":") > 1 && !strings.HasPrefix(hostPort, "["):
			return bad("IPv6 host in %q must be in brackets, e.g. [fd00::1]:15000:npu_3", hostPort)
		}
		return bad("host:port %q: %v", hostPort, splitReason(serr))
	}
	if port, err = parseDecimal(p, 65535); err != nil || port == 0 {
		if err == nil {
			err = fmt.Errorf("is 0")
		}
		return bad("port %q %v (want 1-65535)", p, err)
	}
	if strings.HasPrefix(hostPort, "[") {
		if err := validIPv6(h); err != nil {
			return bad("host [%s] %v", h, err)
		}
	} else if err := ValidHost(h); err != nil {
		return bad("host %q %v", h, err)
	}
	return h, port, npu, nil
}

// splitReason is net.SplitHostPort's error without the address it repeats.
func splitReason(err error) string {
	if ae, ok := err.(*net.AddrError); ok {
		return ae.Err
	}
	return err.Error()
}

// parseDecimal parses digits only (no sign, no spaces) in [0, max].
func parseDecimal(s string, max int) (int, error) {
	if s == "" {
		return 0, fmt.Errorf("is empty")
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return 0, fmt.Errorf("is not a decimal number")
		}
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil || n > uint64(max) {
		return 0, fmt.Errorf("is out of range")
	}
	return int(n), nil
}

// validIPv6 checks a bracketed host: an IPv6 address, optionally with a
// zone (fe80::1%eth0).
func validIPv6(h string) error {
	a, err := netip.ParseAddr(h)
	if err != nil || !a.Is6() {
		return fmt.Errorf("is not an IPv6 address (brackets are only for IPv6)")
	}
	// netip accepts any bytes after '%'; a zone is an interface name or
	// index, and one with ']' or ':' would not survive the bracketed form.
	for _, c := range a.Zone() {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return fmt.Errorf("has zone %q with %q (a zone is an interface name: letters, digits, '-', '_', '.')", a.Zone(), c)
		}
	}
	return nil
}

// ValidHost checks the host part of a segment name written without
// brackets: an IPv4 address or a host name (labels of letters, digits, '-'
// and '_', separated by dots, at most 253 characters). An IPv6 address is
// rejected: it needs brackets in a segment name.
func ValidHost(h string) error {
	switch {
	case h == "":
		return fmt.Errorf("is empty")
	case strings.Contains(h, ":"):
		return fmt.Errorf("contains ':' (an IPv6 address must be in brackets)")
	case len(h) > 253:
		return fmt.Errorf("is longer than 253 characters")
	}
	numeric := true
	for _, c := range h {
		if (c < '0' || c > '9') && c != '.' {
			numeric = false
			break
		}
	}
	if numeric {
		if a, err := netip.ParseAddr(h); err != nil || !a.Is4() {
			return fmt.Errorf("is not a valid IPv4 address")
		}
		return nil
	}
	for _, label := range strings.Split(h, ".") {
		if label == "" {
			return fmt.Errorf("has an empty label (leading, trailing or double dot)")
		}
		if len(label) > 63 {
			return fmt.Errorf("has a label longer than 63 characters")
		}
		if label[0] == '-' || label[len(label)-1] == '-' {
			return fmt.Errorf("has a label %q that starts or ends with '-'", label)
		}
		for _, c := range label {
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return fmt.Errorf("contains %q (allowed: letters, digits, '-', '_', '.')", c)
			}
		}
	}
	return nil
}
