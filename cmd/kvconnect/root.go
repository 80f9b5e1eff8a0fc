package main

import (
	"os"

	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"github.com/kvconnect/kvconnect/config"
	"github.com/kvconnect/kvconnect/internal/logging"
)

func newRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:           "kvconnect",
		Short:         "kvconnect moves KV cache between LLM serving nodes over pluggable transports",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	config.RegisterFlags(root.PersistentFlags())
	for _, newCmd := range subcommands {
		root.AddCommand(newCmd())
	}
	return root
}

// subcommands are added to the root command; each command's file appends
// its constructor in an init function.
var subcommands []func() *cobra.Command

// environ is the environment the configuration is read from; tests
// replace it.
var environ = os.Environ

// loadConfig loads the layered configuration for cmd (the config flags
// every command takes, and the environment) and builds its logger. Notes
// on resolved conflicts and warnings are logged at warn level.
// loadLogging is loadConfig for a command that uses the log settings
// only (metadata-server): a problem in a node's settings, which the
// environment may hold for another process, does not stop it; one in
// the log settings, or a config file that cannot be read, does.
func loadLogging(cmd *cobra.Command) (*zap.Logger, error) {
	loaded, err := config.Load(config.Options{Flags: cmd.Flags(), Environ: environ()})
	problems := config.Problems(err)
	if err != nil && len(problems) == 0 {
		return nil, err
	}
	for _, p := range problems {
		switch p.Key {
		case "log_level", "log_format", "config", "kv_transfer_config":
			return nil, err
		}
	}
	return logging.New(loaded.LogLevel, loaded.LogFormat)
}

func loadConfig(cmd *cobra.Command) (*config.Loaded, *zap.Logger, error) {
	loaded, err := config.Load(config.Options{Flags: cmd.Flags(), Environ: environ()})
	if err != nil {
		return nil, nil, err
	}
	log, err := logging.New(loaded.LogLevel, loaded.LogFormat)
	if err != nil {
		return nil, nil, err
	}
	for _, n := range loaded.Notes {
		log.Warn("config: " + n)
	}
	for _, p := range loaded.Warnings {
		log.Warn(p.Error())
	}
	for _, ig := range loaded.Ignored {
		log.Debug("config: ignored "+describeIgnored(ig), zap.String("field", ig.Field))
	}
	return loaded, log, nil
}
