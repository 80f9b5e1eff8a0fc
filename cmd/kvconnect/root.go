package main

import (
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

// loadConfig loads the layered configuration for cmd and builds its logger.
func loadConfig(cmd *cobra.Command) (*config.Loaded, *zap.Logger, error) {
	loaded, err := config.Load(config.Options{Flags: cmd.Flags()})
	if err != nil {
		return nil, nil, err
	}
	log, err := logging.New(loaded.LogLevel, loaded.LogFormat)
	if err != nil {
		return nil, nil, err
	}
	return loaded, log, nil
}
