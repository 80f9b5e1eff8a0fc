package main

import (
	"fmt"
	"runtime"

	"github.com/spf13/cobra"

	"github.com/kvconnect/kvconnect/internal/version"
	"github.com/kvconnect/kvconnect/plugins"
)

func init() { subcommands = append(subcommands, newVersionCommand) }

func newVersionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print kvconnect's version and plugin protocol version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fmt.Fprintf(cmd.OutOrStdout(), "kvconnect %s (plugin protocol %d, %s, %s/%s)\n",
				version.Version, plugins.APIVersion, runtime.Version(), runtime.GOOS, runtime.GOARCH)
			return nil
		},
	}
}
