// Package version holds kvconnect's version, set at build time with
// -ldflags "-X github.com/kvconnect/kvconnect/internal/version.Version=...".
package version

// Version is the kvconnect release.
var Version = "0.1.0-dev"
