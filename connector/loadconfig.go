package connector

import (
	"github.com/kvconnect/kvconnect/config"
	"github.com/kvconnect/kvconnect/transports"
)

// LoadOptions says where LoadConfig reads from: a config file, a vLLM
// kv_transfer_config, a Config built in code (Base), the environment and
// flags. See config.Options.
type LoadOptions = config.Options

// ConfigProblem is one thing wrong with a configuration: the key, the
// value as written, where it came from, what is allowed and, when one is
// close, a suggestion. See config.Problem.
type ConfigProblem = config.Problem

// LoadConfig builds a Config for embedders the way the kvconnect CLI does:
// built-in defaults, then opts.Base (a Config built in code), the config
// file, a vLLM kv_transfer_config, the environment (KVCONNECT_* and the
// SGLang / Mooncake variables) and flags, later layers winning. A
// per-device device_name map is resolved for the local device index.
//
// The error joins every problem found; each is a *ConfigProblem wrapping
// ErrInvalidArgument or ErrNotSupported, so errors.Is works on the whole
// and config.Problems(err) (or errors.As) gives the parts. For the source
// of every value, notes and warnings, call config.Load.
//
//	cfg, err := connector.LoadConfig(connector.LoadOptions{ConfigFile: "kvconnect.yaml"})
//	if err != nil {
//		for _, p := range config.Problems(err) {
//			log.Printf("%s: %s", p.Key, p.Text())
//		}
//		return err
//	}
//	c, err := connector.New(ctx, cfg)
func LoadConfig(opts LoadOptions) (Config, error) {
	loaded, err := config.Load(opts)
	if err != nil {
		return Config{}, err
	}
	return loaded.Config, nil
}

// A transports.Catalog is what config.Options.Catalog takes.
var _ config.TransportCatalog = (*transports.Catalog)(nil)
