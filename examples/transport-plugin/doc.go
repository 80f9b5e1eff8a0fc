// Package transportplugin is an out-of-tree kvconnect transport plugin:
// the simpletcp transport (package simpletcp) and its plugin binary
// (cmd/kvconnect-transport-simpletcp), built on the public SDK only.
package transportplugin
