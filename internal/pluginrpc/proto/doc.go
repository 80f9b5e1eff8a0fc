// Package proto holds the gRPC service between the kvconnect host and a
// transport plugin (transport.proto) and its generated Go code. Regenerate
// with `make generate`; the checked-in files must match byte for byte.
package proto
