// Package config loads a kvconnect node's settings in layers, later layers
// winning: built-in defaults, a config built in code, a config file (YAML,
// TOML or JSON), a vLLM kv_transfer_config JSON, the environment
// (KVCONNECT_* and the SGLang / Mooncake names operators already set),
// then command-line flags. Every effective value remembers where it came
// from. Every bad key or value is a *Problem naming the key, the value, its
// source, what is allowed and, where one is close, what was probably
// meant; Load reports all of them at once, joined with errors.Join.
//
// Config is the typed result (connector.Config is the same type); Load
// returns it inside a Loaded, which also carries the source of every
// value, notes about conflicts resolved, warnings, and the vLLM fields that
// were accepted but have no meaning for kvconnect.
package config
