//go:build linux

package efa

import (
	"fmt"
	"syscall"

	"github.com/kvconnect/kvconnect/plugins"
)

// libfabric error codes (fi_errno(3)): the errno values of the platform,
// plus libfabric's own from 256 up. Calls return them negated.
const (
	fiEAGAIN       = int(syscall.EAGAIN)
	fiENODATA      = int(syscall.ENODATA)
	fiENOSYS       = int(syscall.ENOSYS)
	fiECANCELED    = int(syscall.ECANCELED)
	fiEOTHER       = 256
	fiETOOSMALL    = 257
	fiEOPBADSTATE  = 258
	fiEAVAIL       = 259
	fiEBADFLAGS    = 260
	fiENOEQ        = 261
	fiEDOMAIN      = 262
	fiENOCQ        = 263
	fiECRC         = 264
	fiETRUNC       = 265
	fiENOKEY       = 266
	fiENOAV        = 267
	fiEOVERRUN     = 268
	fiENORX        = 269
	fiEKEYREJECTED = int(syscall.EKEYREJECTED)
)

var fiNames = map[int]string{
	int(syscall.EPERM): "FI_EPERM", int(syscall.ENOENT): "FI_ENOENT", int(syscall.EINTR): "FI_EINTR",
	int(syscall.EIO): "FI_EIO", int(syscall.E2BIG): "FI_E2BIG", int(syscall.EBADF): "FI_EBADF",
	fiEAGAIN: "FI_EAGAIN", int(syscall.ENOMEM): "FI_ENOMEM", int(syscall.EACCES): "FI_EACCES",
	int(syscall.EFAULT): "FI_EFAULT", int(syscall.EBUSY): "FI_EBUSY", int(syscall.ENODEV): "FI_ENODEV",
	int(syscall.EINVAL): "FI_EINVAL", int(syscall.EMFILE): "FI_EMFILE", int(syscall.ENOSPC): "FI_ENOSPC",
	fiENOSYS: "FI_ENOSYS", int(syscall.ENOMSG): "FI_ENOMSG", fiENODATA: "FI_ENODATA",
	int(syscall.EOVERFLOW): "FI_EOVERFLOW", int(syscall.EMSGSIZE): "FI_EMSGSIZE",
	int(syscall.ENOPROTOOPT): "FI_ENOPROTOOPT", int(syscall.EOPNOTSUPP): "FI_EOPNOTSUPP",
	int(syscall.EADDRINUSE): "FI_EADDRINUSE", int(syscall.EADDRNOTAVAIL): "FI_EADDRNOTAVAIL",
	int(syscall.ENETDOWN): "FI_ENETDOWN", int(syscall.ENETUNREACH): "FI_ENETUNREACH",
	int(syscall.ECONNABORTED): "FI_ECONNABORTED", int(syscall.ECONNRESET): "FI_ECONNRESET",
	int(syscall.ENOBUFS): "FI_ENOBUFS", int(syscall.EISCONN): "FI_EISCONN", int(syscall.ENOTCONN): "FI_ENOTCONN",
	int(syscall.ESHUTDOWN): "FI_ESHUTDOWN", int(syscall.ETIMEDOUT): "FI_ETIMEDOUT",
	int(syscall.ECONNREFUSED): "FI_ECONNREFUSED", int(syscall.EHOSTDOWN): "FI_EHOSTDOWN",
	int(syscall.EHOSTUNREACH): "FI_EHOSTUNREACH", int(syscall.EALREADY): "FI_EALREADY",
	int(syscall.EINPROGRESS): "FI_EINPROGRESS", fiECANCELED: "FI_ECANCELED", fiEKEYREJECTED: "FI_EKEYREJECTED",
	fiEOTHER: "FI_EOTHER", fiETOOSMALL: "FI_ETOOSMALL", fiEOPBADSTATE: "FI_EOPBADSTATE", fiEAVAIL: "FI_EAVAIL",
	fiEBADFLAGS: "FI_EBADFLAGS", fiENOEQ: "FI_ENOEQ", fiEDOMAIN: "FI_EDOMAIN", fiENOCQ: "FI_ENOCQ",
	fiECRC: "FI_ECRC", fiETRUNC: "FI_ETRUNC", fiENOKEY: "FI_ENOKEY", fiENOAV: "FI_ENOAV",
	fiEOVERRUN: "FI_EOVERRUN", fiENORX: "FI_ENORX",
}

// fiName is the symbolic name of a libfabric code (either sign).
func fiName(code int) string {
	if code < 0 {
		code = -code
	}
	if n, ok := fiNames[code]; ok {
		return n
	}
	return fmt.Sprintf("FI_E%d", code)
}

// opSentinel maps the error of a failed RMA operation (a CQ error entry's
// err, or a post's return code, either sign) to the SDK sentinel that
// says what the caller can do about it.
func opSentinel(code int) error {
	if code < 0 {
		code = -code
	}
	switch code {
	case int(syscall.EACCES), int(syscall.EPERM), fiEKEYREJECTED, fiENOKEY, int(syscall.EFAULT):
		// The target refused the key or the range: the region is not (or
		// no longer) registered there.
		return plugins.ErrUnknownRegion
	case int(syscall.ECONNREFUSED), int(syscall.ECONNRESET), int(syscall.ECONNABORTED), int(syscall.ENOTCONN),
		int(syscall.ESHUTDOWN), int(syscall.EHOSTDOWN), int(syscall.EHOSTUNREACH), int(syscall.ENETDOWN),
		int(syscall.ENETUNREACH), int(syscall.EIO), fiEOTHER, int(syscall.EADDRNOTAVAIL):
		return plugins.ErrPeerUnreachable
	case int(syscall.ETIMEDOUT):
		return plugins.ErrTimeout
	case fiECANCELED:
		return plugins.ErrCanceled
	case int(syscall.EINVAL), int(syscall.EMSGSIZE), fiETOOSMALL, fiETRUNC, fiEBADFLAGS:
		return plugins.ErrInvalidArgument
	}
	return plugins.ErrPeerUnreachable
}
